"""Streaming state carried between calls of a sequence mixer.

A state is opaque to callers: they pass back what the mixer returned. It records the
configuration that produced it (`signature`) so that feeding it to a different mixer fails
loudly instead of silently computing garbage, and it can be detached from the autograd graph
for truncated back-propagation through time.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


def map_tensors(value: Any, fn) -> Any:
    """Apply `fn` to every tensor inside nested tuples/lists/dicts/dataclasses."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_tensors(v, fn) for v in value)
    if isinstance(value, list):
        return [map_tensors(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_tensors(v, fn) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {
            f.name: map_tensors(getattr(value, f.name), fn) for f in dataclasses.fields(value)
        }
        return dataclasses.replace(value, **changes)
    return value


def iter_tensors(value: Any):
    """Yield every tensor inside nested containers/dataclasses."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from iter_tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from iter_tensors(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from iter_tensors(getattr(value, f.name))


@dataclasses.dataclass
class MixerState:
    """Base class of every mixer's state.

    Attributes:
        signature: identifies the mixer configuration that produced the state.
        batch_size: B of the stream the state belongs to.
        position: number of tokens of the stream consumed so far.
    """

    signature: tuple
    batch_size: int
    position: int

    def detach(self):
        """A copy cut from the autograd graph (for truncated BPTT)."""
        return map_tensors(self, lambda t: t.detach())

    def to(self, *args, **kwargs):
        """A copy with every tensor moved/cast like `Tensor.to`."""
        return map_tensors(self, lambda t: t.to(*args, **kwargs))

    def num_bytes(self) -> int:
        """Bytes held by the state's tensors (for checking that it stays bounded)."""
        return sum(t.numel() * t.element_size() for t in iter_tensors(self))
