"""The "torch" and "compiled" backends: the chunk-parallel form with a hand-written backward.

`chunked.py` computes the memory with plain PyTorch operations under autograd: every one of
the ~100 small operations of a chunk becomes an autograd node, and on a CPU (or as GPU
kernel launches) their bookkeeping costs far more than their arithmetic. This module
computes the same function in one `torch.autograd.Function`:

* before the sequential walk, everything that does not depend on the memory weights is
  computed for all chunks at once: the decay products of the gates (A, P, Da, De, M = Da
  De, b = Da P) and the C x C products q k^T of the first layer;
* the forward walks the chunks with no autograd graph (`chunk_step.step_forward`) and
  keeps the state entering each chunk and the intermediates its adjoint needs;
* the backward walks the chunks in reverse with the adjoint of the dual form
  (`chunk_step.step_backward`; the formulas of docs/architecture.md, which the fused
  Triton backward implements for depth 1 and 2), here for any memory depth.

With `compile_step` (the "compiled" backend) each full chunk's steps run as Inductor graphs
(`compiled_step.py`). The token-by-token reference (`reference.py`) and the autograd dual
form (`chunked.py`) stay beside it as the obvious implementations; the tests compare all
three.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from .chunk_step import _Decays, _decays, _Segment, segment_tensors
from .compiled_step import StepSegment, run_backward, run_forward, serial_kernels
from .state import MemoryState, fresh_state, state_dtype


def _segments(
    q, k, v, theta, eta, alpha, lengths, chunk_size, chunk_major: bool = False
) -> list[_Segment]:
    """Split [B, H, T, ...] inputs into segments; decays and q k^T of all full chunks are
    computed in one batched operation each. chunk_major: the full chunks' tensors are
    copied chunk-major and contiguous (for compiled steps; see `chunks` below), else they
    are views."""

    def split(x):
        return [None] * len(lengths) if x is None else list(x.split(lengths, dim=2))

    parts = [split(x) for x in (q, k, v, theta, eta, alpha)]
    full = [i for i, n in enumerate(lengths) if n == chunk_size]
    batched = {}
    if full:
        # full chunks are consecutive: one [B, H, N, C] grid for their precomputations
        first, count = full[0], len(full)
        start = sum(lengths[:first])
        B, H = q.shape[:2]
        C = chunk_size

        def grid(x, *tail):
            return (
                None
                if x is None
                else x[:, :, start : start + count * C].reshape(B, H, count, C, *tail)
            )

        def chunks(x):
            # chunk-major and contiguous: chunk j's tensors then have the same strides
            # whatever T is, so a compiled step's graph holds for any sequence length
            if x is None:
                return [None] * count
            return x.movedim(2, 0).contiguous().unbind(0) if chunk_major else x.unbind(2)

        dec = _decays(grid(alpha), grid(eta), grid(theta))
        qg, kg = grid(q, q.shape[-1]), grid(k, k.shape[-1])
        qk = qg @ kg.transpose(-1, -2)
        fields = [chunks(x) for x in (dec.Da, dec.A, dec.De, dec.P, dec.M, dec.b, qk)]
        inputs = [
            chunks(grid(x, *x.shape[3:]) if x is not None else None)
            for x in (q, k, v, theta, eta, alpha)
        ]
        for j, i in enumerate(full):
            Da, A, De, P, M, b, qk_j = (f[j] for f in fields)
            batched[i] = (tuple(x[j] for x in inputs), _Decays(Da, A, De, P, M, b), qk_j)
    segments = []
    for i in range(len(lengths)):
        q_i, k_i, v_i, th_i, eta_i, al_i = (p[i] for p in parts)
        if i in batched:
            (q_i, k_i, v_i, th_i, eta_i, al_i), dec, qk = batched[i]
        else:
            dec, qk = _decays(al_i, eta_i, th_i), q_i @ k_i.transpose(-1, -2)
        segments.append(_Segment(q_i, k_i, v_i, th_i, eta_i, al_i, dec, qk))
    return segments


def _detached(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.detach()


def _tuple_or_none(xs):
    return None if xs is None else tuple(xs)


class _FusedLMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cfg, q, k, v, theta, eta, alpha, *state):
        L, C, offset = cfg["depth"], cfg["chunk_size"], cfg["offset"]
        # The steps work on detached tensors: this Function is their autograd, and a
        # compiled step then sees the same requires_grad flags in training and in
        # inference (Dynamo guards on them: one compilation instead of two).
        q_, k_, v_, theta_, eta_, alpha_, *state_ = (
            _detached(x) for x in (q, k, v, theta, eta, alpha, *state)
        )
        W0, S0, G0 = state_[:L], state_[L : 2 * L], state_[2 * L :]
        segs = _segments(q_, k_, v_, theta_, eta_, alpha_, cfg["lengths"], C, cfg["compile"])
        # a fresh stream enters with zero momentum: its first segment skips those products
        W, S = list(W0), (None if cfg["zero_momentum"] else list(S0))
        # the segments' intermediates are kept for the backward (as autograd would keep
        # them), so that it does not recompute the forward
        ys, entries, saved = [], [], []
        # the steps' view of each segment, built once for the forward and the backward
        step_segments = [StepSegment(segment_tensors(seg)) for seg in segs]
        cfg["serial"] = cfg["compile"] and serial_kernels(W0[0])
        for i, seg in enumerate(step_segments):
            Wg = G0 if (i == 0 and offset > 0) else W
            entries.append((W, S))
            full = cfg["lengths"][i] == C
            y, W, S, sv = run_forward(
                cfg["compile"], full, cfg["serial"], seg, tuple(W), _tuple_or_none(S),
                tuple(Wg), cfg["activation"], cfg["clip"],
            )  # fmt: skip
            ys.append(y)
            saved.append(sv)
        last_offset = (offset + sum(cfg["lengths"])) % C
        # the gradient weights the final state exposes: those of the last segment (a W
        # placeholder when the call ends on a chunk boundary; the state then exposes W)
        G = entries[-1][0] if last_offset else W
        if len(segs) == 1 and offset > 0:
            G = G0
        ctx.cfg = cfg
        # unused outputs arrive in the backward as None, not as zeros (see its use of dW)
        ctx.set_materialize_grads(False)
        ctx.segments = step_segments
        ctx.saved_segments = saved
        # the entry states, inputs of the backward's steps (detached like everything the
        # steps see, since the inputs were)
        ctx.entries = [(tuple(Ws), _tuple_or_none(Ss)) for Ws, Ss in entries]
        ctx.save_for_backward(q_, k_, v_, theta_, eta_, alpha_, *G0)
        # an autograd Function returns each tensor once and no input as an output
        G = tuple(g.clone() for g in G)
        return (torch.cat(ys, dim=2), *W, *S, *G)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, *dstate):
        cfg = ctx.cfg
        L, C, offset = cfg["depth"], cfg["chunk_size"], cfg["offset"]
        q, k, v, theta, eta, alpha, *G0 = ctx.saved_tensors
        segs = ctx.segments
        n_seg = len(segs)
        last_offset = (offset + sum(cfg["lengths"])) % C

        def zeros_or(g, like):
            return torch.zeros_like(like) if g is None else g

        Wlast = ctx.entries[-1][0]
        dG = list(dstate[2 * L :])
        if all(g is None for g in dstate):
            # a training step that drops the final state: its adjoint is zero, and the
            # last segment skips it (for a one-chunk sequence, about a third of the step)
            dW = dS = None
        else:
            dW = [zeros_or(g, w) for g, w in zip(dstate[:L], Wlast)]
            dS = [zeros_or(g, w) for g, w in zip(dstate[L : 2 * L], Wlast)]
            if last_offset == 0:  # the state exposes W as its chunk weights
                dW = [w if g is None else w + g for w, g in zip(dW, dG)]
                dG = [None] * L
        if dy is None:  # only the final state is used
            dy = torch.zeros_like(q)
        dys = dy.split(cfg["lengths"], dim=2)
        grads = {name: [None] * n_seg for name in ("q", "k", "v", "theta", "eta", "alpha")}
        dG0 = [None] * L
        for i in range(n_seg - 1, -1, -1):
            Ws, Ss = ctx.entries[i]
            separate = i == 0 and offset > 0
            Wg = G0 if separate else Ws
            full = cfg["lengths"][i] == C
            # the exposed chunk weights of the last segment are its Wg: their gradient dG
            # joins dWg before dWg joins dWs
            exposed = i == n_seg - 1 and any(g is not None for g in dG)
            fold = not separate and not exposed
            dq, dk, dv, dth, deta, dal, dWs, dSs, dWg = run_backward(
                cfg["compile"], full, cfg["serial"], segs[i], Ws, Ss,
                tuple(Wg), ctx.saved_segments[i], dys[i].contiguous(),
                _tuple_or_none(dW), _tuple_or_none(dS),
                cfg["activation"], cfg["clip"], fold,
            )  # fmt: skip
            ctx.saved_segments[i] = None  # free as the walk goes
            for name, g in zip(grads, (dq, dk, dv, dth, deta, dal)):
                grads[name][i] = g
            if exposed:
                dWg = [a if b is None else a + b for a, b in zip(dWg, dG)]
            if fold:
                dW, dS = dWs, dSs
            elif separate:
                dG0 = dWg
                dW, dS = dWs, dSs
            else:
                dW = [a + b for a, b in zip(dWs, dWg)]
                dS = dSs
        out = []
        for name, need in zip(grads, ctx.needs_input_grad[1:7]):
            parts = grads[name]
            out.append(torch.cat(parts, dim=2) if need and parts[0] is not None else None)
        return (None, *out, *dW, *dS, *dG0)


def lmm_memory_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights: tuple[torch.Tensor, ...],
    chunk_size: int = 16,
    initial_state: MemoryState | None = None,
    output_final_state: bool = False,
    activation: str = "silu",
    inner_grad_clip: float | None = None,
    compile_step: bool = False,
) -> tuple[torch.Tensor, MemoryState | None]:
    """Same contract as `lmm_memory_reference`; q, k, v: [B, T, H, d] -> y [B, T, H, d].

    compile_step: run the forward and backward step of every full chunk through
    `torch.compile` (the "compiled" backend); a compilation failure is reported once and the
    eager step is used instead.
    """
    B, T, H, d = q.shape
    out_dtype, dtype = q.dtype, state_dtype(q)
    depth = len(weights)
    state = initial_state if initial_state is not None else fresh_state(weights, B, dtype)
    offset = state.offset
    W0 = tuple(w.to(dtype) for w in state.weights)
    S0 = tuple(s.to(dtype) for s in state.momentum)
    G0 = tuple(w.to(dtype) for w in state.chunk_weights) if offset else W0

    # [B, T, H, ...] -> [B, H, T, ...] once, contiguous, in the state precision
    def prep(x):
        return None if x is None else x.to(dtype).transpose(1, 2).contiguous()

    q_, k_, v_, theta_, eta_, alpha_ = (prep(x) for x in (q, k, v, theta, eta, alpha))
    lengths, start, off = [], 0, offset
    while start < T:
        n = min(T - start, chunk_size - off)
        lengths.append(n)
        start, off = start + n, 0
    cfg = dict(
        depth=depth, chunk_size=chunk_size, offset=offset, lengths=lengths,
        activation=activation, clip=inner_grad_clip, compile=compile_step,
        zero_momentum=initial_state is None,
    )  # fmt: skip
    y, *st = _FusedLMM.apply(cfg, q_, k_, v_, theta_, eta_, alpha_, *W0, *S0, *G0)
    y = y.transpose(1, 2).to(out_dtype)
    if not output_final_state:
        return y, None
    W, S, G = st[:depth], st[depth : 2 * depth], st[2 * depth :]
    final_offset = (offset + T) % chunk_size
    return y, MemoryState(tuple(W), tuple(S), tuple(G) if final_offset else tuple(W), final_offset)
