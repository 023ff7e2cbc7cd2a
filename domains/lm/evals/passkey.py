"""Single-needle passkey retrieval (RULER's S-NIAH with the noise haystack), byte level.

Every example is a sequence of exactly L byte tokens (ids = UTF-8 bytes, vocabulary 256):

    [haystack before] [needle] [haystack after] [question] [answer]

* haystack: RULER's noise text, "The grass is green. The sky is blue. The sun is yellow.
  Here we go. There and back again. " repeated; it is the last H bytes of that repetition,
  so it always ends with a whole sentence (it may start inside one, like a window cut out
  of a longer document); the sentence it ends with is drawn per example (one of 5), so the
  sentence starts, where the needle may go, are not the same handful of positions in
  every example of a length (which a model could otherwise memorise at short lengths);
* needle: "The pass key is NNNNN. Remember it. NNNNN is the pass key. " with D random
  decimal digits (default D = 5), inserted at a sentence start of the haystack;
* question: "What is the pass key? The pass key is ";
* answer: the D digits.

H = L - len(needle) - len(question) - D, so L must be at least 87 + 3 D (H = 0).

Depth: the needle starts at haystack offset p, and depth = p / H (0: the needle opens the
sequence, 1: it sits right before the question). A requested depth d is met at the sentence
start nearest to d H (0 and H are always allowed, so depths 0 and 1 are exact); without a
requested depth, d is drawn uniformly from [0, 1] and snapped the same way.

Targets: next-token prediction scored only on the answer, i.e. `targets[t] = tokens[t + 1]`
for the D positions t = L - D - 1 ... L - 2 (the last question byte and the first D - 1
answer digits) and IGNORE_INDEX elsewhere. Digits occur nowhere else than in the needle and
the answer, so they cannot leak through the haystack or the question.

Determinism: example `index` of length L drawn with `seed` is a pure function of
(seed, L, index, digits, depth), independent of the order or batch in which examples are made
(the digits are drawn first, so fixing the depth keeps the same passkey).

Evaluation (`evaluate_passkey`): greedy decoding of the D answer bytes after the prompt,
with the model's streaming state, feeding the prompt in pieces of `chunk_len` tokens; an
example is correct when all D decoded bytes are the passkey. `teacher_forced_predictions`
is the slow obvious reference (one forward pass over the whole sequence); whether all
digits are right is the same under both (if every teacher-forced argmax is right, greedy
decoding feeds exactly the teacher's tokens, and conversely).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import torch

from .needles import (
    IGNORE_INDEX,
    NOISE,
    check_depth,
    check_int,
    greedy_answers,
    logits_of,
    nearest,
    parse_depths,
    parse_lengths,
)

NEEDLE = "The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "What is the pass key? The pass key is "
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


# the noise text's sentences, each with its trailing space
NOISE_SENTENCES = tuple(m.group(0) for m in re.finditer(r"[^.]*\. ", NOISE))


@functools.lru_cache(maxsize=256)
def _haystack(length: int, phase: int) -> tuple[bytes, tuple[int, ...]]:
    """(the last `length` bytes of the noise text repeated, its cycle of sentences rotated
    to end with sentence `phase`; the allowed needle offsets: 0, `length` and every sentence
    start in between).
    """
    cycle = "".join(NOISE_SENTENCES[phase + 1 :] + NOISE_SENTENCES[: phase + 1])
    text = cycle * (length // len(cycle) + 2)
    hay = text[len(text) - length :] if length else ""
    starts = {0, length} | {m.end() for m in re.finditer(r"\. ", hay)}
    return hay.encode("utf-8"), tuple(sorted(s for s in starts if s <= length))


class PasskeyExample(NamedTuple):
    """One example. tokens, targets: [L] int64; answer_start = L - digits (the first answer
    token); needle_start: position of the needle's first token; depth: needle offset in the
    haystack / haystack length (0 for an empty haystack)."""

    tokens: torch.Tensor
    targets: torch.Tensor
    passkey: str
    needle_start: int
    depth: float
    answer_start: int


class PasskeyBatch(NamedTuple):
    """inputs, targets: [B, L] int64; needle_starts: [B] int64; depths: [B] float64;
    passkeys: B strings; answer_start: L - digits (the same for the whole batch)."""

    inputs: torch.Tensor
    targets: torch.Tensor
    passkeys: list[str]
    needle_starts: torch.Tensor
    depths: torch.Tensor
    answer_start: int


@dataclasses.dataclass(frozen=True)
class PasskeyRetrieval:
    """Generator of passkey examples (see the module docstring).

    Args:
        digits: D, the number of decimal digits of the passkey (>= 1).
        seed: the data seed; with the length and the example index it fixes every example.
    """

    digits: int = 5
    seed: int = 0

    def __post_init__(self):
        check_int("digits", self.digits, 1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")

    # -- layout ---------------------------------------------------------------------------
    @property
    def min_length(self) -> int:
        """The shortest sequence that holds the needle, the question and the answer."""
        return len(NEEDLE.format(key="0" * self.digits)) + len(QUESTION) + self.digits

    def check_length(self, length: Any) -> int:
        if isinstance(length, bool) or not isinstance(length, int):
            raise ValueError(f"sequence length must be an integer, got {length!r}")
        if length < self.min_length:
            raise ValueError(
                f"sequence length {length} is too short for a {self.digits}-digit passkey: the "
                f"needle, the question and the answer alone take {self.min_length} tokens"
            )
        return length

    def haystack_length(self, length: int) -> int:
        """H: haystack bytes in a sequence of `length` tokens."""
        return self.check_length(length) - self.min_length

    def prompt_length(self, length: int) -> int:
        """Tokens before the answer (the model reads these, then must produce the digits)."""
        return self.check_length(length) - self.digits

    @property
    def chance_accuracy(self) -> float:
        """Probability of guessing all digits uniformly at random."""
        return 10.0**-self.digits

    # -- sampling -------------------------------------------------------------------------
    def example(self, length: int, index: int, depth: float | None = None) -> PasskeyExample:
        """Example `index` of length `length`; `depth` in [0, 1] or None (uniform)."""
        length = self.check_length(length)
        check_int("index", index, 0)
        if depth is not None:
            depth = check_depth(depth)
        # a string seed goes through SHA-512 in `random`: stable across processes/platforms
        rng = random.Random(f"titans-seq passkey:{self.seed}:{length}:{index}")
        passkey = "".join(rng.choice("0123456789") for _ in range(self.digits))
        wanted = rng.random() if depth is None else depth
        phase = rng.randrange(len(NOISE_SENTENCES))

        hay_len = self.haystack_length(length)
        hay, starts = _haystack(hay_len, phase)
        offset = nearest(starts, wanted * hay_len)
        needle = NEEDLE.format(key=passkey).encode("utf-8")
        prompt = hay[:offset] + needle + hay[offset:] + QUESTION.encode("utf-8")
        data = prompt + passkey.encode("utf-8")
        if len(data) != length:  # the layout arithmetic above is the contract; never pad
            raise AssertionError(f"built {len(data)} tokens instead of {length}")

        tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        targets = torch.full_like(tokens, IGNORE_INDEX)
        answer_start = length - self.digits
        targets[answer_start - 1 : length - 1] = tokens[answer_start:]
        return PasskeyExample(
            tokens=tokens,
            targets=targets,
            passkey=passkey,
            needle_start=offset,
            depth=offset / hay_len if hay_len else 0.0,
            answer_start=answer_start,
        )

    def batch(
        self, length: int, indices: Iterable[int], depth: float | None = None
    ) -> PasskeyBatch:
        """Examples `indices` of length `length`, stacked (see `example`)."""
        examples = [self.example(length, int(i), depth) for i in indices]
        if not examples:
            raise ValueError("a passkey batch needs at least one index")
        return PasskeyBatch(
            inputs=torch.stack([e.tokens for e in examples]),
            targets=torch.stack([e.targets for e in examples]),
            passkeys=[e.passkey for e in examples],
            needle_starts=torch.tensor([e.needle_start for e in examples]),
            depths=torch.tensor([e.depth for e in examples], dtype=torch.float64),
            answer_start=examples[0].answer_start,
        )

    def prompts_and_answers(
        self, length: int, indices: Iterable[int], depth: float | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(prompts [B, length - digits], answers [B, digits]): the examples split where
        the answer starts, for reward-based training (`titans_seq.adapt.train_with_reward`
        with `exact_match_reward`)."""
        batch = self.batch(length, indices, depth)
        return batch.inputs[:, : batch.answer_start], batch.inputs[:, batch.answer_start :]


# ---------------------------------------------------------------------------- evaluation
@torch.no_grad()
def teacher_forced_predictions(model: torch.nn.Module, inputs: torch.Tensor, digits: int):
    """The reference: argmax at the answer positions of one forward pass over `inputs`
    [B, L] (prompt + answer) -> [B, digits] int64."""
    logits = logits_of(model(inputs))
    length = inputs.shape[1]
    return logits[:, length - digits - 1 : length - 1].argmax(dim=-1)


# ---------------------------------------------------------------------------- evaluation
@dataclasses.dataclass
class PasskeyResult:
    """Accuracy (all digits right) per length, per (length, depth), and digit accuracy.

    depth_accuracy is filled only for a depth grid; `counts` holds the examples per length.
    """

    lengths: list[int]
    depths: list[float] | None
    num_samples: int
    digits: int
    seed: int
    chunk_len: int | None
    accuracy: dict[int, float]
    digit_accuracy: dict[int, float]
    depth_accuracy: dict[int, dict[float, float]]
    counts: dict[int, int]
    seconds: float

    @property
    def chance_accuracy(self) -> float:
        return 10.0**-self.digits

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (dict keys become strings)."""
        return {
            "lengths": self.lengths,
            "depths": self.depths,
            "num_samples": self.num_samples,
            "digits": self.digits,
            "seed": self.seed,
            "chunk_len": self.chunk_len,
            "chance_accuracy": self.chance_accuracy,
            "accuracy": {str(k): v for k, v in self.accuracy.items()},
            "digit_accuracy": {str(k): v for k, v in self.digit_accuracy.items()},
            "depth_accuracy": {
                str(k): {f"{d:g}": v for d, v in per.items()}
                for k, per in self.depth_accuracy.items()
            },
            "counts": {str(k): v for k, v in self.counts.items()},
            "seconds": self.seconds,
        }

    def table(self) -> str:
        """Markdown table: one row per length; accuracy, digit accuracy, then one column per
        depth of the grid."""
        header = ["length", "examples", "accuracy", "digit accuracy"]
        if self.depths:
            header += [f"depth {d:g}" for d in self.depths]
        rows = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for length in self.lengths:
            cells = [
                str(length),
                str(self.counts[length]),
                f"{self.accuracy[length]:.3f}",
                f"{self.digit_accuracy[length]:.3f}",
            ]
            if self.depths:
                cells += [f"{self.depth_accuracy[length][d]:.3f}" for d in self.depths]
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows)


@torch.no_grad()
def evaluate_passkey(
    model: torch.nn.Module,
    lengths: Sequence[int] | str | int,
    num_samples: int,
    depths: Sequence[float] | str | None = None,
    seed: int = 0,
    device: torch.device | str | None = None,
    chunk_len: int | None = None,
    digits: int = 5,
    batch_size: int = 16,
    progress: bool = False,
) -> PasskeyResult:
    """Passkey accuracy of `model` per length (and per depth).

    Args:
        model: `logits [B, T, V], state = model(tokens [B, T], state)` with byte ids.
        lengths: total sequence lengths L (prompt + answer) to evaluate.
        num_samples: examples per length, or per (length, depth) with a depth grid.
        depths: a grid of needle depths in [0, 1]; None draws a uniform depth per example.
        seed: the data seed (examples 0 ... num_samples - 1 of each length with it).
        device: where to run (None: the model's device).
        chunk_len: feed the prompt in pieces of this many tokens with the streaming state
            (None: in one piece); the result does not depend on it beyond float rounding.
        digits: passkey digits (as the model was trained with).
        batch_size: examples decoded together.
    Returns:
        `PasskeyResult`; an example is correct when all digits decode right greedily.
    """
    lengths = parse_lengths(lengths)
    grid = parse_depths(depths)
    check_int("num_samples", num_samples, 1)
    check_int("batch_size", batch_size, 1)
    if chunk_len is not None:
        check_int("chunk_len", chunk_len, 1)
    task = PasskeyRetrieval(digits=digits, seed=seed)
    for length in lengths:
        task.check_length(length)
    if device is None:
        device = next(iter(model.parameters()), torch.empty(0)).device
    device = torch.device(device)
    was_training = model.training
    model.eval()
    cells = [(length, d) for length in lengths for d in (grid or [None])]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cells) * num_samples, desc="passkey", leave=False)
    correct: dict[tuple[int, float | None], int] = {}
    digit_hits = dict.fromkeys(lengths, 0)
    start_time = time.perf_counter()
    try:
        for length, depth in cells:
            hits = 0
            for first in range(0, num_samples, batch_size):
                indices = range(first, min(first + batch_size, num_samples))
                prompts, answer = task.prompts_and_answers(length, indices, depth)
                prompts, answer = prompts.to(device), answer.to(device)
                predicted = greedy_answers(model, prompts, digits, chunk_len)
                same = predicted == answer
                hits += int(same.all(dim=1).sum())
                digit_hits[length] += int(same.sum())
                if bar is not None:
                    bar.update(len(indices))
            correct[(length, depth)] = hits
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    per_cell = len(grid) if grid else 1
    counts = {length: num_samples * per_cell for length in lengths}
    return PasskeyResult(
        lengths=lengths,
        depths=grid,
        num_samples=num_samples,
        digits=digits,
        seed=seed,
        chunk_len=chunk_len,
        accuracy={
            length: sum(correct[(length, d)] for d in (grid or [None])) / counts[length]
            for length in lengths
        },
        digit_accuracy={
            length: digit_hits[length] / (counts[length] * digits) for length in lengths
        },
        depth_accuracy={
            length: {d: correct[(length, d)] / num_samples for d in grid} for length in lengths
        }
        if grid
        else {},
        counts=counts,
        seconds=time.perf_counter() - start_time,
    )


def length_multiples(train_length: int, factors: Sequence[int] = (1, 2, 4, 8, 16)) -> list[int]:
    """[f * train_length for f in factors]: the evaluation lengths of the benchmark."""
    check_int("train_length", train_length, 1)
    return [int(f) * train_length for f in factors]


__all__ = [
    "PasskeyResult",
    "evaluate_passkey",
    "greedy_answers",
    "length_multiples",
    "parse_depths",
    "parse_lengths",
    "teacher_forced_predictions",
]
