"""What the long-context evaluations share: the byte-level vocabulary, the noise haystack,
argument checks, the nearest allowed needle position, greedy answers with the streaming
state, and the parsers of lengths and depths."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

import torch

# the targets no loss reads: the training engine's, since these examples also train as
# streams (`titans_seq.training.streams`)
from titans_seq.training.streams import IGNORE_INDEX  # noqa: F401  (re-exported)

VOCAB_SIZE = 256  # byte-level: ids are the UTF-8 bytes

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


def check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


def check_depth(depth: Any) -> float:
    """A needle depth must be a number in [0, 1]; returns it as a float."""
    if isinstance(depth, bool) or not isinstance(depth, (int, float)) or not 0 <= depth <= 1:
        raise ValueError(f"needle depth must be a number in [0, 1], got {depth!r}")
    return float(depth)


def nearest(sorted_values: Sequence[int], target: float) -> int:
    """The value closest to `target` (the smaller one on a tie)."""
    i = bisect.bisect_left(sorted_values, target)
    if i == 0:
        return sorted_values[0]
    if i == len(sorted_values):
        return sorted_values[-1]
    below, above = sorted_values[i - 1], sorted_values[i]
    return below if target - below <= above - target else above


def logits_of(output: Any) -> torch.Tensor:
    """The logits of a model call that returns them alone or first in a tuple."""
    return output[0] if isinstance(output, tuple) else output


@torch.no_grad()
def greedy_answers(
    model: torch.nn.Module,
    prompts: torch.Tensor,
    digits: int,
    chunk_len: int | None = None,
    context: int | None = None,
) -> torch.Tensor:
    """Greedy continuation of `prompts` [B, P] for `digits` tokens -> [B, digits] int64.

    The prompt is fed in pieces of `chunk_len` tokens (None: in one piece) with the model's
    streaming state (`logits, state = model(tokens, state)`), then one token per step, so
    only one piece's activations exist at a time. `context`: feed only the prompt's last
    `context` tokens, from a fresh state (None: all of it), so that nothing before them can
    reach the answer: what a model whose state restarts every `context` tokens can answer.
    """
    if prompts.dim() != 2 or prompts.shape[1] == 0:
        raise ValueError(f"prompts must be [B, P] with P >= 1, got {tuple(prompts.shape)}")
    check_int("digits", digits, 1)
    if context is not None:
        prompts = prompts[:, -check_int("context", context, 1) :]
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
