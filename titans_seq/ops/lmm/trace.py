"""What the memory did at every token: the paper's "surprise" and the gates, for inspection.

`lmm_memory_trace` takes the same arguments as `lmm_memory` and returns, per token and head,
the quantities that decide how strongly the token is written:

    surprise     ||u_t||, the norm of the inner gradient grad_W ||f_W(k_t) - v_t||^2 at the
                 weights entering the token's chunk, before any clip (the paper's momentary
                 surprise)
    loss         ||f_W(k_t) - v_t||^2 at the same weights (the inner loss)
    theta, eta, alpha   learning rate, momentum decay, forgetting rate (eta = 0 without
                 momentum, alpha = 0 without forgetting)
    clip_factor  min(1, clip / ||u_t||): 1 where the inner-gradient clip is inactive
    step         theta_t * clip_factor_t * ||u_t||, the norm of the token's write into S

It recomputes the memory with the chunk-parallel form under `torch.no_grad()` (the same
function every backend computes), so it is an opt-in second pass that never changes a
model's outputs or gradients.
"""

from __future__ import annotations

import dataclasses

import torch

from .chunked import lmm_memory_chunked
from .clip import clip_factor
from .state import MemoryState

TRACE_FIELDS = ("surprise", "loss", "theta", "eta", "alpha", "clip_factor", "step")


@dataclasses.dataclass
class MemoryTrace:
    """Per-token diagnostics of one memory over a sequence; every field is [B, T, H] float32.

    `clip_active` is the fraction of (token, head) pairs whose write the clip scaled down.
    """

    surprise: torch.Tensor
    loss: torch.Tensor
    theta: torch.Tensor
    eta: torch.Tensor
    alpha: torch.Tensor
    clip_factor: torch.Tensor
    step: torch.Tensor

    @property
    def clip_active(self) -> float:
        return float((self.clip_factor < 1).float().mean())

    def cat(self, other: MemoryTrace) -> MemoryTrace:
        """This trace followed by `other` along the time axis (streamed calls)."""
        return MemoryTrace(
            *(torch.cat((getattr(self, f), getattr(other, f)), dim=1) for f in TRACE_FIELDS)
        )

    def cpu(self) -> MemoryTrace:
        return MemoryTrace(*(getattr(self, f).cpu() for f in TRACE_FIELDS))

    def slice(self, start: int, end: int | None = None) -> MemoryTrace:
        """Tokens start:end of every field."""
        return MemoryTrace(*(getattr(self, f)[:, start:end] for f in TRACE_FIELDS))

    def summary(self) -> dict[str, float]:
        """Means (and surprise quantiles) over every token and head: what a log line shows."""
        s = self.surprise.flatten().double()
        quantiles = torch.quantile(s, torch.tensor([0.5, 0.99], dtype=s.dtype)) if s.numel() else s
        return {
            "tokens": int(self.surprise.shape[1]),
            "surprise_mean": float(s.mean()),
            "surprise_median": float(quantiles[0]),
            "surprise_p99": float(quantiles[1]),
            "loss_mean": float(self.loss.double().mean()),
            "theta_mean": float(self.theta.double().mean()),
            "eta_mean": float(self.eta.double().mean()),
            "alpha_mean": float(self.alpha.double().mean()),
            "clip_active": self.clip_active,
        }


@torch.no_grad()
def lmm_memory_trace(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights,
    chunk_size: int = 16,
    initial_state: MemoryState | None = None,
    activation: str = "silu",
    inner_grad_clip: float | None = None,
    forget_toward: str = "zero",
) -> MemoryTrace:
    """The memory's per-token diagnostics (module docstring) for the same inputs as
    `lmm_memory`: q, k, v [B, T, H, d], gates [B, T, H] -> MemoryTrace of [B, T, H] fields."""
    if isinstance(weights, torch.Tensor):
        weights = (weights,)
    records: list = []
    with torch.autocast(q.device.type, enabled=False):
        lmm_memory_chunked(
            q,
            k,
            v,
            theta,
            eta,
            alpha,
            tuple(w.detach() for w in weights),
            chunk_size=chunk_size,
            initial_state=None if initial_state is None else initial_state.detach(),
            activation=activation,
            inner_grad_clip=inner_grad_clip,
            trace=records,
            forget_toward=forget_toward,
        )
    loss = torch.cat([r[0] for r in records], dim=2).transpose(1, 2).float()  # [B, T, H]
    sq_norm = torch.cat([r[1] for r in records], dim=2).transpose(1, 2).float()
    surprise = sq_norm.sqrt()
    if inner_grad_clip is None:
        factor = torch.ones_like(surprise)
    else:
        factor = clip_factor(sq_norm, inner_grad_clip)
    theta = theta.detach().float()
    zeros = torch.zeros_like(theta)
    return MemoryTrace(
        surprise=surprise,
        loss=loss,
        theta=theta,
        eta=zeros if eta is None else eta.detach().float(),
        alpha=zeros if alpha is None else alpha.detach().float(),
        clip_factor=factor,
        step=theta * factor * surprise,
    )
