"""Training with the state carried: each example is a stream of segments read one model call
at a time, the model's state passed from each segment to the next.

    stream [B, n * S] -> segments [B, S] x n -> logits, state = model(segment, state)

A model trained on windows that each start from a fresh state never learns to read a state
that has absorbed more than one window; carried through a long document at test time, its
memory then misleads it. Here (recipe section `streams:`, `StreamsConfig`):

* every optimizer step reads each stream's `n` segments in order, the state carried;
* gradients flow through up to `bptt` consecutive segments: each block of segments is
  back-propagated on its own and the state is detached before the next block (truncated
  back-propagation through time), so memory use is that of `bptt` segments;
* a curriculum grows `n` by stage (`[[from_step, n], ...]`), optionally drawing each step's
  count uniformly up to the stage's (as BABILong's recurrent-memory training does);
* with `state_passing: p`, a step's streams start, with probability p, from the final states
  the previous step's streams left (detached) instead of a fresh state, so the model also
  trains on states that have absorbed far more than one stream (Buitrago and Gu, 2025).

The loss of a step is the mean over every scored token of its streams, as if each stream
were one sequence. Every draw (segment count, state passing) is a function of (seed, step),
the same on every process and after a resume; the passed states go into checkpoints.
A task takes part by declaring `supports_streams` and implementing `stream_batch` and
`segment_loss` (`titans_seq.training.tasks.base.Task`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch

from ..errors import ConfigError
from ..mixers.state import iter_tensors, map_tensors
from .schema import StreamsConfig

IGNORE_INDEX = -100  # targets that are not scored (cross-entropy's ignore_index)


def check_streams(streams: StreamsConfig, task: Any, task_name: str) -> None:
    """Refuse settings that cannot train, by name, when the recipe is loaded."""
    for key in ("segments", "segment_length", "bptt"):
        value = getattr(streams, key)
        if value is None and key != "segments":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"streams.{key} must be an integer >= 1, got {value!r}")
    if not 0.0 <= streams.state_passing <= 1.0:
        raise ConfigError(f"streams.state_passing must be in [0, 1], got {streams.state_passing}")
    _check_curriculum(streams.curriculum)
    if streams.random_segments and max_segments(streams) < 2:
        raise ConfigError(
            "streams.random_segments draws a segment count up to streams.segments (or the "
            "curriculum's): give it more than one segment"
        )
    if streams.enabled and not getattr(task, "supports_streams", False):
        raise ConfigError(
            f"task {task_name!r} does not train with carried state: remove the recipe's "
            "`streams:` section (the language-model tasks lm, lm_passkey and lm_suite have it)"
        )


def _check_curriculum(curriculum: list) -> None:
    if not isinstance(curriculum, list):
        raise ConfigError("streams.curriculum must be a list of [from_step, segments] pairs")
    previous: tuple[int, int] | None = None
    for i, stage in enumerate(curriculum):
        if (
            not isinstance(stage, (list, tuple))
            or len(stage) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in stage)
        ):
            raise ConfigError(
                f"streams.curriculum[{i}] must be a [from_step, segments] pair of integers, "
                f"got {stage!r}"
            )
        step, count = stage
        if i == 0 and step != 0:
            raise ConfigError(f"streams.curriculum must start at step 0, its first stage is {step}")
        if count < 1:
            raise ConfigError(f"streams.curriculum[{i}]: segments must be >= 1, got {count}")
        if previous is not None and (step <= previous[0] or count <= previous[1]):
            raise ConfigError(
                f"streams.curriculum must grow: stage {i} {[step, count]} does not come after "
                f"{list(previous)} with more segments"
            )
        previous = (step, count)


def max_segments(streams: StreamsConfig) -> int:
    """The most segments any step of the run reads per stream."""
    return streams.curriculum[-1][1] if streams.curriculum else streams.segments


def _draw(seed: int, step: int, what: str) -> random.Random:
    # a string seed is hashed with SHA-512: the same draw in every process and Python run
    return random.Random(f"titans-seq streams {what}:{seed}:{step}")


def segment_count(streams: StreamsConfig, step: int, seed: int) -> int:
    """Segments per stream at optimizer step `step` (0-based): the curriculum stage's count,
    or a uniform draw from 1 .. that count with `random_segments`."""
    count = streams.segments
    for from_step, stage_count in streams.curriculum:
        if step >= from_step:
            count = stage_count
    if streams.random_segments:
        return _draw(seed, step, "segments").randint(1, count)
    return count


def passes_state(streams: StreamsConfig, step: int, seed: int) -> bool:
    """Whether step `step` starts its streams from the previous step's final states."""
    if streams.state_passing <= 0.0:
        return False
    return _draw(seed, step, "passing").random() < streams.state_passing


def detach_state(state: Any) -> Any:
    """The state with every tensor cut from the autograd graph (nested lists/dataclasses)."""
    return map_tensors(state, lambda t: t.detach())


def state_batch_size(state: Any) -> int | None:
    """B of a (per-layer list of) mixer state(s): the first dimension of its first tensor."""
    for tensor in iter_tensors(state):
        return int(tensor.shape[0])
    return None


def split_segments(batch: dict[str, torch.Tensor], length: int) -> list[dict[str, torch.Tensor]]:
    """A stream batch {"inputs": [B, L], "targets": [B, L]} as consecutive segments of
    `length` tokens (the last one shorter when L is not a multiple)."""
    inputs, targets = batch["inputs"], batch["targets"]
    return [
        {"inputs": inputs[:, t : t + length], "targets": targets[:, t : t + length]}
        for t in range(0, inputs.shape[1], length)
    ]


class StreamTraining:
    """The carried-state part of a run: draws, the streams' passed states, and one micro-batch
    read segment by segment with truncated back-propagation.

    `passed` holds, per micro-batch slot of this process, the final state its streams left
    at the last step (detached), which state passing starts the next step from.
    """

    def __init__(self, streams: StreamsConfig, segment_length: int, seed: int):
        self.config = streams
        self.segment_length = segment_length
        self.seed = seed
        self.passed: dict[int, Any] = {}

    def segments(self, step: int) -> int:
        return segment_count(self.config, step, self.seed)

    def remaining_calls(self, step: int, max_steps: int, grad_accum: int) -> int:
        """Model calls (one per segment) from step `step` to the end of the run, which the
        memory layers' compile plan counts (`ops/lmm/tiering.py`)."""
        segments = sum(self.segments(s) for s in range(step, max_steps))
        return segments * grad_accum

    def start_state(self, step: int, slot: int, batch_size: int) -> Any:
        """The state a step's streams start from: the slot's passed state, or None (fresh)."""
        if not passes_state(self.config, step, self.seed):
            return None
        state = self.passed.get(slot)
        if state is None or state_batch_size(state) != batch_size:
            return None
        return state

    def run(
        self,
        task: Any,
        model: torch.nn.Module,
        batch: dict[str, torch.Tensor],
        state: Any,
        backward: Callable[[torch.Tensor], None],
        autocast: Callable[[], Any],
        scored: int | None = None,
    ) -> tuple[torch.Tensor, Any]:
        """Read one stream batch segment by segment; returns (mean nats per scored token,
        detached final state). `backward(loss)` back-propagates each block of up to `bptt`
        segments, whose losses are already divided by the stream batch's scored tokens, so
        the blocks' gradients add up to the gradient of the mean. `scored`: the batch's
        scored targets when the caller has counted them (on the host, before the batch
        went to its device)."""
        if scored is None:
            scored = int((batch["targets"] != IGNORE_INDEX).sum())
        scale = 1.0 / max(scored, 1)
        segments = split_segments(batch, self.segment_length)
        span = self.config.bptt or len(segments)
        total = torch.zeros((), dtype=torch.float64, device=batch["inputs"].device)
        for first in range(0, len(segments), span):
            block = None
            for segment in segments[first : first + span]:
                with autocast():
                    nats, state = task.segment_loss(model, segment, state)
                # at least fp32 (a half-precision sum of a stream's losses would round)
                nats = nats.to(torch.promote_types(nats.dtype, torch.float32))
                block = nats if block is None else block + nats
            backward(block * scale)
            total += block.detach().double()
            state = detach_state(state)
        return total * scale, state

    def state_dict(self) -> dict[str, Any]:
        return {"passed": {str(slot): state for slot, state in self.passed.items()}}

    def load_state_dict(self, state: dict[str, Any], device: torch.device) -> None:
        self.passed = {
            int(slot): map_tensors(value, lambda t: t.to(device))
            for slot, value in state.get("passed", {}).items()
        }
