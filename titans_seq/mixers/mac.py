"""`mac`: Titans memory as context (paper section 4.1, eq. 21-25), strictly causal.

The stream is cut into segments of `segment_size` tokens at absolute stream positions. For
segment s (stream positions sS … sS + S - 1), with W_{sS-1} the memory weights after the
previous segment:

 1. Retrieval, two variants (`retrieval`):
    * "segment" (the paper's eq. 21-22): every token t of the segment reads the memory with
      its own query, h_t = f_{W_{sS-1}}(q_t), q_t = l2norm(retrieval_query(x_t)) per head,
      no update. The reads become retrieved tokens in the input space (Linear + RMSNorm).
      Token t sees the retrieved tokens h_{sS..t} only: the paper attends over the whole
      retrieved block, which would let token sS see the segment's future through h.
    * "learned": N_l = `num_memory_tokens` learned query vectors r_i (per head,
      l2-normalised like the memory keys) read W_{sS-1}: c_i = f_{W_{sS-1}}(r_i), the same
      context whatever the segment holds (its content enters through the output gate).
 2. Attention: every token of the segment attends, causally and only inside its segment,
    over [N_p persistent tokens ‖ the retrieved tokens it may see ‖ the segment so far]; the
    persistent tokens (and the "learned" context) are always visible. Prefix and retrieved
    tokens go through the same key/value projection as the stream tokens, without rotary
    position. -> a [B, S, H, d]
 3. Memory update and read-out, token by token: the memory absorbs h_t (`memory_input`):
    "attention" writes the attention output as the paper does (eq. 24), h_t =
    attention_proj(a_t); "residual" writes h_t = x_t + attention_proj(a_t) with
    `attention_proj` starting at zero, so the memory first learns from the tokens
    themselves and brings in the attention output as it trains. It reads m_t = f_{W_t}(q_t)
    with the weights after absorbing h_t (the LMM retrieval rule).
 4. y_t = out_proj( RMSNorm(a_t) * SiLU(RMSNorm(m_t)) )   (the paper's o = y ⊗ M*(y), eq. 25).

retrieval="segment", memory_input="attention" is the paper's MAC (with the causal mask over
the retrieved block); retrieval="learned", memory_input="residual" is the default (see
benchmarks/results/NOTES.md, "MAC and MAL variants", for the measurements behind it).

Causality: retrieved tokens of segment s depend on W_{sS-1}, i.e. on tokens < sS, and
("segment") on their own token; a_t depends on the prefix, on h_{sS..t} and on tokens
sS … t; m_t on the absorbed tokens ≤ t (the memory's chunked update takes its inner
gradients at the weights entering the chunk, and the depthwise conv is causal). So y_t
depends on x_{≤t} only.

Streaming: the state holds the memory state, the keys/values of the current segment's
tokens so far (fewer than S), the retrieved tokens' keys/values of the current segment and,
for "segment" retrieval, the memory state at the segment's start (what later tokens of the
segment read), so a stream cut anywhere, also inside a segment, gives the one-shot result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch
from torch import nn

from ..attention import masked_attention
from ..checks import check_choice, check_int
from ..nn.norm import RMSNorm, l2_normalize
from ..tracing import concrete_size
from .hybrid_parts import AttentionBranch, gated_combine
from .memory_branch import AttentionBackend
from .memory_config import MemoryConfig
from .memory_mixer import MemoryMixer
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
        context_keys, context_values: [B, H, N, d] keys/values of the retrieved tokens of
            the current segment: the N = N_l learned-query reads ("learned"), or the reads
            of the N = position % segment_size tokens seen so far ("segment"); None at a
            segment boundary or when there are none.
        segment_memory: ("segment" retrieval) the memory state at the start of the current
            segment, which its later tokens read; None at a segment boundary.
    """

    memory: NeuralMemoryState | None = None
    keys: torch.Tensor | None = None
    values: torch.Tensor | None = None
    context_keys: torch.Tensor | None = None
    context_values: torch.Tensor | None = None
    segment_memory: NeuralMemoryState | None = None


RETRIEVALS = ("learned", "segment")
MEMORY_INPUTS = ("residual", "attention")


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
class MemoryAsContext(MemoryMixer):
    """Titans MAC: segment attention over [persistent ‖ memory context ‖ segment], then the
    memory absorbs the attention layer's outputs and gates them with its reads.

    Args:
        dim, heads, head_dim: width D, heads H, per-head width d (default D / H).
        segment_size: S, tokens per segment (segments at absolute stream positions; full
            causal attention inside a segment). Default 512.
        retrieval: "learned" (N_l learned queries per segment) or "segment" (each token's
            own query, causally masked: the paper's eq. 21-22); see the module docstring.
        memory_input: what the memory absorbs: "residual" (x + attention_proj(a), the
            projection starting at zero) or "attention" (attention_proj(a): eq. 24).
        num_memory_tokens: N_l context tokens retrieved from the memory per segment with
            retrieval="learned" (0 = none; the memory then acts only through the output
            gate). Unused with retrieval="segment".
        num_persistent: N_p learned persistent tokens, always visible (0 = none).
        rope_base: rotary base of the attention (None = no positional encoding).
        qk_norm: RMSNorm of attention queries/keys per head.
        memory: the memory's options, a `MemoryConfig` or a mapping of its fields (as for
            "lmm"; `build_mixer` and recipes also take them flat).
        backend: "auto", "reference", "chunked", "torch", "compiled" or "triton": the
            implementation of the Titans memory; never changes the parameters.
        attention_backend: "auto", "sdpa", "flex" or "reference" for the attention branch;
            None (default) follows `backend` ("triton" -> "flex", the PyTorch memory
            backends -> "sdpa").

    State: `MACState`, bounded by the segment (memory state + at most S - 1 cached
    keys/values + N_l context keys/values).
    """

    attention_backend = AttentionBackend()

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
        retrieval: str = "learned",
        memory_input: str = "residual",
        memory: MemoryConfig | Mapping | None = None,
        backend: str = "auto",
        attention_backend: str | None = None,
    ):
        super().__init__(dim, heads, head_dim, num_persistent)
        head_dim = self.head_dim
        check_int("segment_size", segment_size, 1)
        check_int("num_memory_tokens", num_memory_tokens, 0)
        check_choice("retrieval", retrieval, RETRIEVALS)
        check_choice("memory_input", memory_input, MEMORY_INPUTS)
        self.segment_size = segment_size
        self.retrieval, self.memory_input = retrieval, memory_input
        if retrieval == "segment":
            num_memory_tokens = 0  # the retrieved block is the segment's own reads
        self.num_memory_tokens = num_memory_tokens
        inner = heads * head_dim

        self.attention = AttentionBranch(dim, heads, head_dim, rope_base, qk_norm)
        # what the memory absorbs: x + attention_proj(a) ("residual") or attention_proj(a)
        self.attention_proj = nn.Linear(inner, dim, bias=False)
        self.memory = self.make_memory(memory, backend)
        self.attention_backend = attention_backend
        self.persistent = self.make_persistent()
        self.memory_queries = self.retrieval_query = None
        if num_memory_tokens:
            self.memory_queries = nn.Parameter(torch.randn(num_memory_tokens, heads, head_dim))
        if retrieval == "segment":
            self.retrieval_query = nn.Linear(dim, inner, bias=False)
        if num_memory_tokens or retrieval == "segment":
            self.context_proj = nn.Linear(inner, dim, bias=False)
            self.context_norm = RMSNorm(dim)
        else:
            self.context_proj = self.context_norm = None
        self.attention_norm = RMSNorm(head_dim)
        self.memory_norm = RMSNorm(head_dim)
        self.out_proj = nn.Linear(inner, dim, bias=False)
        nn.init.normal_(self.out_proj.weight, std=inner**-0.5)
        if memory_input == "residual":
            nn.init.zeros_(self.attention_proj.weight)
        else:  # the memory's only input: a unit-variance start, as for out_proj
            nn.init.normal_(self.attention_proj.weight, std=inner**-0.5)

    def signature(self) -> tuple:
        own = (self.segment_size, self.num_memory_tokens, self.retrieval, self.memory_input)
        return self.shape_signature("mac", *own)

    # -- pieces ---------------------------------------------------------------------------
    def _retrieve_context(self, memory: NeuralMemoryState | None, batch: int, dtype):
        """Context keys/values [B, H, N_l, d] read from the memory as it stands (no update)."""
        if self.memory_queries is None:
            return None, None
        queries = l2_normalize(self.memory_queries.to(dtype), eps=1e-12)
        queries = queries.unsqueeze(0).expand(batch, -1, -1, -1)  # [B, N_l, H, d]
        reads = self.memory.read(queries, memory, batch).to(dtype)
        tokens = self.context_norm(self.context_proj(reads.reshape(batch, reads.shape[1], -1)))
        return self.attention.project_prefix(tokens)

    def _retrieve_for_tokens(self, x: torch.Tensor, memory: NeuralMemoryState | None):
        """ "segment" retrieval: keys/values [B, H, n, d] of f_W(q_t) for the tokens x [B, n,
        D], q_t = l2norm(retrieval_query(x_t)) per head, W the memory as `memory` holds it."""
        B, n, _ = x.shape
        queries = self.retrieval_query(x).view(B, n, self.heads, self.head_dim)
        reads = self.memory.read(l2_normalize(queries, eps=1e-12), memory, B).to(x.dtype)
        tokens = self.context_norm(self.context_proj(reads.reshape(B, n, -1)))
        return self.attention.project_prefix(tokens)

    def _attend_with_retrieved(self, q, k, v, persistent, retrieved_k, retrieved_v, offset):
        """Attention of the segment's queries q [B, H, n, d] (segment offsets offset …
        offset + n - 1) over [persistent ‖ segment keys k ‖ retrieved keys], k and the
        retrieved keys [B, H, offset + n, d] both at segment offsets 0 … offset + n - 1: a
        query sees both kinds of key up to its own offset. -> [B, n, H, d]."""
        n, num_keys = q.shape[2], k.shape[2]
        query_offset = torch.arange(offset, offset + n, device=q.device)
        key_offset = torch.arange(num_keys, device=q.device)
        visible = key_offset[None, :] <= query_offset[:, None]  # [n, offset + n]
        keys, values = [k, retrieved_k.to(k.dtype)], [v, retrieved_v.to(v.dtype)]
        masks = [visible, visible]
        if persistent[0] is not None:
            keys.insert(0, persistent[0].to(k.dtype))
            values.insert(0, persistent[1].to(v.dtype))
            masks.insert(0, visible.new_ones(n, persistent[0].shape[2]))
        y = masked_attention(
            q,
            torch.cat(keys, dim=2),
            torch.cat(values, dim=2),
            torch.cat(masks, 1),
            backend=self.attention_backend,
        )
        return y.transpose(1, 2)

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
        T = concrete_size(T)  # Python ints under a trace too (see `concrete_size`)
        S = self.segment_size
        by_token = self.retrieval == "segment"
        position = 0 if state is None else state.position
        memory = None if state is None else state.memory
        keys = values = context_k = context_v = segment_memory = None
        if state is not None and position % S:
            keys, values = state.keys, state.values
            context_k, context_v = state.context_keys, state.context_values
            segment_memory = state.segment_memory

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
            piece = x[:, start : start + n]
            if offset == 0:  # a new segment: fresh cache, retrieval from the memory as it stands
                keys = values = context_k = context_v = None
                segment_memory = memory if by_token else None
                if not by_token:
                    context_k, context_v = self._retrieve_context(memory, B, x.dtype)
            q, k, v = self.attention.project(piece, position)
            if keys is not None:
                k = torch.cat((keys.to(k.dtype), k), dim=2)
                v = torch.cat((values.to(v.dtype), v), dim=2)
            if by_token:
                new_k, new_v = self._retrieve_for_tokens(piece, segment_memory)
                if context_k is not None:
                    new_k = torch.cat((context_k, new_k), dim=2)
                    new_v = torch.cat((context_v, new_v), dim=2)
                context_k, context_v = new_k, new_v
                a = self._attend_with_retrieved(q, k, v, persistent, context_k, context_v, offset)
            else:
                # in the projections' dtype (bf16 under autocast), whatever dtype the
                # state's context came in (a call outside autocast, say)
                prefix_k, prefix_v = (
                    None if t is None else t.to(q.dtype)
                    for t in self._prefix(persistent, context_k, context_v)
                )
                a = self.attention.attend(
                    q,
                    k,
                    v,
                    prefix_k,
                    prefix_v,
                    position=position,
                    window=None,
                    segment_size=S,
                    backend=self.attention_backend,
                )  # [B, n, H, d]
            h = self.attention_proj(a.reshape(B, n, -1))
            if self.memory_input == "residual":
                h = piece + h
            reads, memory = self.memory(h, _fresh_weight_nodes(memory))
            y = gated_combine(a, reads.to(a.dtype), self.attention_norm, self.memory_norm)
            outputs.append(self.out_proj(y))
            keys, values = k, v
            position += n
            start += n

        if position % S == 0:  # the next call starts a new segment
            keys = values = context_k = context_v = segment_memory = None
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        return y, MACState(
            self.signature(),
            B,
            position,
            memory,
            keys,
            values,
            context_k,
            context_v,
            segment_memory,
        )

    def flops_per_token(self, seq_len: int) -> float:
        """Attention over the segment, the persistent and retrieved tokens, and the memory's
        chunk products."""
        context = min(seq_len, self.segment_size) + self.num_persistent
        context += self.num_memory_tokens
        if self.retrieval == "segment":  # a retrieved key per segment token
            context += min(seq_len, self.segment_size)
        return self.attention_flops(context) + self.memory.flops_per_token(seq_len)

    def own_repr(self) -> str:
        return (
            f"segment_size={self.segment_size}, retrieval={self.retrieval!r}, "
            f"memory_input={self.memory_input!r}, num_memory_tokens={self.num_memory_tokens}"
        )


__all__ = ["MACState", "MemoryAsContext"]
