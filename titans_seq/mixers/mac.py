"""`mac`: Titans memory as context (paper section 4.1), strictly causal.

The stream is cut into segments of `segment_size` tokens at absolute stream positions. For
segment s (stream positions sS … sS + S - 1):

 1. Retrieval (before the segment): N_l = `num_memory_tokens` learned query vectors r_i
    (per head, l2-normalised like the memory keys) read the memory with the weights it has
    after the previous segment, W_{sS-1}, with no update: c_i = f_{W_{sS-1}}(r_i). The reads
    are mapped to N_l context tokens in the input space (Linear + RMSNorm).
 2. Attention: every token of the segment attends, causally and only inside its segment,
    over [N_p persistent tokens ‖ the N_l context tokens ‖ the segment so far]; the prefix
    (persistent + context) is always visible, and goes through the same key/value
    projection as the stream tokens (no rotary position). -> a [B, S, H, d]
 3. Memory update and read-out, token by token: the memory absorbs the attention layer's
    output h_t = x_t + attention_proj(a_t) (its q/k/v/gates are projections of h_t) and
    reads m_t = f_{W_t}(q_t) with the weights after absorbing h_t (the LMM retrieval rule).
    `attention_proj` starts at zero, so the memory first learns from the tokens themselves
    and brings in the attention output as it trains (on the recall task this is what makes
    MAC train as fast as MAG: with a_t alone, a blurred average at initialization, it lags).
 4. y_t = out_proj( RMSNorm(a_t) * SiLU(RMSNorm(m_t)) )   (the paper's o = y ⊗ M*(y)).

Causality: the context tokens of segment s depend only on W_{sS-1}, i.e. on tokens < sS;
a_t depends on the prefix and tokens sS … t; m_t on h_{≤t} (the memory's chunked update takes
its inner gradients at the weights entering the chunk, and the depthwise conv is causal).
So y_t depends on x_{≤t} only. (The paper's retrieval with the segment's own queries would
let token sS see the whole segment through the context tokens; learned queries avoid that.)

Streaming: the state holds the memory state, the keys/values of the current segment's
tokens so far (fewer than S) and the context tokens' keys/values of the current segment, so
a stream cut anywhere, also inside a segment, gives the one-shot result.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..nn.norm import RMSNorm
from .base import SequenceMixer
from .checks import check_int, resolve_head_dim
from .hybrid_parts import AttentionBranch, gated_combine, hybrid_repr
from .memory_branch import MemoryBackend, build_memory, persistent_tokens
from .memory_config import MemoryConfig
from .neural_memory import NeuralMemoryState
from .registry import register_mixer
from .state import MixerState


@dataclasses.dataclass
class MACState(MixerState):
    """State of "mac".

    Attributes:
        memory: the NeuralMemory's state (constant size).
        keys, values: [B, H, n, d] attention keys (RoPE applied) and values of the n =
            position % segment_size tokens of the current segment seen so far (None at a
            segment boundary); bounded by segment_size - 1.
        context_keys, context_values: [B, H, N_l, d] keys/values of the memory context
            tokens retrieved at the start of the current segment (None at a segment
            boundary or when num_memory_tokens = 0).
    """

    memory: NeuralMemoryState | None = None
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    context_keys: torch.Tensor | None = None
    context_values: torch.Tensor | None = None


def _fresh_weight_nodes(memory: NeuralMemoryState | None) -> NeuralMemoryState | None:
    """The memory state with its weight tensors re-wrapped as new autograd nodes (views).

    In MAC the memory's keys/values depend on the memory weights themselves (through the
    context tokens, read from those weights). The inner loss l(W; k_t, v_t) treats k_t and
    v_t as constants: u_t is the partial derivative in W. A backend that takes u_t by
    autograd (the "reference" one) would otherwise also follow the path W -> context ->
    attention -> k_t and return the total derivative. Gradients taken with respect to a
    fresh view see only the direct path; values and outer gradients are unchanged.
    """
    if memory is None:
        return None
    state = memory.memory
    state = dataclasses.replace(
        state,
        weights=tuple(w.view_as(w) for w in state.weights),
        chunk_weights=tuple(w.view_as(w) for w in state.chunk_weights),
    )
    return dataclasses.replace(memory, memory=state)


@register_mixer("mac")
class MemoryAsContext(SequenceMixer):
    """Titans MAC: segment attention over [persistent ‖ memory context ‖ segment], then the
    memory absorbs the attention layer's outputs and gates them with its reads.

    Args:
        dim, heads, head_dim: width D, heads H, per-head width d (default D / H).
        segment_size: S, tokens per segment (segments at absolute stream positions; full
            causal attention inside a segment). Default 512.
        num_memory_tokens: N_l context tokens retrieved from the memory per segment
            (0 = none; the memory then acts only through the output gate).
        num_persistent: N_p learned persistent tokens, always visible (0 = none).
        rope_base: rotary base of the attention (None = no positional encoding).
        qk_norm: RMSNorm of attention queries/keys per head.
        memory: the memory's options, a `MemoryConfig` or a mapping of its fields (also
            accepted flat, as for "lmm").
        backend: "auto", "reference", "chunked", "torch", "compiled" or "triton": the
            implementation of the Titans memory (also passed to the attention primitive);
            never changes the parameters.

    State: `MACState`, bounded by the segment (memory state + at most S - 1 cached
    keys/values + N_l context keys/values).
    """

    backend = MemoryBackend()

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        head_dim: int | None = None,
        segment_size: int = 512,
        num_memory_tokens: int = 16,
        num_persistent: int = 4,
        rope_base: float | None = 10000.0,
        qk_norm: bool = False,
        memory: MemoryConfig | None = None,
        backend: str = "auto",
        **memory_options,
    ):
        super().__init__(dim)
        head_dim = resolve_head_dim(dim, heads, head_dim)
        check_int("segment_size", segment_size, 1)
        check_int("num_memory_tokens", num_memory_tokens, 0)
        check_int("num_persistent", num_persistent, 0)
        self.heads, self.head_dim = heads, head_dim
        self.segment_size = segment_size
        self.num_memory_tokens, self.num_persistent = num_memory_tokens, num_persistent
        inner = heads * head_dim

        self.attention = AttentionBranch(dim, heads, head_dim, rope_base, qk_norm)
        # the memory absorbs the attention layer's output h = x + attention_proj(a)
        self.attention_proj = nn.Linear(inner, dim, bias=False)
        self.memory = build_memory(dim, heads, head_dim, memory, memory_options, backend)
        self.persistent = persistent_tokens(num_persistent, dim)
        if num_memory_tokens:
            self.memory_queries = nn.Parameter(torch.randn(num_memory_tokens, heads, head_dim))
            self.context_proj = nn.Linear(inner, dim, bias=False)
            self.context_norm = RMSNorm(dim)
        else:
            self.memory_queries = self.context_proj = self.context_norm = None
        self.attention_norm = RMSNorm(head_dim)
        self.memory_norm = RMSNorm(head_dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)
        nn.init.zeros_(self.attention_proj.weight)

    def signature(self) -> tuple:
        return (
            "mac",
            self.dim,
            self.heads,
            self.head_dim,
            self.segment_size,
            self.num_memory_tokens,
            self.num_persistent,
            *self.memory.signature(),
        )

    # -- pieces ---------------------------------------------------------------------------
    def _retrieve_context(self, memory: NeuralMemoryState | None, batch: int, dtype):
        """Context keys/values [B, H, N_l, d] read from the memory as it stands (no update)."""
        if self.memory_queries is None:
            return None, None
        queries = F.normalize(self.memory_queries.to(dtype), dim=-1)
        queries = queries.unsqueeze(0).expand(batch, -1, -1, -1)  # [B, N_l, H, d]
        reads = self.memory.read(queries, memory, batch).to(dtype)
        tokens = self.context_norm(self.context_proj(reads.reshape(batch, reads.shape[1], -1)))
        return self.attention.project_prefix(tokens)

    def _prefix(self, persistent, context_k, context_v):
        """[persistent ‖ context] keys/values [B, H, N_p + N_l, d], or (None, None)."""
        parts = [p for p in (persistent, (context_k, context_v)) if p[0] is not None]
        if not parts:
            return None, None
        if len(parts) == 1:
            return parts[0]
        return tuple(torch.cat(pair, dim=2) for pair in zip(*parts))

    # -- SequenceMixer --------------------------------------------------------------------
    def mix(self, x: torch.Tensor, state: MACState | None):
        B, T, _ = x.shape
        S = self.segment_size
        position = 0 if state is None else state.position
        memory = None if state is None else state.memory
        keys = values = context_k = context_v = None
        if state is not None and position % S:
            keys, values = state.keys, state.values
            context_k, context_v = state.context_keys, state.context_values

        persistent = (None, None)
        if self.persistent is not None:
            persistent = tuple(
                t.expand(B, -1, -1, -1)
                for t in self.attention.project_prefix(self.persistent.to(x.dtype))
            )
        outputs = []
        start = 0
        while start < T:
            offset = position % S
            n = min(T - start, S - offset)
            if offset == 0:  # a new segment: fresh cache, context from the memory as it stands
                keys = values = None
                context_k, context_v = self._retrieve_context(memory, B, x.dtype)
            elif context_k is not None:
                context_k, context_v = context_k.to(x.dtype), context_v.to(x.dtype)
            q, k, v = self.attention.project(x[:, start : start + n], position)
            if keys is not None:
                k = torch.cat((keys.to(k.dtype), k), dim=2)
                v = torch.cat((values.to(v.dtype), v), dim=2)
            prefix_k, prefix_v = self._prefix(persistent, context_k, context_v)
            a = self.attention.attend(
                q,
                k,
                v,
                prefix_k,
                prefix_v,
                position=position,
                window=None,
                segment_size=S,
                backend=self.backend,
            )  # [B, n, H, d]
            h = x[:, start : start + n] + self.attention_proj(a.reshape(B, n, -1))
            reads, memory = self.memory(h, _fresh_weight_nodes(memory))
            y = gated_combine(a, reads.to(a.dtype), self.attention_norm, self.memory_norm)
            outputs.append(self.out_proj(y))
            keys, values = k, v
            position += n
            start += n

        if position % S == 0:  # the next call starts a new segment
            keys = values = context_k = context_v = None
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        return y, MACState(
            self.signature(), B, position, memory, keys, values, context_k, context_v
        )

    def flops_per_token(self, seq_len: int) -> float:
        """Attention scores (12 H d per visible key: QK^T and AV, backward twice the forward)
        and the memory's chunk products."""
        context = min(seq_len, self.segment_size) + self.num_persistent
        context += self.num_memory_tokens
        return 12.0 * self.heads * self.head_dim * context + self.memory.flops_per_token(seq_len)

    def extra_repr(self) -> str:
        return hybrid_repr(
            self, f"segment_size={self.segment_size}, num_memory_tokens={self.num_memory_tokens}"
        )


__all__ = ["MACState", "MemoryAsContext"]
