"""`Backbone`: a stack of pre-norm residual blocks around any registered sequence mixer.

Each block is
    x = x + mixer(RMSNorm(x))          (the sequence mixer, carrying a streaming state)
    x = x + SwiGLU(RMSNorm(x))         (the channel MLP; absent when mlp_ratio = 0)
(a mixer with `owns_pre_norm`, such as MAL with layout="two_layers", gets x itself and
normalises inside)
and the stack ends with a final RMSNorm. Mixers are built by name through
`titans_seq.mixers.registry.build_mixer`, so every registered mixer, present or future,
plugs in, and different layers may use different mixers.

Initialization: the residual output projections (each mixer's `out_proj` when it has one,
and each MLP's `down_proj`) are scaled by 1/sqrt(2 * depth) so that the residual stream's
variance does not grow with depth (GPT-2 / Megatron practice).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from .mixers.base import SequenceMixer
from .mixers.build import build_mixer
from .mixers.layer_spec import (
    layer_mixer_names,
    layer_mixer_options,
    pin_layer_options,
    pin_saved_defaults,
)
from .mixers.state import MixerState
from .nn.mlp import SwiGLU, swiglu_hidden_dim
from .nn.norm import RMSNorm
from .packing import pack, packed_layout, reverse_documents, unpack

MERGES = ("add", "linear")

__all__ = [
    "Backbone",
    "ResidualBlock",
    "detach_states",
    "layer_mixer_names",
    "layer_mixer_options",
    "pin_layer_options",
    "pin_saved_defaults",
]


class ResidualBlock(nn.Module):
    """Pre-norm block: x [B, T, D] -> (x [B, T, D], mixer state).

    In bidirectional mode the mixer runs on the sequence and on its time reversal (one call
    on a doubled batch) and the two outputs are merged: "add" sums them, "linear" applies a
    learned [2D -> D] map initialized to the sum. Streaming states do not exist there.
    """

    def __init__(
        self,
        dim: int,
        mixer: SequenceMixer,
        mlp_hidden_dim: int,
        bidirectional: bool = False,
        merge: str = "add",
        dropout: float = 0.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        self.mixer_norm = nn.Identity() if mixer.owns_pre_norm else RMSNorm(dim, eps=norm_eps)
        self.mixer = mixer
        # the block's input is the model's own stream, checked where data enters the model
        # (token ids, validated series): no device sync per layer
        mixer.check_finite = False
        self.bidirectional = bidirectional
        self.merge = None
        if bidirectional and merge == "linear":
            self.merge = nn.Linear(2 * dim, dim, bias=False)
            with torch.no_grad():
                eye = torch.eye(dim)
                self.merge.weight.copy_(torch.cat((eye, eye), dim=1))
        self.mlp_norm = RMSNorm(dim, eps=norm_eps) if mlp_hidden_dim else None
        self.mlp = SwiGLU(dim, mlp_hidden_dim) if mlp_hidden_dim else None
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        state: MixerState | None = None,
        lengths: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, MixerState | None]:
        """x [B, T, D] -> (x [B, T, D], mixer state). `lengths` [B]: x is a right-padded
        batch of documents of these lengths (only read in bidirectional mode, where each
        document is reversed within its own length)."""
        h = self.mixer_norm(x)
        if self.bidirectional:
            h, state = self._mix_both_directions(h, lengths), None
        else:
            h, state = self.mixer(h, state)
        x = x + self.dropout(h)
        if self.mlp is not None:
            x = x + self.dropout(self.mlp(self.mlp_norm(x)))
        return x, state

    def _mix_both_directions(self, h: torch.Tensor, lengths: torch.Tensor | None) -> torch.Tensor:
        batch = h.shape[0]

        def reverse(t: torch.Tensor) -> torch.Tensor:
            return t.flip(1) if lengths is None else reverse_documents(t, lengths)

        both, _ = self.mixer(torch.cat((h, reverse(h)), dim=0))
        forward, backward = both[:batch], reverse(both[batch:])
        if self.merge is None:
            return forward + backward
        return self.merge(torch.cat((forward, backward), dim=-1))


class Backbone(nn.Module):
    """Stack of residual mixer blocks: x [B, T, D] -> (y [B, T, D], per-layer states).

    Args:
        dim: model width D.
        depth: number of blocks.
        mixer: a mixer name for all layers, a pattern such as "lmm*3,attention" tiled over
            the depth, or a list of one name per layer (see `layer_mixer_names`).
        mixer_options: options for the mixers: one dict for all layers, a dict keyed by
            mixer name, or a list of one dict per layer (see `layer_mixer_options`).
        heads: heads of every mixer.
        mlp_ratio: SwiGLU hidden width as the ratio of a parameter-matched plain MLP
            (hidden = 2/3 * mlp_ratio * D, rounded up to a multiple of 8); 0 = no MLP.
        bidirectional: encoder mode: each block mixes the sequence in both directions (not
            causal; no streaming states).
        merge: how bidirectional outputs combine: "add" or "linear" (learned).
        dropout: dropout on the residual branches.
        norm_eps: RMSNorm epsilon.

    `forward(x, states=None)`: `states` is None (fresh) or a list of `depth` per-layer states
    (each None = fresh) as returned by a previous call; processing a stream in pieces and
    passing the states along equals processing it at once. Returns `(y, states)`, with
    `states=None` in bidirectional mode.
    """

    def __init__(
        self,
        dim: int,
        depth: int,
        mixer: str | Sequence[str] = "lmm",
        mixer_options: Mapping | Sequence[Mapping | None] | None = None,
        heads: int = 1,
        mlp_ratio: float = 4.0,
        bidirectional: bool = False,
        merge: str = "add",
        dropout: float = 0.0,
        norm_eps: float = 1e-6,
    ):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if isinstance(depth, bool) or not isinstance(depth, int) or depth <= 0:
            raise ValueError(f"depth must be a positive integer, got {depth!r}")
        if not mlp_ratio >= 0:
            raise ValueError(f"mlp_ratio must be >= 0 (0 = no MLP), got {mlp_ratio!r}")
        if merge not in MERGES:
            raise ValueError(f"merge must be one of {MERGES}, got {merge!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.dim = dim
        self.depth = depth
        self.bidirectional = bool(bidirectional)
        self.layer_mixers = layer_mixer_names(mixer, depth)
        options = layer_mixer_options(mixer_options, self.layer_mixers)
        mlp_hidden_dim = swiglu_hidden_dim(dim, mlp_ratio) if mlp_ratio > 0 else 0
        self.blocks = nn.ModuleList(
            ResidualBlock(
                dim,
                build_mixer(name, dim=dim, heads=heads, **layer_options),
                mlp_hidden_dim,
                bidirectional=self.bidirectional,
                merge=merge,
                dropout=dropout,
                norm_eps=norm_eps,
            )
            for name, layer_options in zip(self.layer_mixers, options)
        )
        self.final_norm = RMSNorm(dim, eps=norm_eps)
        self._scale_residual_projections()

    def _scale_residual_projections(self) -> None:
        scale = 1.0 / math.sqrt(2 * self.depth)
        with torch.no_grad():
            for block in self.blocks:
                out_proj = getattr(block.mixer, "out_proj", None)
                if isinstance(out_proj, nn.Linear):
                    out_proj.weight.mul_(scale)
                if block.mlp is not None:
                    block.mlp.down_proj.weight.mul_(scale)

    def forward(
        self,
        x: torch.Tensor,
        states: Sequence[MixerState | None] | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[MixerState] | None]:
        """x: [B, T, D] -> (y [B, T, D], list of `depth` states, or None if bidirectional).

        cu_seqlens: document boundaries [N + 1] of a packed x [1, total, D]: each document
        goes through the stack as if alone (in both directions within itself when
        bidirectional; see `titans_seq.packing`); the states returned are then None.
        """
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != self.dim:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"Backbone expects x of shape [B, T, {self.dim}], got {shape}")
        if cu_seqlens is not None:
            return self._forward_packed(x, states, cu_seqlens), None
        if self.bidirectional:
            if states is not None:
                raise ValueError(
                    "a bidirectional Backbone sees the whole sequence at once and has no "
                    "streaming state; call it with states=None"
                )
            for block in self.blocks:
                x, _ = block(x)
            return self.final_norm(x), None
        if states is None:
            states = [None] * self.depth
        elif not isinstance(states, (list, tuple)) or len(states) != self.depth:
            got = len(states) if isinstance(states, (list, tuple)) else type(states).__name__
            raise ValueError(
                f"states must be None or a list of {self.depth} per-layer states, got {got}"
            )
        new_states = []
        for block, state in zip(self.blocks, states):
            x, state = block(x, state)
            new_states.append(state)
        return self.final_norm(x), new_states

    def _forward_packed(self, x: torch.Tensor, states, cu_seqlens) -> torch.Tensor:
        """Packed x [1, total, D] -> y [1, total, D]: the documents laid out as rows of a
        padded batch once for the whole stack (the MLPs and norms act per position)."""
        if states is not None:
            raise ValueError(
                "packed documents (cu_seqlens) each start fresh: call the Backbone with states=None"
            )
        layout = packed_layout(cu_seqlens, x.shape[1], x.device)
        h = unpack(x, layout)
        lengths = layout.lengths if self.bidirectional else None
        for block in self.blocks:
            h, _ = block(h, None, lengths)
        return pack(self.final_norm(h), layout)

    def extra_repr(self) -> str:
        mode = ", bidirectional" if self.bidirectional else ""
        return f"dim={self.dim}, depth={self.depth}, mixers={self.layer_mixers}{mode}"


def detach_states(states: Sequence[MixerState | None] | None) -> list[MixerState | None] | None:
    """Per-layer states cut from the autograd graph (truncated back-propagation through time)."""
    if states is None:
        return None
    return [None if state is None else state.detach() for state in states]
