"""Fused Triton forward kernel of the Titans memory op (memory depth 1 and 2).

One program per (batch, head) walks the chunk segments of the sequence in order. For each
segment it loads the segment's q, k, v and gates, the weights and momentum entering it and
the weights its gradients are taken at, and in one pass computes

* the inner forward/backward of the memory MLP at the gradient weights (layer inputs h and
  errors delta, every token of the segment at once),
* the per-token inner-gradient clip, folded into theta (||u_r||^2 = sum_l |delta|^2 |h|^2),
* the within-chunk decay products from cumulative log gates (Da, De, A, P, M = Da De),
* the dual-form retrieval y_t = f_{W_t}(q_t) for every token (no per-token weights),
* the end-of-segment weights and momentum,

exactly the formulas of `chunked.py` (see its docstring and docs/architecture.md).

The running state (W, S and the gradient weights, fp32, [B, H, out, in]) lives in global
memory, not in registers: it is read at the start and written at the end of each segment,
which keeps register use bounded for head dims up to 128. Optionally the weights and
momentum entering every `save_every`-th segment are copied to a checkpoint buffer, from
which the backward pass recomputes groups of chunks.

All tile extents are powers of two >= 16 (tl.dot's minimum); the true head dim d, hidden
width h and segment length are handled by masks.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .triton_helpers import act, clipped_rate, inner_gradient, mm, segment_decays, squared_norms

ACT_CODES = {"silu": 0, "gelu": 1}
# One software-pipelining stage: with more, Triton's pipeliner may prefetch the state tiles
# of the next segment before the previous segment's stores to them land (seen with
# Triton <= 3.2: silently wrong results), and the kernels gain nothing from it (each segment
# depends on the last).
NUM_STAGES = 1


def num_warps(D: int, HID: int) -> int:
    """Warps per program for padded tiles D x HID (both launchers and the offline compile)."""
    return 4 if D * HID <= 32 * 32 else 8


@triton.jit
def _lmm_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    theta_ptr,
    eta_ptr,
    alpha_ptr,
    y_ptr,
    w1_ptr,
    w2_ptr,
    s1_ptr,
    s2_ptr,
    g1_ptr,
    g2_ptr,
    cw1_ptr,
    cw2_ptr,
    cs1_ptr,
    cs2_ptr,
    T,
    H,
    d,
    hdim,
    offset,
    n_seg,
    n_ckpt,
    clip,
    C: tl.constexpr,
    D: tl.constexpr,
    HID: tl.constexpr,
    DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_CLIP: tl.constexpr,
    ACT: tl.constexpr,
    SAVE: tl.constexpr,
    SAVE_EVERY: tl.constexpr,
    PREC: tl.constexpr,
    RETRIEVE: tl.constexpr,
):
    # RETRIEVE = False: only the states are wanted (the backward regenerating the states
    # entering each segment); the retrieval's products and y are skipped
    # q, k, v, y: [B, T, H, d] contiguous; gates [B, T, H] contiguous; state [B, H, out, in]
    # contiguous fp32 with layer 1 [hdim, d] and layer 2 [d, hdim] (depth 1: hdim == d)
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, C)
    cd = tl.arange(0, D)
    ch = tl.arange(0, HID)
    causal = rows[:, None] >= rows[None, :]

    size = hdim * d
    base = pid.to(tl.int64) * size
    p1 = ch[:, None] * d + cd[None, :]  # layer 1 [hdim, d]
    m1 = (ch[:, None] < hdim) & (cd[None, :] < d)
    p2 = cd[:, None] * hdim + ch[None, :]  # layer 2 [d, hdim]
    m2 = (cd[:, None] < d) & (ch[None, :] < hdim)

    for seg in range(n_seg):
        t0 = tl.maximum(seg * C - offset, 0)
        t1 = tl.minimum((seg + 1) * C - offset, T)
        n = t1 - t0
        rmask = rows < n
        tok = (b * T + t0 + rows).to(tl.int64) * H + h  # [C] token-head index
        xmask = rmask[:, None] & (cd[None, :] < d)
        xoff = tok[:, None] * d + cd[None, :]
        q = tl.load(q_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        # padded tokens: theta 0; their decays never reach a valid row (causal masks, and
        # the end-of-segment values are read at row n - 1)
        theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)

        wg1 = tl.load(g1_ptr + base + p1, mask=m1, other=0.0)
        if DEPTH == 2:
            wg2 = tl.load(g2_ptr + base + p2, mask=m2, other=0.0)
        else:
            wg2 = wg1  # not read at depth 1
        # inner forward/backward at the gradient weights: layer inputs h, errors delta
        _, a1, _, _, d1, d2 = inner_gradient(k, v, wg1, wg2, DEPTH, ACT, PREC)
        _, _, _, _, sq = squared_norms(k, a1, d1, d2, DEPTH)
        lr, _, _, _, _ = clipped_rate(theta, sq, clip, HAS_CLIP)

        # the state entering the segment, loaded after the gradient weights are dead
        ws1 = tl.load(w1_ptr + base + p1, mask=m1, other=0.0)
        ss1 = tl.load(s1_ptr + base + p1, mask=m1, other=0.0)
        if DEPTH == 2:
            ws2 = tl.load(w2_ptr + base + p2, mask=m2, other=0.0)
            ss2 = tl.load(s2_ptr + base + p2, mask=m2, other=0.0)
        if SAVE:
            keep = seg % SAVE_EVERY  # 0: save (a tensor below, so masks broadcast)
            cbase = (pid.to(tl.int64) * n_ckpt + seg // SAVE_EVERY) * size
            tl.store(cw1_ptr + cbase + p1, ws1, mask=m1 & (p1 * 0 + keep == 0))
            tl.store(cs1_ptr + cbase + p1, ss1, mask=m1 & (p1 * 0 + keep == 0))
            if DEPTH == 2:
                tl.store(cw2_ptr + cbase + p2, ws2, mask=m2 & (p2 * 0 + keep == 0))
                tl.store(cs2_ptr + cbase + p2, ss2, mask=m2 & (p2 * 0 + keep == 0))

        # decay products inside the segment, from cumulative log gates (differences <= 0)
        _, _, _, A, De, P, M, bb = segment_decays(
            alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA, PREC
        )
        Mlr = M * lr[None, :]

        # retrieval through the per-token weights (dual form), layer by layer
        if RETRIEVE:
            z = A[:, None] * mm(q, tl.trans(ws1), PREC)
            z -= mm(Mlr * mm(q, tl.trans(k), PREC), d1, PREC)
            if HAS_ETA:
                z += bb[:, None] * mm(q, tl.trans(ss1), PREC)
            if DEPTH == 2:
                x2 = act(z, ACT)
                z = A[:, None] * mm(x2, tl.trans(ws2), PREC)
                xh = mm(x2, tl.trans(a1), PREC)
                z -= mm(Mlr * xh, d2, PREC)
                if HAS_ETA:
                    z += bb[:, None] * mm(x2, tl.trans(ss2), PREC)
            tl.store(y_ptr + xoff, z.to(y_ptr.dtype.element_ty), mask=xmask)

        # state at the last valid token of the segment (row n - 1)
        last = rows == n - 1
        a_last = tl.sum(tl.where(last, A, 0.0), 0)
        m_last = tl.sum(tl.where(last[:, None], Mlr, 0.0), 0)  # [C] over r
        nw1 = a_last * ws1 - mm(tl.trans(d1 * m_last[:, None]), k, PREC)
        if HAS_ETA:
            b_last = tl.sum(tl.where(last, bb, 0.0), 0)
            p_last = tl.sum(tl.where(last, P, 0.0), 0)
            c_last = tl.sum(tl.where(last[:, None], De, 0.0), 0) * lr
            nw1 += b_last * ss1
            ns1 = p_last * ss1
        else:
            c_last = tl.where(last, lr, 0.0)
            ns1 = tl.zeros([HID, D], tl.float32)
        ns1 -= mm(tl.trans(d1 * c_last[:, None]), k, PREC)
        if DEPTH == 2:
            nw2 = a_last * ws2 - mm(tl.trans(d2 * m_last[:, None]), a1, PREC)
            if HAS_ETA:
                nw2 += b_last * ss2
                ns2 = p_last * ss2
            else:
                ns2 = tl.zeros([D, HID], tl.float32)
            ns2 -= mm(tl.trans(d2 * c_last[:, None]), a1, PREC)

        # every thread has read this segment's state before any thread overwrites it
        tl.debug_barrier()
        more = n_seg - 1 - seg  # > 0: the next segment's gradients are taken at its entry weights
        tl.store(w1_ptr + base + p1, nw1, mask=m1)
        tl.store(s1_ptr + base + p1, ns1, mask=m1)
        tl.store(g1_ptr + base + p1, nw1, mask=m1 & (p1 * 0 + more > 0))
        if DEPTH == 2:
            tl.store(w2_ptr + base + p2, nw2, mask=m2)
            tl.store(s2_ptr + base + p2, ns2, mask=m2)
            tl.store(g2_ptr + base + p2, nw2, mask=m2 & (p2 * 0 + more > 0))
        tl.debug_barrier()


def _pow2(n: int) -> int:
    return max(16, 1 << (max(n, 1) - 1).bit_length())


def num_segments(T: int, chunk_size: int, offset: int) -> int:
    """Segments of a call: the first finishes the chunk in progress, the rest are chunks."""
    first = min(T, chunk_size - offset)
    return 1 + math.ceil((T - first) / chunk_size)


def segment_bounds(T: int, chunk_size: int, offset: int, seg: int) -> tuple[int, int]:
    """Token range [t0, t1) of segment `seg` of a call that starts at chunk offset `offset`."""
    return max(seg * chunk_size - offset, 0), min((seg + 1) * chunk_size - offset, T)


def lmm_forward_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights: tuple[torch.Tensor, ...],
    momentum: tuple[torch.Tensor, ...],
    grad_weights: tuple[torch.Tensor, ...],
    offset: int,
    chunk_size: int,
    activation: str,
    inner_grad_clip: float | None,
    save_every: int | None,
    input_precision: str = "ieee",
    retrieve: bool = True,
):
    """Launch the fused forward.

    q, k, v: [B, T, H, d]; theta/eta/alpha: [B, T, H] (eta/alpha may be None); weights,
    momentum, grad_weights: the state entering the call, per layer [B, H, out, in] (any
    float dtype; copied to fp32); offset: tokens of the current chunk already absorbed.
    save_every: store the state entering every save_every-th segment (None: no checkpoints).
    retrieve: False computes the states only (y is then None): the backward's regeneration.

    Returns (y [B, T, H, d] in q's dtype, W, S, G, ckpt_W, ckpt_S): W, S the final weights
    and momentum, G the weights the last segment's gradients used (tuples of fp32
    [B, H, out, in]); ckpt_W/ckpt_S tuples of [B, H, n_ckpt, out, in] (empty without
    save_every).
    """
    B, T, H, d = q.shape
    depth = len(weights)
    hdim = weights[0].shape[-2] if depth == 2 else d
    q, k, v = (x.contiguous() for x in (q, k, v))
    theta = theta.contiguous()
    eta = None if eta is None else eta.contiguous()
    alpha = None if alpha is None else alpha.contiguous()
    W = tuple(w.to(torch.float32).contiguous().clone() for w in weights)
    S = tuple(s.to(torch.float32).contiguous().clone() for s in momentum)
    G = tuple(g.to(torch.float32).contiguous().clone() for g in grad_weights)
    y = torch.empty_like(q) if retrieve else None

    n_seg = num_segments(T, chunk_size, offset)
    save = save_every is not None
    n_ckpt = math.ceil(n_seg / save_every) if save else 0
    cW = tuple(w.new_empty(B, H, n_ckpt, *w.shape[2:]) for w in W) if save else ()
    cS = tuple(w.new_empty(B, H, n_ckpt, *w.shape[2:]) for w in W) if save else ()

    def layer2(xs):
        return xs[1] if depth == 2 else xs[0]  # depth 1: an unused pointer

    D, HID = _pow2(d), _pow2(hdim)
    _lmm_fwd_kernel[(B * H,)](
        q,
        k,
        v,
        theta,
        theta if eta is None else eta,
        theta if alpha is None else alpha,
        y if retrieve else q,  # an unused pointer without retrieval
        W[0],
        layer2(W),
        S[0],
        layer2(S),
        G[0],
        layer2(G),
        cW[0] if save else W[0],
        layer2(cW) if save else W[0],
        cS[0] if save else W[0],
        layer2(cS) if save else W[0],
        T,
        H,
        d,
        hdim,
        offset,
        n_seg,
        n_ckpt,
        float(inner_grad_clip or 0.0),
        C=chunk_size,
        D=D,
        HID=HID,
        DEPTH=depth,
        HAS_ETA=eta is not None,
        HAS_ALPHA=alpha is not None,
        HAS_CLIP=inner_grad_clip is not None,
        ACT=ACT_CODES[activation],
        SAVE=save,
        SAVE_EVERY=save_every or 1,
        PREC=input_precision,
        RETRIEVE=retrieve,
        num_warps=num_warps(D, HID),
        num_stages=NUM_STAGES,
    )
    return y, W, S, G, cW, cS
