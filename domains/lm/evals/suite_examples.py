"""A synthetic long-context suite, generated offline and seeded, byte level: RULER-style
needle-in-a-haystack tasks and BABILong-style bAbI questions hidden in text.

Every example is a prompt of exactly L bytes (ids = UTF-8 bytes), followed by the answer the
model should produce greedily:

    [haystack with statements inserted between sentences] "\n" [question] -> [answer]

Tasks (RULER, Hsieh et al. 2024; BABILong, Kuratov et al. 2024; bAbI, Weston et al. 2015):
  * niah_passkey: "The pass key is 12345. Remember it. 12345 is the pass key."
  * niah_number: "One of the special magic numbers for <word> is: 1234567."
  * niah_uuid: the same with a UUID as the value.
  * niah_multikey: four such needles with different keys; the question asks for one.
  * niah_multivalue: four needles with the same key and different numbers; all of them are
    asked for (scored by the fraction recalled).
  * variable_tracking: "VAR ABCDE = 12345." then a chain of four "VAR X = VAR Y." hops, and
    a distractor chain from another value; the question asks for every variable holding the
    first value (scored by the fraction recalled).
  * babi_qa1 (one supporting fact): people move between places; "Where is Mary?"
  * babi_qa2 (two supporting facts): someone picks an object up and moves; "Where is the
    football?"
  * babi_qa3 (three supporting facts): "Where was the football before the kitchen?"
    (babi_qa1-3 are generated here in bAbI's style, a fresh story for every example.)
  * babilong_qa1 ... babilong_qa5: BABILong's format of bAbI tasks 1-5 as published
    (`titans_seq.data.babi`): one question of a story, the story's facts before it hidden in
    the haystack in their order, the key statement the last supporting fact. These draw
    their questions from a split: "train" (the first 90% of the train file's stories),
    "valid" (the rest) or "test" (the test file); the other tasks are separated by seed.
  * passkey: the passkey retrieval task the `passkey` recipes train on (`passkey.py`:
    RULER's single needle in the noise haystack, with its own layout); its examples are
    that task's, so the suite scores a passkey-trained model on its own distribution.

Haystacks: "noise" (RULER's repeated "The grass is green. ..." sentences) or any text
source (a registered corpus such as "wikitext2-test" or "tinyshakespeare", a text file or
folder): a window of the corpus at a seeded offset, starting after a space.

Depth: the key statement (the queried needle, the last link of the chain, the question's
last supporting fact) starts at the sentence boundary nearest to depth x haystack length;
statements before it are spread uniformly over the haystack before it, those after it over
the rest, in their order (facts keep their chronology). An example drawn without a depth
(training) is at depth 0 or 1 a tenth of the time each, else at a uniform one. Example
`index` of a task, length and depth is a pure function of (seed, task, length, index,
depth); its statements, question and answer depend on (seed, task, index) only, so a
length sweep asks the same questions in longer haystacks. A babilong example is the
`index`-th question in a seeded order of its split whose facts fit in the length (at
lengths where every story fits, the same question at every length).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import string
import uuid
from collections.abc import Callable, Sequence

from .needles import NOISE, check_depth, check_int, nearest
from .passkey import PasskeyRetrieval

TASKS: dict[str, Callable] = {}  # the tasks made of statements hidden in a haystack
BABILONG = {f"babilong_qa{n}": n for n in range(1, 6)}  # bAbI tasks 1-5 from the files
# the splits of `titans_seq.data.babi`, named here so that the data package is imported only
# when a bAbI task is asked for
SPLITS = ("train", "valid", "test")
PASSKEY = "passkey"  # the passkey retrieval task, laid out by `passkey.PasskeyRetrieval`
TRAINING_END_SHARE = 0.1  # of examples drawn without a depth, at each end (`_training_depth`)
QUESTION_BREAK = b"\n"  # between the haystack (which may end inside a sentence) and question
NAMES = ("Mary", "John", "Sandra", "Daniel")
PLACES = ("bathroom", "hallway", "kitchen", "garden", "office", "bedroom")
OBJECTS = ("football", "apple", "milk")
MOVES = ("moved", "went", "journeyed", "travelled")
KEY_WORDS = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "harbor", "iris", "juniper",
    "kelp", "lumen", "maple", "nectar", "onyx", "pepper", "quartz", "raven", "sable", "tundra",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Statements:
    """What a task hides in the haystack and asks about.

    statements: texts in their order in the prompt; key: the index of the statement placed
    at the requested depth; question: the text after the haystack; answers: the expected
    items (all must appear, in order, for an exact match); recall: scored by the fraction
    of answers produced (RULER's multi-value and variable-tracking metric) rather than
    exact match."""

    statements: tuple[str, ...]
    key: int
    question: str
    answers: tuple[str, ...]
    recall: bool = False

    @property
    def answer(self) -> str:
        return ", ".join(self.answers) if self.recall else self.answers[0]


def task(name: str):
    def register(fn):
        TASKS[name] = fn
        return fn

    return register


def _number(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10**digits))


@task("niah_passkey")
def _passkey(rng: random.Random) -> Statements:
    key = "".join(rng.choice(string.digits) for _ in range(5))
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    return Statements((needle,), 0, "What is the pass key? The pass key is ", (key,))


def _magic(word: str, value: str, kind: str) -> str:
    return f"One of the special magic {kind}s for {word} is: {value}. "


def _magic_question(word: str, kind: str) -> str:
    return f"What is the special magic {kind} for {word}? The special magic {kind} for {word} is: "


@task("niah_number")
def _number_needle(rng: random.Random) -> Statements:
    word, value = rng.choice(KEY_WORDS), _number(rng, 7)
    return Statements(
        (_magic(word, value, "number"),), 0, _magic_question(word, "number"), (value,)
    )


@task("niah_uuid")
def _uuid_needle(rng: random.Random) -> Statements:
    word, value = rng.choice(KEY_WORDS), str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return Statements((_magic(word, value, "uuid"),), 0, _magic_question(word, "uuid"), (value,))


@task("niah_multikey")
def _multikey(rng: random.Random) -> Statements:
    words = rng.sample(KEY_WORDS, 4)
    values = [_number(rng, 7) for _ in words]
    key = rng.randrange(4)
    needles = tuple(_magic(w, v, "number") for w, v in zip(words, values))
    return Statements(needles, key, _magic_question(words[key], "number"), (values[key],))


@task("niah_multivalue")
def _multivalue(rng: random.Random) -> Statements:
    word = rng.choice(KEY_WORDS)
    values = tuple(_number(rng, 7) for _ in range(4))
    question = (
        f"What are all the special magic numbers for {word}? "
        f"The special magic numbers for {word} are: "
    )
    needles = tuple(_magic(word, v, "number") for v in values)
    return Statements(needles, 3, question, values, recall=True)


def _variable(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = "".join(rng.choice(string.ascii_uppercase) for _ in range(5))
        if name not in taken:
            taken.add(name)
            return name


@task("variable_tracking")
def _variable_tracking(rng: random.Random) -> Statements:
    taken: set[str] = set()
    chains = []
    for value in (_number(rng, 5), _number(rng, 5)):
        names = [_variable(rng, taken) for _ in range(5)]
        lines = [f"VAR {names[0]} = {value}. "]
        lines += [f"VAR {b} = VAR {a}. " for a, b in zip(names, names[1:])]
        chains.append((value, names, lines))
    (value, names, lines), (_, _, distractor) = chains
    # interleave the two chains, each in its own order
    order = [0] * 5 + [1] * 5
    rng.shuffle(order)
    picks = {0: iter(lines), 1: iter(distractor)}
    statements = tuple(next(picks[c]) for c in order)
    key = max(i for i, c in enumerate(order) if c == 0)  # the asked chain's last link
    question = f"Find all variables that are assigned the value {value}. Answer: "
    return Statements(statements, key, question, tuple(names), recall=True)


def _moves(rng: random.Random, people: Sequence[str], count: int) -> list[tuple[str, str]]:
    """`count` (person, place) moves, no one moving to where they already are."""
    where: dict[str, str] = {}
    moves = []
    for _ in range(count):
        person = rng.choice(people)
        place = rng.choice([p for p in PLACES if p != where.get(person)])
        where[person] = place
        moves.append((person, place))
    return moves


def _move_text(rng: random.Random, person: str, place: str) -> str:
    return f"{person} {rng.choice(MOVES)} to the {place}. "


@task("babi_qa1")
def _qa1(rng: random.Random) -> Statements:
    moves = _moves(rng, NAMES, 6)
    person, place = moves[-1] if rng.random() < 0.5 else rng.choice(moves)
    last = max(i for i, (p, _) in enumerate(moves) if p == person)
    texts = tuple(_move_text(rng, p, q) for p, q in moves)
    return Statements(texts, last, f"Where is {person}? Answer: ", (moves[last][1],))


@task("babi_qa2")
def _qa2(rng: random.Random) -> Statements:
    holder, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    before, after = _moves(rng, NAMES, 3), _moves(rng, NAMES, 3)
    start = next((q for p, q in reversed(before) if p == holder), None)
    final = rng.choice([p for p in PLACES if p != start])
    texts = [_move_text(rng, p, q) for p, q in before]
    texts += [f"{holder} picked up the {obj}. "]
    texts += [_move_text(rng, p, q) for p, q in after if p != holder]
    texts += [_move_text(rng, holder, final)]
    return Statements(tuple(texts), len(texts) - 1, f"Where is the {obj}? Answer: ", (final,))


@task("babi_qa3")
def _qa3(rng: random.Random) -> Statements:
    holder, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    first, second = rng.sample(PLACES, 2)
    others = [n for n in NAMES if n != holder]
    texts = [_move_text(rng, p, q) for p, q in _moves(rng, others, 2)]
    texts += [_move_text(rng, holder, first), f"{holder} picked up the {obj}. "]
    texts += [_move_text(rng, p, q) for p, q in _moves(rng, others, 2)]
    texts += [_move_text(rng, holder, second)]
    question = f"Where was the {obj} before the {second}? Answer: "
    return Statements(tuple(texts), len(texts) - 1, question, (first,))


# ------------------------------------------------------------------------------- haystacks
@functools.lru_cache(maxsize=8)
def _corpus_bytes(source: str) -> bytes:
    if source == "noise":
        return NOISE.encode("utf-8")
    from ..data import read_documents

    text = "".join(read_documents(source))
    if not text.strip():
        raise ValueError(f"haystack source {source!r} holds no text")
    return text.encode("utf-8")


def _haystack(source: str, length: int, rng: random.Random) -> bytes:
    """`length` bytes of the source, from a seeded offset just after a space (the noise
    text: from a seeded sentence)."""
    corpus = _corpus_bytes(source)
    repeated = corpus * (length // len(corpus) + 2)
    if source == "noise":
        starts = [i + 2 for i in range(len(corpus)) if corpus[i : i + 2] == b". "]
        start = rng.choice(starts) % len(corpus)
    else:
        start = rng.randrange(len(corpus))
        space = repeated.find(b" ", start)
        start = (space + 1) if 0 <= space < start + 1000 else start
    return repeated[start : start + length]


def _boundaries(hay: bytes) -> list[int]:
    """Positions where a statement may go: 0, the end, and after every sentence (". " or a
    newline; always between whole UTF-8 characters)."""
    spots = {0, len(hay)} | {i + 1 for i, b in enumerate(hay) if b == 0x0A}
    spots |= {i + 2 for i in range(len(hay) - 1) if hay[i : i + 2] == b". "}
    return sorted(spots)


@dataclasses.dataclass(frozen=True)
class SuiteExample:
    """prompt: exactly `length` bytes; answer: the expected text; depth: where the key
    statement starts, as a fraction of the haystack."""

    task: str
    prompt: bytes
    answer: str
    answers: tuple[str, ...]
    recall: bool
    depth: float

    def score(self, generated: str) -> float:
        """Exact match of the answer at the start of `generated` (1 or 0); for recall
        tasks the fraction of expected items found in it."""
        if self.recall:
            return sum(a in generated for a in self.answers) / len(self.answers)
        return float(generated.startswith(self.answer))

    def characters(self, generated: str) -> float:
        """The share of the answer's characters that `generated` has at the same positions
        (partial credit: a UUID right but for one character scores 35/36); for recall tasks
        the score itself."""
        if self.recall:
            return self.score(generated)
        right = sum(a == b for a, b in zip(self.answer, generated))
        return right / len(self.answer)


def check_split(split: str) -> str:
    """`split` if it is one of SPLITS, else a ValueError naming them."""
    if split not in SPLITS:
        raise ValueError(f"a suite split must be one of {SPLITS}, got {split!r}")
    return split


def statements(
    task_name: str,
    index: int,
    seed: int = 0,
    split: str = "test",
    fits: Callable[[Statements], bool] | None = None,
) -> Statements:
    """What example `index` of a task hides and asks: independent of the length (the same
    needles at every length; where they go, and the haystack, depend on it too). For the
    babilong tasks, the `index`-th question of `split` (in a seeded order) that `fits`
    accepts; the other tasks ignore `split` and `fits`."""
    check_split(split)
    if task_name in BABILONG:
        return _babilong_statements(task_name, index, seed, split, fits)
    if task_name not in TASKS:
        raise ValueError(f"unknown long-context task {task_name!r}; choose from {task_names()}")
    return TASKS[task_name](random.Random(f"titans-seq suite:{seed}:{task_name}:{index}"))


@functools.lru_cache(maxsize=32)
def _babilong_order(task_name: str, split: str, seed: int) -> tuple[Statements, ...]:
    """Every question of the split as Statements, in a seeded order."""
    from titans_seq.data.babi import load_babi

    specs = [
        Statements(
            tuple(f"{fact} " for fact in q.facts),
            max(q.supporting),
            f"{q.question} Answer: ",
            (q.answer,),
        )
        for q in load_babi(BABILONG[task_name], split)
    ]
    random.Random(f"titans-seq babilong order:{seed}:{task_name}:{split}").shuffle(specs)
    return tuple(specs)


def _babilong_statements(task_name, index, seed, split, fits) -> Statements:
    order = _babilong_order(task_name, split, seed)
    for step in range(len(order)):
        spec = order[(index + step) % len(order)]
        if fits is None or fits(spec):
            return spec
    shortest = min(_prompt_bytes(s) + len(s.answer.encode()) for s in order)
    raise ValueError(
        f"no {task_name} question of the {split!r} split fits: the shortest needs "
        f"{shortest} bytes, its facts, question and answer"
    )


def _prompt_bytes(spec: Statements) -> int:
    """The bytes a prompt needs besides its haystack: statements, question break, question."""
    return sum(len(s.encode()) for s in spec.statements) + len(spec.question.encode()) + 1


def make_example(
    task_name: str,
    length: int,
    index: int,
    depth: float | None = None,
    seed: int = 0,
    haystack: str = "noise",
    split: str = "test",
) -> SuiteExample:
    """Example `index` of `task_name` with a prompt of exactly `length` bytes."""
    check_int("length", length, 1)
    check_int("index", index, 0)
    spec = statements(task_name, index, seed, split, lambda s: _prompt_bytes(s) <= length)
    return _layout(spec, task_name, length, index, depth, seed, haystack)


def _layout(
    spec: Statements,
    task_name: str,
    length: int,
    index: int,
    depth: float | None,
    seed: int,
    haystack: str,
) -> SuiteExample:
    """`spec`'s statements hidden in a haystack, the prompt exactly `length` bytes."""
    if depth is not None:
        depth = check_depth(depth)
    rng = random.Random(f"titans-seq suite layout:{seed}:{task_name}:{length}:{index}")
    wanted = _training_depth(rng.random()) if depth is None else depth
    fixed = _prompt_bytes(spec)
    hay_len = length - fixed
    if hay_len < 0:
        raise ValueError(
            f"length {length} is too short for {task_name}: its statements and question "
            f"alone take {fixed} bytes"
        )
    hay = _haystack(haystack, hay_len, rng)
    spots = _boundaries(hay)
    key_at = nearest(spots, wanted * hay_len)
    before = sorted(rng.uniform(0, key_at) for _ in range(spec.key))
    after = sorted(rng.uniform(key_at, hay_len) for _ in spec.statements[spec.key + 1 :])
    positions = [nearest(spots, p) for p in before] + [key_at] + [nearest(spots, p) for p in after]
    # snapping is monotone, but a point before the key may snap past it: keep the order
    positions = [min(p, key_at) for p in positions[: spec.key]] + [
        max(p, key_at) for p in positions[spec.key :]
    ]
    pieces, cursor = [], 0
    for position, text in zip(positions, spec.statements):
        pieces += [hay[cursor:position], text.encode()]
        cursor = position
    prompt = b"".join(pieces) + hay[cursor:] + QUESTION_BREAK + spec.question.encode()
    if len(prompt) != length:  # the layout arithmetic is the contract; never pad
        raise AssertionError(f"built {len(prompt)} bytes instead of {length}")
    return SuiteExample(
        task=task_name,
        prompt=prompt,
        answer=spec.answer,
        answers=spec.answers,
        recall=spec.recall,
        depth=key_at / hay_len if hay_len else 0.0,
    )


def _training_depth(draw: float) -> float:
    """The depth of an example drawn without one, from a uniform `draw` in [0, 1): each end
    (0: before the whole haystack, 1: right before the question) for a tenth of the draws,
    the rest uniform. A uniform draw alone almost never places the key at an end, yet the
    end next to the question is where bAbI puts its facts and where evaluations ask; a
    model that never saw the facts end the haystack answered from older ones there."""
    if draw < TRAINING_END_SHARE:
        return 0.0
    if draw >= 1 - TRAINING_END_SHARE:
        return 1.0
    return (draw - TRAINING_END_SHARE) / (1 - 2 * TRAINING_END_SHARE)


def task_names() -> list[str]:
    """Every task of the suite: the generated statement tasks, bAbI's, then the passkey
    task."""
    return [*TASKS, *BABILONG, PASSKEY]


def check_tasks(tasks: Sequence[str], haystack: str = "noise", what: str = "tasks") -> list[str]:
    """`tasks` as a list, every name a suite task, none asking for a haystack it cannot use."""
    tasks = list(tasks)
    unknown = [t for t in tasks if t not in task_names()]
    if unknown or not tasks:
        raise ValueError(f"{what} must name suite tasks {task_names()}, got {tasks}")
    if PASSKEY in tasks and haystack != "noise":
        raise ValueError(
            f"the {PASSKEY!r} task always hides its needle in the noise haystack; run it "
            f"with haystack 'noise' (got {haystack!r}), or use 'niah_passkey', the same needle "
            "in any haystack"
        )
    return tasks


def suite_example(
    task_name: str,
    length: int,
    index: int,
    depth: float | None = None,
    seed: int = 0,
    haystack: str = "noise",
    split: str = "test",
) -> SuiteExample:
    """Example `index` of `task_name` whose prompt and answer together take `length` bytes:
    the whole sequence, as training counts it (so at the training length no position is new
    to the model)."""
    check_tasks([task_name], haystack)
    check_int("length", length, 1)
    check_int("index", index, 0)
    check_split(split)  # the passkey task has no split, but a wrong name is still refused
    if task_name == PASSKEY:
        e = PasskeyRetrieval(seed=seed).example(length, index, depth)
        prompt = bytes(e.tokens[: e.answer_start].tolist())
        return SuiteExample(PASSKEY, prompt, e.passkey, (e.passkey,), False, e.depth)
    spec = statements(
        task_name, index, seed, split, lambda s: _prompt_bytes(s) + len(s.answer.encode()) <= length
    )
    answer = spec.answer.encode()
    try:
        return _layout(spec, task_name, length - len(answer), index, depth, seed, haystack)
    except ValueError as err:
        raise ValueError(
            f"length {length} is too short for {task_name} (example {index} answers in "
            f"{len(answer)} bytes, leaving {length - len(answer)} for the prompt): {err}"
        ) from None


__all__ = [
    "BABILONG",
    "PASSKEY",
    "SPLITS",
    "TASKS",
    "Statements",
    "SuiteExample",
    "check_split",
    "check_tasks",
    "make_example",
    "statements",
    "suite_example",
    "task_names",
]
