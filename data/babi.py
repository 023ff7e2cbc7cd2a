"""bAbI question answering tasks 1-5 (Weston et al. 2015, v1.2): the facts and questions that
BABILong (Kuratov et al. 2024) hides in long texts.

    from titans_seq.data.babi import load_babi
    questions = load_babi(1, "train")      # 9,000 BabiQuestion (en-10k, stories 1-1,800)
    q = questions[0]
    q.facts, q.question, q.answer          # ("Mary moved to the bathroom.", ...), ...

Each question is one sample, as BABILong builds them: the story's facts up to the question
(earlier questions of the story left out), the question, its one-word answer and the indices
of its supporting facts. Splits: "train" is the first 90% of the stories of the train file,
"valid" the last 10% (the usual bAbI hold-out), "test" the test file.

Files: the en-10k set (10,000 training questions a task) for tasks 1, 2, 4 and 5; the en set
(1,000) for task 3. The URLs are raw copies of Facebook's `tasks_1-20_v1-2` release in a
public repository (Facebook's own is a tarball of all twenty tasks); the md5 is of the
uncompressed text.
"""

from __future__ import annotations

import dataclasses
import functools

from .errors import DataError
from .registry import DatasetEntry, get_dataset, register_dataset
from .text_sources import read_text

SOURCE = (
    "https://raw.githubusercontent.com/ethancaballero/Improved-Dynamic-Memory-Networks-DMN-plus"
    "/master/data/tasks_1-20_v1-2"
)
SPLITS = ("train", "valid", "test")
VALID_SHARE = 0.1  # the last tenth of the train file's stories hold out for validation


@dataclasses.dataclass(frozen=True)
class BabiQuestion:
    """One bAbI question with the facts before it in its story.

    facts: the story's statements up to the question, in order, each a sentence ending in
    "."; question: e.g. "Where is Mary?"; answer: one word (or a comma-separated list for
    the tasks that answer several); supporting: indices into `facts` of the facts the
    answer rests on; story: the story's index in its file."""

    facts: tuple[str, ...]
    question: str
    answer: str
    supporting: tuple[int, ...]
    story: int


@dataclasses.dataclass(frozen=True)
class BabiTask:
    number: int
    name: str
    subset: str  # "en-10k" or "en"
    md5: tuple[str, str]  # uncompressed train and test files
    questions: tuple[int, int]  # train and test questions in the files


TASKS = {
    t.number: t
    for t in (
        BabiTask(
            1,
            "single-supporting-fact",
            "en-10k",
            ("1835e9ea97b02d6546071b41987bcd8b", "d33488e97ced71fabb9381ee273a66d3"),
            (10000, 1000),
        ),
        BabiTask(
            2,
            "two-supporting-facts",
            "en-10k",
            ("14833d98880fb69fff2fce0974cef008", "dd4b3eb2de365efe93eecfa67b3988f0"),
            (10000, 1000),
        ),
        BabiTask(
            3,
            "three-supporting-facts",
            "en",
            ("f169fe223a687ff3a9e21bf0c98a02b9", "c78f5b0c59c278deae7493dbc5f65626"),
            (1000, 1000),
        ),
        BabiTask(
            4,
            "two-arg-relations",
            "en-10k",
            ("36fd2672afb792f569c1beedb287379e", "70d4cec7286d2a5ce73501eabba4ffdc"),
            (10000, 1000),
        ),
        BabiTask(
            5,
            "three-arg-relations",
            "en-10k",
            ("bd196dcf7bea77bae010ad53810fdfa8", "2cf6f2134b9dac40d1e57a75ed1f4b35"),
            (10000, 1000),
        ),
    )
}


def parse_babi(text: str, source: str = "bAbI text") -> list[BabiQuestion]:
    """The questions of a bAbI file: numbered lines, a story restarting at line 1; a question
    line holds the question, a tab, the answer, a tab and its supporting line numbers."""
    questions: list[BabiQuestion] = []
    facts: list[str] = []
    fact_at: dict[int, int] = {}  # the story's line number -> index into facts
    story = -1
    for row, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        number, _, body = line.strip("\n").partition(" ")
        if not number.isdigit() or not body:
            raise DataError(f"{source}, line {row}: expected '<number> <text>', got {line!r}")
        if int(number) == 1:
            story, facts, fact_at = story + 1, [], {}
        elif story < 0:
            raise DataError(f"{source}, line {row}: a story must start at line number 1")
        if "\t" not in body:
            fact_at[int(number)] = len(facts)
            facts.append(body.strip())
            continue
        parts = body.split("\t")
        if len(parts) != 3 or not parts[1].strip():
            raise DataError(
                f"{source}, line {row}: a question line is '<question>\\t<answer>\\t"
                f"<supporting line numbers>', got {line!r}"
            )
        question, answer, support = (p.strip() for p in parts)
        try:
            supporting = tuple(fact_at[int(n)] for n in support.split())
        except (KeyError, ValueError):
            raise DataError(
                f"{source}, line {row}: supporting lines {support!r} are not facts of the story"
            ) from None
        questions.append(BabiQuestion(tuple(facts), question, answer, supporting, story))
    if not questions:
        raise DataError(f"{source}: no bAbI questions in it")
    return questions


def _file_name(task: BabiTask, split: str) -> str:
    return f"qa{task.number}_{task.name}_{split}.txt"


def dataset_name(task: int, file_split: str) -> str:
    return f"babi-qa{task}-{file_split}"


for _task in TASKS.values():
    for _split, _md5, _count in zip(("train", "test"), _task.md5, _task.questions):
        _file = _file_name(_task, _split)
        register_dataset(
            DatasetEntry(
                name=dataset_name(_task.number, _split),
                file=f"text/babi/{_task.subset}_{_file}.gz",
                urls=(f"{SOURCE}/{_task.subset}/{_file}",),
                md5=_md5,
                loader=read_text,
                alternate_files=(f"tasks_1-20_v1-2/{_task.subset}/{_file}",),
                info={
                    "kind": "babi",
                    "questions": _count,
                    "license": "CC BY 3.0",
                    "reference": "Weston et al., Towards AI-Complete Question Answering, 2015",
                },
            )
        )


def check_babi_task(task: int) -> BabiTask:
    if isinstance(task, bool) or task not in TASKS:
        raise ValueError(f"bAbI task must be one of {sorted(TASKS)}, got {task!r}")
    return TASKS[task]


@functools.lru_cache(maxsize=16)
def _file_questions(task: int, file_split: str, download: bool) -> tuple[BabiQuestion, ...]:
    from .files import dataset_path

    entry = get_dataset(dataset_name(task, file_split))
    path = dataset_path(entry, download=download)
    return tuple(parse_babi(entry.load(path), str(path)))


def load_babi(task: int, split: str = "test", *, download: bool = True) -> list[BabiQuestion]:
    """The questions of bAbI task `task` (1-5) in `split` ("train", "valid", "test"), each
    with the facts before it; looked up like every dataset (the data folders, the cache,
    else a download)."""
    check_babi_task(task)
    if split not in SPLITS:
        raise ValueError(f"bAbI split must be one of {SPLITS}, got {split!r}")
    questions = _file_questions(task, "test" if split == "test" else "train", download)
    if split == "test":
        return list(questions)
    stories = questions[-1].story + 1
    first_valid = stories - max(1, round(stories * VALID_SHARE))
    if split == "train":
        return [q for q in questions if q.story < first_valid]
    return [q for q in questions if q.story >= first_valid]


__all__ = ["SPLITS", "TASKS", "BabiQuestion", "check_babi_task", "load_babi", "parse_babi"]
