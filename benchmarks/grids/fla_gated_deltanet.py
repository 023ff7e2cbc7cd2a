"""flash-linear-attention's Gated DeltaNet as a titans-seq mixer, on any device, for the
side-by-side studies (`lm_long_context.py --mixers gdn`).

fla's `GatedDeltaNet` layer calls Triton kernels (its chunked delta rule, fused gated norm,
short convolution) that need a GPU. This mixer builds the same layer from fla's own
PyTorch forms: the gate `naive_gdn_gate` (g = -exp(A_log) softplus(a + dt_bias)) and the
chunked delta rule `naive_chunk_gated_delta_rule` (the recurrence
S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t k_t v_t^T, o_t = S_t^T q_t / sqrt(d_k),
chunk 64), around the layer's parametrisation in fla 0.6.0: q, k, v projections each
through a causal depthwise convolution (kernel 4) and SiLU, q and k L2-normalised,
beta = sigmoid(b_proj x), A_log ~ log U(0, 16), dt_bias the inverse softplus of
dt ~ logU(0.001, 0.1), the output RMS-normalised per head and gated by SiLU(g_proj x).
Head dims are `dim / heads` for keys and values (expand_v 1, as the memory mixers' heads).

    pip install --no-deps ../shared/wheels/fla_core-0.6.0-py3-none-any.whl \
        ../shared/wheels/flash_linear_attention-0.6.0-py3-none-any.whl einops

Importing this module registers the mixer as "fla_gated_deltanet". Its state holds the
delta rule's matrix [B, H, d_k, d_v] and the convolutions' last 3 inputs, so streaming
equals one shot.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from titans_seq.mixers.base import SequenceMixer
from titans_seq.mixers.registry import register_mixer
from titans_seq.mixers.state import MixerState

NAME = "fla_gated_deltanet"
CONV_SIZE = 4
CHUNK = 64


@dataclasses.dataclass
class DeltaRuleState(MixerState):
    """matrix: [B, H, d_k, d_v] float32; conv: [B, CONV_SIZE - 1, 2 * key_dim + value_dim],
    the projections' last inputs of the convolution."""

    matrix: torch.Tensor = None
    conv: torch.Tensor = None


@register_mixer(NAME)
class FlaGatedDeltaNet(SequenceMixer):
    """x [B, T, D] -> y [B, T, D]: fla's Gated DeltaNet layer in PyTorch (see module)."""

    def __init__(self, dim: int, heads: int = 4, norm_eps: float = 1e-5):
        super().__init__(dim)
        if dim % heads:
            raise ValueError(f"dim {dim} must be divisible by heads {heads}")
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.conv = nn.Conv1d(3 * dim, 3 * dim, CONV_SIZE, groups=3 * dim, bias=False)
        self.a_proj = nn.Linear(dim, heads, bias=False)
        self.b_proj = nn.Linear(dim, heads, bias=False)
        self.g_proj = nn.Linear(dim, dim, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.empty(heads).uniform_(0, 16)))
        dt = torch.exp(torch.rand(heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
        dt = dt.clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.o_norm = nn.RMSNorm(self.head_dim, eps=norm_eps)
        self.o_proj = nn.Linear(dim, dim, bias=False)

    def signature(self) -> tuple:
        return (NAME, self.dim, self.heads)

    def mix(self, x: torch.Tensor, state: DeltaRuleState | None):
        from fla.ops.gated_delta_rule.gate import naive_gdn_gate
        from fla.ops.gated_delta_rule.naive import naive_chunk_gated_delta_rule

        B, T, D = x.shape
        H, d = self.heads, self.head_dim
        projected = self.qkv(x)  # [B, T, 3D]
        tail = (projected.new_zeros(B, CONV_SIZE - 1, 3 * D) if state is None else state.conv).to(
            projected.dtype
        )
        padded = torch.cat([tail, projected], dim=1)  # the convolution's causal context
        mixed = F.silu(self.conv(padded.transpose(1, 2)).transpose(1, 2))  # [B, T, 3D]
        q, k, v = mixed.view(B, T, 3, H, d).unbind(2)
        q, k = F.normalize(q.float(), dim=-1), F.normalize(k.float(), dim=-1)
        beta = torch.sigmoid(self.b_proj(x).float())
        g = naive_gdn_gate(self.a_proj(x).float(), self.A_log, self.dt_bias)
        o, matrix = naive_chunk_gated_delta_rule(
            q, k, v.float(), g, beta, chunk_size=CHUNK,
            initial_state=None if state is None else state.matrix,
            output_final_state=True,
        )  # fmt: skip
        o = self.o_norm(o) * F.silu(self.g_proj(x).float().view(B, T, H, d))
        y = self.o_proj(o.reshape(B, T, D).to(x.dtype))
        position = T if state is None else state.position + T
        new_state = DeltaRuleState(
            self.signature(), B, position, matrix=matrix, conv=padded[:, -(CONV_SIZE - 1) :]
        )
        return y, new_state
