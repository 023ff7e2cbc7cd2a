"""Packed variable-length sequences: flash-linear-attention's `cu_seqlens` convention.

A batch of N documents of different lengths is given as one row, x [1, total, ...], with the
document boundaries in `cu_seqlens` (integer tensor [N + 1]: 0, L_0, L_0 + L_1, ..., total).
Every mixer, the `Backbone` and `TitansLM` accept it and process each document exactly as
if it were alone: memory, momentum, convolution caches, attention windows and persistent
tokens all start afresh at a document's first token.

The PyTorch path lays the documents out as rows of a right-padded batch [N, max L, ...],
runs the ordinary batched computation, and gathers the valid positions back. Because every
mixer is causal, the padding after a document's end never reaches its outputs; the padded
outputs are dropped, so no gradient flows through them either. The cost is the padding:
documents of similar lengths pack for free, one long document beside many short ones costs
up to N times its length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedLayout:
    """Where the documents of a packed row sit in the padded batch.

    lengths: [N] int64 document lengths (on the data's device).
    max_length: the padded length, max(lengths).
    gather_index: [N, max_length] positions in the packed row (padding points at `total`,
        an appended zero row).
    valid_index: [total] positions in the flattened padded batch [N * max_length] of each
        packed position, in order.
    """

    lengths: torch.Tensor
    max_length: int
    gather_index: torch.Tensor
    valid_index: torch.Tensor

    @property
    def num_documents(self) -> int:
        return int(self.lengths.shape[0])


def check_cu_seqlens(cu_seqlens, total: int) -> torch.Tensor:
    """Validate document boundaries for a packed row of `total` positions; returns them as
    an int64 tensor [N + 1] (on the device they came on). Raises ValueError naming the
    problem: not 1-D, not starting at 0, not ending at `total`, or an empty document."""
    if not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens)
    if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype == torch.bool:
        raise ValueError(f"cu_seqlens must be an integer tensor, got dtype {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(
            "cu_seqlens must be a 1-D tensor [N + 1] of document boundaries (0, ..., total), "
            f"got shape {tuple(cu_seqlens.shape)}"
        )
    bounds = cu_seqlens.long()
    host = bounds.tolist()  # one host sync per packed call: the layout needs the lengths
    if host[0] != 0 or host[-1] != total:
        raise ValueError(
            f"cu_seqlens must start at 0 and end at the packed length {total}, "
            f"got {host[0]} ... {host[-1]}"
        )
    if any(b <= a for a, b in zip(host, host[1:])):
        raise ValueError(
            "cu_seqlens must be strictly increasing (every document at least one position "
            f"long), got {host if len(host) <= 16 else host[:16] + ['...']}"
        )
    return bounds


def packed_layout(cu_seqlens, total: int, device: torch.device | None = None) -> PackedLayout:
    """The padded-batch layout of a packed row of `total` positions (see `PackedLayout`)."""
    bounds = check_cu_seqlens(cu_seqlens, total)
    device = bounds.device if device is None else device
    bounds = bounds.to(device)
    lengths = bounds[1:] - bounds[:-1]
    max_length = int(lengths.max())
    steps = torch.arange(max_length, device=device)
    valid = steps[None, :] < lengths[:, None]  # [N, max L]
    gather_index = torch.where(valid, bounds[:-1, None] + steps[None, :], total)
    valid_index = torch.nonzero(valid.flatten(), as_tuple=True)[0]
    return PackedLayout(lengths, max_length, gather_index, valid_index)


def unpack(x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """Packed x [1, total, ...] -> padded batch [N, max L, ...] (zeros after each document)."""
    if x.shape[0] != 1:
        raise ValueError(
            f"a packed input has batch size 1 (documents side by side in one row), got "
            f"shape {tuple(x.shape)}; flatten the batch first, x.reshape(1, -1, ...)"
        )
    rows = torch.cat([x[0], x.new_zeros(1, *x.shape[2:])])  # [total + 1, ...]
    return rows[layout.gather_index]


def pack(y: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """Padded batch y [N, max L, ...] -> packed [1, total, ...] (the padding dropped)."""
    flat = y.reshape(-1, *y.shape[2:])
    return flat.index_select(0, layout.valid_index).unsqueeze(0)


def reverse_documents(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first lengths[i] positions of row i of x [N, L, ...] and leave the padding
    after them in place (a bidirectional block must not read its padding first)."""
    steps = torch.arange(x.shape[1], device=x.device)
    last = (lengths.to(x.device) - 1)[:, None]
    index = torch.where(steps[None, :] <= last, last - steps[None, :], steps[None, :])
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return torch.gather(x, 1, index)


def cu_seqlens_from_lengths(lengths, device: torch.device | None = None) -> torch.Tensor:
    """[L_0, ..., L_{N-1}] -> cu_seqlens [N + 1] (int64): 0, L_0, L_0 + L_1, ..."""
    lengths = torch.as_tensor(lengths, dtype=torch.long, device=device)
    return torch.cat([lengths.new_zeros(1), torch.cumsum(lengths, 0)])


def cu_seqlens_from_starts(starts, row_length: int, rows: int = 1) -> torch.Tensor:
    """Boundaries of `rows` rows of `row_length` positions flattened into one packed row,
    with further documents starting at `starts` (positions in the flattened row; row
    starts are always boundaries). Returns cu_seqlens [N + 1] (int64, CPU)."""
    row_starts = torch.arange(rows, dtype=torch.long) * row_length
    starts = torch.as_tensor(starts, dtype=torch.long).flatten()
    bounds = torch.cat([row_starts, starts, torch.tensor([rows * row_length])])
    return torch.unique(bounds)  # sorted, duplicates removed


__all__ = [
    "PackedLayout",
    "check_cu_seqlens",
    "cu_seqlens_from_lengths",
    "cu_seqlens_from_starts",
    "pack",
    "packed_layout",
    "reverse_documents",
    "unpack",
]
