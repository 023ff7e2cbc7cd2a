"""The one interface every sequence mixer implements: `y, state = mixer(x, state=None)`."""

from __future__ import annotations

import torch
from torch import nn

from ..packing import pack, packed_layout, unpack
from .state import MixerState


class SequenceMixer(nn.Module):
    """Base class: a causal map `x [B, T, D] -> y [B, T, D]` with a streaming state.

    Subclasses implement `mix(x, state)` and `signature()`. `forward` validates the input
    and the state, so every mixer rejects bad input with the same clear messages.
    Processing a sequence in pieces, passing the returned state along, equals processing
    it at once.
    """

    # True for a mixer that normalises its own input: it reads the block's raw residual
    # stream, so a `ResidualBlock` skips its pre-norm (MAL's "two_layers" layout, which holds
    # a second residual layer inside the mixer and needs the stream itself)
    owns_pre_norm: bool = False
    # whether `forward` refuses NaN/inf in x, naming the first one. A mixer mixes positions,
    # so one non-finite value would otherwise spread to outputs before it (a masked product
    # 0 * NaN is NaN) without a word. The check reads all of x (on a GPU it waits for x); a
    # model that checks its own input turns it off for its inner layers (`ResidualBlock`)
    check_finite: bool = True

    def __init__(self, dim: int):
        super().__init__()
        if not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = dim

    # -- to implement ---------------------------------------------------------------------
    def signature(self) -> tuple:
        """Hashable description of everything a state depends on (class + shapes/options)."""
        raise NotImplementedError

    def mix(self, x: torch.Tensor, state: MixerState | None) -> tuple[torch.Tensor, MixerState]:
        """x: [B, T, D] (validated) -> (y [B, T, D], new state)."""
        raise NotImplementedError

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward) that the 6 N count of the mixer's
        parameters misses at sequence length `seq_len`: attention scores, the memory's chunk
        products. 0 for a mixer that is all matmuls with its parameters."""
        return 0.0

    # -- shared ---------------------------------------------------------------------------
    def forward(
        self,
        x: torch.Tensor,
        state: MixerState | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, MixerState | None]:
        """x [B, T, D] -> (y [B, T, D], state after x).

        cu_seqlens: document boundaries [N + 1] of a packed x [1, total, D]; every document
        is then mixed as if alone (see `titans_seq.packing`) and the returned state is None
        (a packed call processes whole documents; to continue a stream, give one stream per
        batch row instead).
        """
        self.check_input(x)
        if cu_seqlens is not None:
            if state is not None:
                raise ValueError(
                    f"{type(self).__name__} got both a state and cu_seqlens: packed documents "
                    "each start fresh, so a packed call takes state=None"
                )
            layout = packed_layout(cu_seqlens, x.shape[1], x.device)
            y, _ = self.mix(unpack(x, layout), None)
            return pack(y, layout), None
        if state is not None:
            self.check_state(state, x)
        return self.mix(x, state)

    def check_input(self, x: torch.Tensor) -> None:
        name = type(self).__name__
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} expects a torch.Tensor [B, T, D], got {type(x).__name__}")
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} expects a floating-point tensor, got dtype {x.dtype}")
        if x.dim() != 3:
            raise ValueError(
                f"{name} expects x of shape [B, T, D] (rank 3), got rank {x.dim()} "
                f"with shape {tuple(x.shape)}"
            )
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"{name} was built for D={self.dim} but x has last dimension {x.shape[-1]} "
                f"(shape {tuple(x.shape)})"
            )
        if x.shape[1] == 0:
            raise ValueError(f"{name} got an empty sequence (T=0, shape {tuple(x.shape)})")
        if x.shape[0] == 0:
            raise ValueError(f"{name} got an empty batch (B=0, shape {tuple(x.shape)})")
        if self.check_finite and not torch.compiler.is_compiling():
            self._check_finite(x)

    def _check_finite(self, x: torch.Tensor) -> None:
        finite = torch.isfinite(x)
        if bool(finite.all()):
            return
        b, t, d = (int(i) for i in (~finite).nonzero()[0])
        raise ValueError(
            f"{type(self).__name__} got a non-finite value ({x[b, t, d].item()}) in x at "
            f"batch {b}, position {t}, feature {d} ({int((~finite).sum())} in all): mixing "
            "would spread it to other positions, earlier ones included. Fill or drop the "
            "missing values first (set mixer.check_finite = False to skip this check)"
        )

    def check_state(self, state: MixerState, x: torch.Tensor) -> None:
        name = type(self).__name__
        if not isinstance(state, MixerState):
            raise TypeError(
                f"{name} expects state=None or a MixerState, got {type(state).__name__}"
            )
        if state.signature != self.signature():
            raise ValueError(
                f"{name} got a state produced by a different mixer configuration: "
                f"{state.signature} != {self.signature()}"
            )
        if state.batch_size != x.shape[0]:
            raise ValueError(
                f"{name} got a state for batch size {state.batch_size} but x has batch size "
                f"{x.shape[0]}"
            )

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
