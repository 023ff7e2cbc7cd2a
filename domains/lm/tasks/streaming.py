"""The language-model tasks' part in training with the state carried (`streams:` in a
recipe, `titans_seq.training.streams`): one segment's summed next-token loss, read from the
state the previous segment left."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from titans_seq.training.streams import IGNORE_INDEX


def segment_nats(model, segment: dict[str, torch.Tensor], state: Any) -> tuple[torch.Tensor, Any]:
    """(summed nats over the scored targets, the model's state after the segment) for a
    segment {"inputs": [B, S], "targets": [B, S]} read from `state` (None: fresh)."""
    logits, state = model(segment["inputs"], state)
    # at least fp32: autocast's half-precision logits would round the loss
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    nats = F.cross_entropy(
        logits.flatten(0, 1),
        segment["targets"].flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )
    return nats, state
