"""Passkey evaluation: greedy decoding of the D answer bytes after the prompt,
with the model's streaming state, feeding the prompt in pieces of `chunk_len` tokens; an
example is correct when all D decoded bytes are the passkey. `teacher_forced_predictions`
is the slow obvious reference (one forward pass over the whole sequence); whether all
digits are right is the same under both (if every teacher-forced argmax is right, greedy
decoding feeds exactly the teacher's tokens, and conversely).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import torch

from .passkey import PasskeyRetrieval, check_depth, check_int


# ------------------------------------------------------------------------------ decoding
def _logits_of(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def greedy_answers(
    model: torch.nn.Module, prompts: torch.Tensor, digits: int, chunk_len: int | None = None
) -> torch.Tensor:
    """Greedy continuation of `prompts` [B, P] for `digits` tokens -> [B, digits] int64.

    The prompt is fed in pieces of `chunk_len` tokens (None: in one piece) with the model's
    streaming state (`logits, state = model(tokens, state)`), then one token per step, so
    only one piece's activations exist at a time.
    """
    if prompts.dim() != 2 or prompts.shape[1] == 0:
        raise ValueError(f"prompts must be [B, P] with P >= 1, got {tuple(prompts.shape)}")
    check_int("digits", digits, 1)
    step = prompts.shape[1] if chunk_len is None else check_int("chunk_len", chunk_len, 1)
    state = None
    for start in range(0, prompts.shape[1], step):
        logits, state = model(prompts[:, start : start + step], state)
    answer = []
    for i in range(digits):
        token = logits[:, -1].argmax(dim=-1)
        answer.append(token)
        if i + 1 < digits:
            logits, state = model(token[:, None], state)
    return torch.stack(answer, dim=1)


@torch.no_grad()
def teacher_forced_predictions(model: torch.nn.Module, inputs: torch.Tensor, digits: int):
    """The reference: argmax at the answer positions of one forward pass over `inputs`
    [B, L] (prompt + answer) -> [B, digits] int64."""
    logits = _logits_of(model(inputs))
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


def parse_lengths(lengths: Any) -> list[int]:
    """A non-empty list of positive integer lengths (also from "1024,2048" or an int)."""
    if isinstance(lengths, str):
        lengths = [p.strip() for p in lengths.split(",") if p.strip()]
        try:
            lengths = [int(p) for p in lengths]
        except ValueError:
            raise ValueError(
                f"lengths must be integers separated by commas, got {lengths}"
            ) from None
    elif isinstance(lengths, int) and not isinstance(lengths, bool):
        lengths = [lengths]
    lengths = list(lengths)
    if not lengths:
        raise ValueError("give at least one sequence length to evaluate")
    for length in lengths:
        if isinstance(length, bool) or not isinstance(length, int) or length <= 0:
            raise ValueError(f"sequence lengths must be positive integers, got {length!r}")
    return lengths


def parse_depths(depths: Any) -> list[float] | None:
    """None (uniform random depths) or a non-empty list of depths in [0, 1]."""
    if depths is None:
        return None
    if isinstance(depths, str):
        parts = [p.strip() for p in depths.split(",") if p.strip()]
        try:
            depths = [float(p) for p in parts]
        except ValueError:
            raise ValueError(f"depths must be numbers separated by commas, got {parts}") from None
    depths = [check_depth(d) for d in depths]
    if not depths:
        raise ValueError("depths: give at least one depth in [0, 1], or none for uniform depths")
    if len(set(depths)) != len(depths):
        raise ValueError(f"depths must be distinct, got {depths}")
    return depths


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
