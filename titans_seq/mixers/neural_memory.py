"""The Titans neural long-term memory as a layer: projections, conv, gates and the memory op.

`NeuralMemory` turns x [B, T, D] into memory reads [B, T, H, d] while absorbing x into the
memory; the `lmm` mixer and the hybrids (MAC, MAG, MAL) build on it.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.conv import CausalDepthwiseConv1d
from ..nn.norm import l2_normalize
from ..ops.lmm import MemoryState, lmm_memory, resolve_backend
from ..ops.lmm.anchor import check_anchored_backend
from ..ops.lmm.memory_mlp import activation_fn
from ..ops.lmm.operand_precision import check_rounding_backend
from ..ops.lmm.state import state_dtype
from ..ops.lmm.tiering import CompileTier
from ..ops.lmm.trace import lmm_memory_trace
from .memory_config import MemoryConfig

# Gate logits start here (through the bias) so a fresh memory keeps most of its momentum
# and forgets little: sigmoid(2) = 0.88, sigmoid(-5) = 0.007. The learning rate starts at
# half its bound with the damped parametrisation (sigmoid(0): a token's total write is
# theta_max / 2) and at sigmoid(-2) = 0.12 of theta_max without it (its writes are then
# amplified by the momentum, about 1 / (1 - 0.88) = 8 times).
_THETA_BIAS, _ETA_BIAS, _ALPHA_BIAS = -2.0, 2.0, -5.0
_DAMPED_THETA_BIAS = 0.0


@dataclasses.dataclass
class NeuralMemoryState:
    """conv_cache: [B, K-1, 3*H*d] last projected inputs (None without conv);
    memory: the memory op's state (weights, momentum, partial-chunk bookkeeping)."""

    conv_cache: torch.Tensor | None
    memory: MemoryState


class NeuralMemory(nn.Module):
    """x [B, T, D] -> memory reads [B, T, H, d] (retrieval after absorbing each token).

    q, k, v = SiLU(causal depthwise conv(Linear(x))), q and k l2-normalised; per token and
    head eta = sigmoid(.), alpha = sigmoid(.) and theta = theta_max * sigmoid(.) * (1 - eta)
    from x (without the (1 - eta) factor when damped_momentum=False). The parametrisation
    and its defaults are explained in docs/architecture.md ("Stable parametrisation").
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        config: MemoryConfig | None = None,
        backend: str = "auto",
    ):
        super().__init__()
        config = MemoryConfig() if config is None else config
        if heads < 1:
            raise ValueError(f"heads must be >= 1, got {heads}")
        if head_dim is None:
            if dim % heads:
                raise ValueError(f"dim={dim} is not divisible by heads={heads}; pass head_dim")
            head_dim = dim // heads
        resolve_backend(backend, torch.device("cpu"))  # fail early on a typo
        check_rounding_backend(config.operand_precision, backend)
        check_anchored_backend(config.forget_toward, backend, config.depth)
        self.config = config
        self.dim, self.heads, self.head_dim = dim, heads, head_dim
        self.chunk_size, self.memory_depth = config.chunk_size, config.depth
        self.activation = config.activation
        self.use_momentum, self.use_forgetting = config.use_momentum, config.use_forgetting
        self.theta_max = config.step_bound
        self.inner_grad_clip = config.clip_bound(head_dim)
        self.backend = backend
        # under "auto" on a CPU: compiled chunk steps once (or as soon as a training run's
        # plan says) the layer's training pays for compiling them (`ops/lmm/tiering.py`)
        self.compile_tier = CompileTier()
        self.damped_momentum = config.damped_momentum and config.use_momentum
        self.conv_size = config.conv_size

        inner = heads * head_dim
        self.qkv_proj = nn.Linear(dim, 3 * inner, bias=False)
        self.conv = CausalDepthwiseConv1d(3 * inner, self.conv_size) if self.conv_size > 1 else None
        self.num_gates = 1 + int(self.use_momentum) + int(self.use_forgetting)
        self.gate_proj = nn.Linear(dim, self.num_gates * heads)
        # read as `.weight` in float32 by `project`, not called: adapters that wrap the
        # layer's forward (LoRA) would be bypassed, so they skip layers flagged like this
        self.gate_proj.weight_read_directly = True

        widths = config.memory_widths(head_dim)
        # set by `titans_seq.inspection.record_memory` while it records (not a module)
        self.recorder = None
        self.memory_weights = nn.ParameterList(
            nn.Parameter(torch.empty(heads, widths[i + 1], widths[i])) for i in range(config.depth)
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.qkv_proj.weight)
        nn.init.normal_(self.gate_proj.weight, std=0.02)
        theta_bias = _DAMPED_THETA_BIAS if self.damped_momentum else _THETA_BIAS
        biases = (
            [theta_bias] + [_ETA_BIAS] * self.use_momentum + [_ALPHA_BIAS] * self.use_forgetting
        )
        with torch.no_grad():
            self.gate_proj.bias.copy_(torch.tensor(biases).repeat_interleave(self.heads))
            for w in self.memory_weights:
                nn.init.normal_(w, std=1.0 / math.sqrt(w.shape[-1]))

    def signature(self) -> tuple:
        shapes = tuple(tuple(w.shape) for w in self.memory_weights)
        return (
            self.chunk_size,
            self.conv_size,
            self.use_momentum,
            self.use_forgetting,
            self.damped_momentum,
            shapes,
        ) + ((self.config.forget_toward,) if self.config.forget_toward != "zero" else ())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token of the chunk-parallel memory (C = chunk_size): per head,
        forward 8 P + 2 C sum_l (in_l + out_l), P the memory MLP's weights per head (the MLP
        forward and error back-propagation at the chunk weights, the retrieval's two matmuls
        with W_s and S_s, the intra-chunk products X H^T and (M theta) Delta); backward twice
        the forward."""
        shapes = [(w.shape[-1], w.shape[-2]) for w in self.memory_weights]  # (in, out)
        weights = sum(i * o for i, o in shapes)
        chunk = min(self.chunk_size, seq_len)
        forward = 8.0 * weights + 2.0 * chunk * sum(i + o for i, o in shapes)
        return 3.0 * self.heads * forward

    def project(self, x: torch.Tensor, conv_cache: torch.Tensor | None):
        """x [B, T, D] -> (q, k, v [B, T, H, d], theta/eta/alpha [B, T, H] or None, new cache)."""
        B, T, _ = x.shape
        qkv = self.qkv_proj(x)
        if self.conv is not None:
            qkv, conv_cache = self.conv(qkv, conv_cache)
        q, k, v = F.silu(qkv).view(B, T, 3, self.heads, self.head_dim).unbind(2)
        q, k = l2_normalize(q), l2_normalize(k)
        # gates in the memory state's precision (float32, or float64 for float64 inputs), also
        # under autocast: they scale every write of the recurrence
        dtype = state_dtype(x)
        with torch.autocast(x.device.type, enabled=False):
            logits = F.linear(
                x.to(dtype), self.gate_proj.weight.to(dtype), self.gate_proj.bias.to(dtype)
            )
        gates = torch.sigmoid(logits).view(B, T, self.num_gates, self.heads)
        theta = self.theta_max * gates[:, :, 0]
        eta = gates[:, :, 1] if self.use_momentum else None
        if self.damped_momentum:
            theta = theta * (1 - eta)
        alpha = gates[:, :, -1] if self.use_forgetting else None
        return q, k, v, theta, eta, alpha, conv_cache

    def forward(
        self,
        x: torch.Tensor,
        state: NeuralMemoryState | None = None,
        persistent: torch.Tensor | None = None,
        keep_persistent_reads: bool = False,
    ):
        """x [B, T, D] -> (reads [B, T, H, d], new NeuralMemoryState).

        persistent: [N_p, D] learned tokens that the memory absorbs before the stream, once,
        when it starts (state=None), like a learned prefix; their reads are dropped (kept in
        front, [B, N_p + T, H, d], with keep_persistent_reads=True), so
        streaming equals one-shot.
        """
        T = x.shape[1]
        if state is None and persistent is not None:
            prefix_tokens = persistent.to(x.dtype).unsqueeze(0).expand(x.shape[0], -1, -1)
            x = torch.cat([prefix_tokens, x], dim=1)
        prefix = x.shape[1] - T
        q, k, v, theta, eta, alpha, conv_cache = self.project(
            x, None if state is None else state.conv_cache
        )
        if self.recorder is not None:  # opt-in diagnostics (titans_seq.inspection)
            trace = lmm_memory_trace(
                q,
                k,
                v,
                theta,
                eta,
                alpha,
                tuple(self.memory_weights),
                chunk_size=self.chunk_size,
                initial_state=None if state is None else state.memory,
                activation=self.activation,
                inner_grad_clip=self.inner_grad_clip,
                forget_toward=self.config.forget_toward,
            )
            self.recorder(self, trace.slice(prefix), continues=state is not None)
        y, memory = lmm_memory(
            q,
            k,
            v,
            theta,
            eta,
            alpha,
            tuple(self.memory_weights),
            chunk_size=self.chunk_size,
            initial_state=None if state is None else state.memory,
            output_final_state=True,
            backend=self._call_backend(q),
            activation=self.activation,
            inner_grad_clip=self.inner_grad_clip,
            triton_options=self.config.triton,
            operand_precision=self.config.operand_precision,
            forget_toward=self.config.forget_toward,
        )
        if prefix and not keep_persistent_reads:
            y = y[:, prefix:]
        return y, NeuralMemoryState(conv_cache, memory)

    def _call_backend(self, q: torch.Tensor) -> str:
        """The backend of this call: the layer's, with "auto" resolved by its compile tier,
        or the eager "torch" steps when the products' operands are rounded."""
        if self.config.operand_precision != "fp32":
            return "torch"
        return self.compile_tier.backend(
            self.backend, q.shape, q.device, self.memory_weights, self.chunk_size
        )

    def read(self, q: torch.Tensor, state: NeuralMemoryState | None, batch_size: int):
        """Retrieval without update: f_W(q) with the current weights. q: [B, T, H, d].

        With state=None the learned initial weights W_0 are used.
        """
        if state is None:
            weights = tuple(
                w.unsqueeze(0).expand(batch_size, *w.shape) for w in self.memory_weights
            )
        else:
            weights = state.memory.weights
        act = activation_fn(self.activation)[0]
        h = q.to(weights[0].dtype)
        with torch.autocast(q.device.type, enabled=False):  # memory arithmetic stays fp32
            for i, w in enumerate(weights):  # w: [B, H, out, in], applied to every position
                h = torch.einsum("bhoi,bthi->btho", w, h)
                if i < len(weights) - 1:
                    h = act(h)
        return h.to(q.dtype)
