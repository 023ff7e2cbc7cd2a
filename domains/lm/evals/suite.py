"""Running a byte-level LM over the long-context suite (`suite_examples.py`): greedy
answers per (task, length, depth), a table and a heat map (accuracy by length x depth)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch

from .needles import check_int, greedy_answers
from .suite_examples import check_tasks, suite_example, task_names

DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclasses.dataclass
class SuiteResult:
    """scores[task][length][depth]: the mean score (exact match, or the recalled fraction
    for multi-value and variable tracking) of `samples` examples; characters (same keys):
    the mean share of the answers' characters right at their positions
    (`SuiteExample.characters`), which shows how close a model comes where exact match is 0."""

    tasks: list[str]
    lengths: list[int]
    depths: list[float]
    samples: int
    haystack: str
    seed: int
    scores: dict[str, dict[int, dict[float, float]]]
    characters: dict[str, dict[int, dict[float, float]]]
    seconds: float
    context: int | None = None

    def mean(self, task: str, length: int, measure: str = "scores") -> float:
        """`measure` ("scores" or "characters") of (task, length), averaged over depths."""
        per_depth = getattr(self, measure)[task][length]
        return sum(per_depth.values()) / len(per_depth)

    def table(self, measure: str = "scores") -> str:
        """Markdown: one row per task, `measure` ("scores": exact match; "characters": the
        share of the answers' characters right) averaged over depths per length."""
        lines = [
            "| task | " + " | ".join(str(n) for n in self.lengths) + " |",
            "|---|" + "---|" * len(self.lengths),
        ]
        for task in self.tasks:
            cells = [f"{self.mean(task, n, measure):.2f}" for n in self.lengths]
            lines.append(f"| {task} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        def by_key(cells):
            return {
                t: {str(n): {f"{d:g}": v for d, v in per.items()} for n, per in by_len.items()}
                for t, by_len in cells.items()
            }

        return {
            "tasks": self.tasks,
            "lengths": self.lengths,
            "depths": self.depths,
            "samples": self.samples,
            "haystack": self.haystack,
            "seed": self.seed,
            "scores": by_key(self.scores),
            "characters": by_key(self.characters),
            "seconds": self.seconds,
            "context": self.context,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SuiteResult:
        """The inverse of `to_dict` (its keys back to lengths and depths)."""

        def by_key(cells):
            return {
                t: {int(n): {float(d): v for d, v in per.items()} for n, per in by_len.items()}
                for t, by_len in cells.items()
            }

        return cls(
            tasks=data["tasks"],
            lengths=data["lengths"],
            depths=data["depths"],
            samples=data["samples"],
            haystack=data["haystack"],
            seed=data["seed"],
            scores=by_key(data["scores"]),
            characters=by_key(data["characters"]),
            seconds=data["seconds"],
            context=data.get("context"),
        )


@torch.no_grad()
def evaluate_suite(
    model: torch.nn.Module,
    lengths: Sequence[int],
    tasks: Sequence[str] | None = None,
    depths: Sequence[float] = DEFAULT_DEPTHS,
    samples: int = 10,
    haystack: str = "noise",
    seed: int = 0,
    chunk_len: int | None = 1024,
    batch_size: int = 8,
    device: torch.device | str | None = None,
    progress: bool = False,
    context: int | None = None,
) -> SuiteResult:
    """Score `model` (byte-level, `logits, state = model(tokens, state)`) on every (task,
    length, depth) cell with `samples` examples each, answers decoded greedily after the
    prompt is fed in pieces of `chunk_len` tokens with the streaming state. A length is the
    whole sequence, prompt and answer (as the `lm_suite` task trains), so at the training
    length no position is new to the model.

    `context`: read only each prompt's last `context` bytes, from a fresh state: the control
    that shows what the model answers without anything its state carried from earlier
    (a key statement in those bytes is still found; one before them is not)."""
    tasks = check_tasks(task_names() if tasks is None else tasks, haystack)
    lengths = [check_int("length", n, 1) for n in lengths]
    check_int("samples", samples, 1)
    check_int("batch_size", batch_size, 1)
    if context is not None:
        check_int("context", context, 1)
    if device is None:
        device = next(iter(model.parameters()), torch.empty(0)).device
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(tasks) * len(lengths) * len(depths) * samples, desc="suite")
    was_training = model.training
    model.eval()
    start_time = time.perf_counter()
    scores: dict[str, dict[int, dict[float, float]]] = {}
    characters: dict[str, dict[int, dict[float, float]]] = {}
    try:
        for task in tasks:
            scores[task], characters[task] = {}, {}
            for length in lengths:
                scores[task][length], characters[task][length] = {}, {}
                for depth in depths:
                    total = right = 0.0
                    batches = _length_batches(
                        task, length, depth, samples, seed, haystack, batch_size
                    )
                    for batch in batches:
                        prompts = torch.tensor([list(e.prompt) for e in batch], device=device)
                        width = max(len(e.answer.encode()) for e in batch)
                        answers = greedy_answers(model, prompts, width, chunk_len, context)
                        for e, ids in zip(batch, answers.tolist()):
                            text = bytes(ids).decode("utf-8", errors="replace")
                            total += e.score(text)
                            right += e.characters(text)
                        if bar is not None:
                            bar.update(len(batch))
                    scores[task][length][depth] = total / samples
                    characters[task][length][depth] = right / samples
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    return SuiteResult(
        tasks=tasks,
        lengths=lengths,
        depths=[float(d) for d in depths],
        samples=samples,
        haystack=haystack,
        seed=seed,
        scores=scores,
        characters=characters,
        seconds=time.perf_counter() - start_time,
        context=context,
    )


def _length_batches(task, length, depth, samples, seed, haystack, batch_size):
    """Examples 0 .. samples - 1 whose prompt and answer together are `length` bytes (as in
    training: "length" is the whole sequence), in batches of equal prompt length."""
    by_prompt: dict[int, list] = {}
    for i in range(samples):
        example = suite_example(task, length, i, depth, seed, haystack)
        by_prompt.setdefault(len(example.prompt), []).append(example)
    for group in by_prompt.values():
        for first in range(0, len(group), batch_size):
            yield group[first : first + batch_size]


def plot_heatmaps(result: SuiteResult, out, title: str = "") -> None:
    """One panel per task: score by depth (rows) x length (columns), like the paper's
    needle-in-a-haystack figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(result.tasks))
    rows = -(-len(result.tasks) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, task in zip(axes.flat, result.tasks):
        grid = [[result.scores[task][n][d] for n in result.lengths] for d in result.depths]
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(result.lengths)), [str(n) for n in result.lengths], fontsize=7)
        ax.set_yticks(range(len(result.depths)), [f"{d:g}" for d in result.depths], fontsize=7)
        ax.set_xlabel("length (bytes)", fontsize=8)
        ax.set_ylabel("depth", fontsize=8)
        ax.set_title(task, fontsize=9)
    for ax in list(axes.flat)[len(result.tasks) :]:
        ax.axis("off")
    fig.colorbar(image, ax=axes, shrink=0.6, label="score")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.savefig(out, dpi=120)
    plt.close(fig)
