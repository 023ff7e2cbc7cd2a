"""Helpers for code that a user's `torch.compile` traces."""

from __future__ import annotations

from torch.fx.experimental.symbolic_shapes import guard_scalar


def concrete_size(n) -> int:
    """A size, or a position such as a stream's offset, as a Python int. Under
    `torch.compile`, a second sequence length makes sizes symbolic (and an int that changes
    between calls, such as an offset, symbolic too); a Python loop over segments of a
    symbolic length (`while start < T`) then builds nested Min expressions, on which
    Inductor's range analysis fails or compilation does not finish (torch 2.13). The trace
    is specialised on the value instead: one graph per length, as for static shapes. An int
    is returned as it is."""
    return guard_scalar(n)
