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

exactly the formulas of `segment_step.py` (see its docstring and docs/derivation.md).

The running state (W, S; fp32) lives in global memory, not in registers, in two slots
([2, B, H, out, in]): a segment reads one and writes the other, one layer at a time, which
keeps register use bounded for tiles up to 128 x 128. The gradient weights are the entry
weights, except in the first segment of a call that starts inside a chunk. Optionally the
weights and momentum entering every `save_every`-th segment are copied to a checkpoint
buffer; the backward regenerates the states in between from them, several groups in one
launch (a second grid axis, `regenerate_entry_states`).

All tile extents are powers of two >= 16 (tl.dot's minimum); the true head dim d, hidden
width h and segment length are handled by masks (compile-time strides when unpadded).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..state import num_segments
from .helpers import (
    act,
    inner_errors,
    inner_hidden,
    mm,
    quantities_after_inner,
    segment_end,
    segment_quantities,
    segment_tokens,
    separate_g0,
    state_tiles_at,
    step_tiles,
)
from .launch import launch_constants, second_layer, token_stride, two_slots


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
    TS,
    H,
    d,
    hdim,
    offset,
    n_seg,
    n_ckpt,
    slot,
    group_len,
    clip,
    C: tl.constexpr,
    D: tl.constexpr,
    HID: tl.constexpr,
    DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_CLIP: tl.constexpr,
    EXACT: tl.constexpr,
    ACT: tl.constexpr,
    SAVE: tl.constexpr,
    SAVE_EVERY: tl.constexpr,
    PREC: tl.constexpr,
    RETRIEVE: tl.constexpr,
    FIRST_G0: tl.constexpr,
):
    # RETRIEVE = False: only the states are wanted (the backward regenerating the states
    # entering each segment); the retrieval's products and y are skipped
    # q, k, v, y: [B, T, H, d] contiguous; gates [B, T, H] contiguous; weights and momentum
    # [2, B, H, out, in] contiguous fp32 (`slot` elements apart), layer 1 [hdim, d] and
    # layer 2 [d, hdim] (depth 1: hdim == d): segment s reads slot s % 2 and writes the
    # other, so no thread overwrites what another still reads, and the addresses change
    # with the segment (loop-invariant address tiles would be hoisted and held in registers
    # for the whole loop); g: [B, H, out, in], the gradient weights of segment 0 when the
    # call starts inside a chunk (FIRST_G0), else the entry weights are. A second grid axis
    # splits the segments into independent groups of `group_len` (the backward regenerating
    # several checkpoint groups at once, each from its own checkpoint): program (pid, g)
    # walks segments [g group_len, (g + 1) group_len) with its state at group offset g in
    # both slots ([2, groups, B, H, out, in]); a one-axis grid has one group of n_seg.
    # TS: the token stride of the per-token arrays, ranges of [B, TS, H, *] buffers
    # (`segment_tokens`; TS = T for dense ones)
    pid = tl.program_id(0)
    group = tl.program_id(1)
    size = hdim * d
    base = (group * tl.num_programs(0) + pid).to(tl.int64) * size  # this group's state
    seg_begin = group * group_len
    seg_end = tl.minimum(seg_begin + group_len, n_seg)

    # One layer's state tiles are live at a time: the inner gradient (layer 1's gradient
    # weights, then layer 2's), then per layer the retrieval through it and its
    # end-of-segment weights and momentum, stored before the next layer's tiles are read.
    for seg in range(seg_begin, seg_end):
        # the index tiles, rebuilt every step rather than held (see `opaque_zero`): for
        # sm_90 at d = h = 64, bf16 dots, the regeneration then has 35 spill stores per
        # step instead of 89 (the forward has none either way)
        rows, cd, _, causal, p1, m1, p2, m2 = step_tiles(seg, d, hdim, C, D, HID, EXACT)
        n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, TS, H, d, offset, C)
        last = rows == n - 1  # the state after the segment is the one at row n - 1
        q = tl.load(q_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        # padded tokens: theta 0; their decays never reach a valid row (causal masks, and
        # the end-of-segment values are read at row n - 1)
        theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)

        cur = base + ((seg - seg_begin) % 2) * slot  # this segment's state
        nxt = base + ((seg - seg_begin + 1) % 2) * slot  # the next one's
        sep = separate_g0(seg, FIRST_G0)

        # inner forward/backward at the gradient weights (layer inputs h, errors delta),
        # clip, and the decay products inside the segment from cumulative log gates
        a1, d1, d2, _, _, _, _, lr, _, _, _, _, _, _, _, A, De, P, M, bb, Mlr, _, _ = (
            segment_quantities(
                k, v, theta, alpha_ptr, eta_ptr, tok, rmask, causal, w1_ptr + cur, w2_ptr + cur,
                g1_ptr + base, g2_ptr + base, p1, m1, p2, m2, sep, clip,
                C, DEPTH, HAS_ETA, HAS_ALPHA, HAS_CLIP, ACT, FIRST_G0, PREC,
            )
        )  # fmt: skip
        a_last, b_last, p_last, m_last, c_last, _ = segment_end(
            last, A, Mlr, bb, P, De, lr, HAS_ETA
        )
        keep = seg % SAVE_EVERY  # 0: save this segment's entry state (SAVE)
        cbase = (pid.to(tl.int64) * n_ckpt + seg // SAVE_EVERY) * size

        # per layer: the retrieval through it and its end-of-segment weights and momentum
        # (layer 1 reads q with inputs k; layer 2 reads act(z) with inputs a1)
        z = _layer_step(
            w1_ptr, s1_ptr, cw1_ptr, cs1_ptr, cur, nxt, cbase, keep, p1, m1, q, k, d1,
            A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
            SAVE, RETRIEVE, HAS_ETA, PREC,
        )  # fmt: skip
        if DEPTH == 2:
            x2 = z  # the next layer's input rows (not read without retrieval)
            if RETRIEVE:
                x2 = act(z, ACT)
            z = _layer_step(
                w2_ptr, s2_ptr, cw2_ptr, cs2_ptr, cur, nxt, cbase, keep, p2, m2, x2, a1, d2,
                A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
                SAVE, RETRIEVE, HAS_ETA, PREC,
            )  # fmt: skip
        if RETRIEVE:
            # the output's addresses rebuilt from a key of their own (see `state_tiles_at`)
            # rather than held through both layers: sm_90 spill stores per step, tf32 dots
            # 1 -> 0, fp32 dots 126 -> 99 (benchmarks/results/NOTES.md)
            rows, cd, _, _, _, _, _, _ = step_tiles(nxt, d, hdim, C, D, HID, EXACT)
            n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, TS, H, d, offset, C)
            tl.store(y_ptr + xoff, z.to(y_ptr.dtype.element_ty), mask=xmask)
        tl.debug_barrier()  # the next segment reads the state just written, by any thread


@triton.jit
def _lmm_fwd_registers_kernel(
    q_ptr, k_ptr, v_ptr, theta_ptr, eta_ptr, alpha_ptr, y_ptr, w1_ptr, w2_ptr, s1_ptr,
    s2_ptr, g1_ptr, g2_ptr, cw1_ptr, cw2_ptr, cs1_ptr, cs2_ptr,
    T, TS, H, d, hdim, offset, n_seg, n_ckpt, slot, group_len, clip,
    C: tl.constexpr, D: tl.constexpr, HID: tl.constexpr, DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr, HAS_CLIP: tl.constexpr,
    EXACT: tl.constexpr, ACT: tl.constexpr, SAVE: tl.constexpr, SAVE_EVERY: tl.constexpr,
    PREC: tl.constexpr, RETRIEVE: tl.constexpr, FIRST_G0: tl.constexpr,
):  # fmt: skip
    """`_lmm_fwd_kernel` with the running state held in registers across the segment loop
    (`TritonOptions.state_in_registers`): same arguments, same results. The state is read
    from slot 0 once and the final state written once, to slot (segments walked) % 2 as the
    two-slot kernel leaves it (the last segment's entry weights to the other slot); between
    segments nothing goes through global memory except the checkpoints. The four state
    tiles stay live for the whole loop (at d = h = 64 and 8 warps 64 fp32 registers a
    thread), which is what this variant trades for the per-segment state traffic and the
    barrier."""
    pid = tl.program_id(0)
    group = tl.program_id(1)
    size = hdim * d
    base = (group * tl.num_programs(0) + pid).to(tl.int64) * size
    seg_begin = group * group_len
    seg_end = tl.minimum(seg_begin + group_len, n_seg)

    # names of their own outside the loop: a name assigned before the loop and in it is
    # carried from step to step
    i1, k1, i2, k2 = state_tiles_at(seg_begin, d, hdim, D, HID, EXACT)
    w1 = tl.load(w1_ptr + base + i1, mask=k1, other=0.0)
    s1 = tl.load(s1_ptr + base + i1, mask=k1, other=0.0)
    w2 = w1  # depth 1: carried, never read
    s2 = s1
    if DEPTH == 2:
        w2 = tl.load(w2_ptr + base + i2, mask=k2, other=0.0)
        s2 = tl.load(s2_ptr + base + i2, mask=k2, other=0.0)

    for seg in range(seg_begin, seg_end):
        rows, cd, _, causal, p1, m1, p2, m2 = step_tiles(seg, d, hdim, C, D, HID, EXACT)
        n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, TS, H, d, offset, C)
        last = rows == n - 1
        q = tl.load(q_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)
        sep = separate_g0(seg, FIRST_G0)

        # the inner pass at the gradient weights: the entry weights held here, or in the
        # first segment of a call that starts inside a chunk the separate ones (FIRST_G0)
        wg1 = _gradient_weights(w1, g1_ptr + base, p1, m1, sep, FIRST_G0)
        wg2 = w2
        if DEPTH == 2:
            wg2 = _gradient_weights(w2, g2_ptr + base, p2, m2, sep, FIRST_G0)
        z1, a1, g1p = inner_hidden(k, wg1, DEPTH, ACT, PREC)
        e1, _, d2 = inner_errors(z1, a1, g1p, v, wg2, DEPTH, PREC)
        a1, d1, d2, _, _, _, _, lr, _, _, _, _, _, _, _, A, De, P, M, bb, Mlr, _, _ = (
            quantities_after_inner(
                z1, e1, d2, k, theta, alpha_ptr, eta_ptr, tok, rmask, causal, clip,
                C, DEPTH, HAS_ETA, HAS_ALPHA, HAS_CLIP, ACT,
            )
        )  # fmt: skip
        a_last, b_last, p_last, m_last, c_last, _ = segment_end(
            last, A, Mlr, bb, P, De, lr, HAS_ETA
        )
        keep = seg % SAVE_EVERY
        cbase = (pid.to(tl.int64) * n_ckpt + seg // SAVE_EVERY) * size

        # the last segment's entry weights are its gradient weights, which the caller
        # reads from slot (segments - 1) % 2 as the two-slot kernel leaves them
        last_seg = tl.where(seg == seg_end - 1, 1, 0)
        entry = base + ((seg - seg_begin) % 2) * slot
        z, w1, s1 = _held_layer_step(
            w1, s1, w1_ptr, cw1_ptr, cs1_ptr, entry, last_seg, cbase, keep, p1, m1, q, k, d1,
            A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
            SAVE, RETRIEVE, HAS_ETA, PREC,
        )  # fmt: skip
        if DEPTH == 2:
            x2 = z
            if RETRIEVE:
                x2 = act(z, ACT)
            z, w2, s2 = _held_layer_step(
                w2, s2, w2_ptr, cw2_ptr, cs2_ptr, entry, last_seg, cbase, keep, p2, m2, x2, a1,
                d2, A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
                SAVE, RETRIEVE, HAS_ETA, PREC,
            )  # fmt: skip
        if RETRIEVE:
            tl.store(y_ptr + xoff, z.to(y_ptr.dtype.element_ty), mask=xmask)

    out = base + ((seg_end - seg_begin) % 2) * slot
    o1, l1, o2, l2 = state_tiles_at(seg_end, d, hdim, D, HID, EXACT)
    tl.store(w1_ptr + out + o1, w1, mask=l1)
    tl.store(s1_ptr + out + o1, s1, mask=l1)
    if DEPTH == 2:
        tl.store(w2_ptr + out + o2, w2, mask=l2)
        tl.store(s2_ptr + out + o2, s2, mask=l2)


@triton.jit
def _held_layer_step(
    ws, ss, w_ptr, cw_ptr, cs_ptr, entry, last_seg, cbase, keep, p, m, X, h, delta,
    A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
    SAVE: tl.constexpr, RETRIEVE: tl.constexpr, HAS_ETA: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """`_layer_update` with the state held in registers (ws, ss): the entry weights also
    to slot `entry` of the state buffer at the walk's last segment (last_seg == 1), the
    entry state to the checkpoint at `cbase` when SAVE and keep == 0. -> (z, W', S')."""
    tl.store(w_ptr + entry + p, ws, mask=m & (p * 0 + last_seg == 1))
    _save_entry(cw_ptr, cs_ptr, cbase, keep, p, m, ws, ss, SAVE)
    return _layer_update(
        ws, ss, X, h, delta, A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
        RETRIEVE, HAS_ETA, PREC,
    )  # fmt: skip


@triton.jit
def _gradient_weights(w, g0_ptr, p, m, sep, FIRST_G0: tl.constexpr):
    """A layer's gradient weights for a segment: the entry weights w held in registers, or
    where `sep` is 1 the separate ones at `g0_ptr` (read only then)."""
    if FIRST_G0:
        g0 = tl.load(g0_ptr + p, mask=m & (p * 0 + sep == 1), other=0.0)
        w = tl.where(p * 0 + sep == 1, g0, w)
    return w


@triton.jit
def _layer_step(
    w_ptr, s_ptr, cw_ptr, cs_ptr, cur, nxt, cbase, keep, p, m, X, h, delta,
    A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
    SAVE: tl.constexpr, RETRIEVE: tl.constexpr, HAS_ETA: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """`_layer_update` with the state in global memory: read from slot `cur`, written to
    slot `nxt` (the entry state also to the checkpoint at `cbase` when SAVE and keep == 0).
    Returns the retrieval z."""
    ws = tl.load(w_ptr + cur + p, mask=m, other=0.0)
    ss = tl.load(s_ptr + cur + p, mask=m, other=0.0)
    _save_entry(cw_ptr, cs_ptr, cbase, keep, p, m, ws, ss, SAVE)
    z, nw, ns = _layer_update(
        ws, ss, X, h, delta, A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
        RETRIEVE, HAS_ETA, PREC,
    )  # fmt: skip
    tl.store(w_ptr + nxt + p, nw, mask=m)
    tl.store(s_ptr + nxt + p, ns, mask=m)
    return z


@triton.jit
def _save_entry(cw_ptr, cs_ptr, cbase, keep, p, m, ws, ss, SAVE: tl.constexpr):
    """A layer's segment-entry weights and momentum to the checkpoint at `cbase` (SAVE, and
    keep == 0: the segment opens a checkpoint group)."""
    if SAVE:
        tl.store(cw_ptr + cbase + p, ws, mask=m & (p * 0 + keep == 0))
        tl.store(cs_ptr + cbase + p, ss, mask=m & (p * 0 + keep == 0))


@triton.jit
def _layer_update(
    ws, ss, X, h, delta, A, Mlr, bb, a_last, b_last, p_last, m_last, c_last,
    RETRIEVE: tl.constexpr, HAS_ETA: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """One memory layer of a segment, from its entry weights ws and momentum ss [out, in]:
    the retrieval z = A (X Ws^T) + bb (X Ss^T) - (Mlr * X h^T) delta [C, out] of the
    layer's input rows X [C, in] (X itself when RETRIEVE is off), and the state after the
    segment, W' = A_n Ws + b_n Ss - (delta * m)^T h, S' = P_n Ss - (delta * c)^T h.
    h [C, in] and delta [C, out]: the layer's inner inputs and errors. -> (z, W', S')."""
    z = X
    if RETRIEVE:
        z = A[:, None] * mm(X, tl.trans(ws), PREC)
        z -= mm(Mlr * mm(X, tl.trans(h), PREC), delta, PREC)
        if HAS_ETA:
            z += bb[:, None] * mm(X, tl.trans(ss), PREC)
    nw = a_last * ws - mm(tl.trans(delta * m_last[:, None]), h, PREC)
    if HAS_ETA:
        nw += b_last * ss
        ns = p_last * ss
    else:
        ns = tl.zeros_like(ss)
    ns -= mm(tl.trans(delta * c_last[:, None]), h, PREC)
    return z, nw, ns


def num_checkpoints(n_seg: int, save_every: int | None) -> int:
    """States the forward keeps for the backward: the one entering every save_every-th of
    n_seg segments (none without save_every)."""
    return -(-n_seg // save_every) if save_every else 0


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
    state_in_registers: bool = False,
):
    """Launch the fused forward.

    q, k, v: [B, T, H, d]; theta/eta/alpha: [B, T, H] (eta/alpha may be None); weights,
    momentum, grad_weights: the state entering the call, per layer [B, H, out, in] (any
    float dtype; copied to fp32); offset: tokens of the current chunk already absorbed.
    save_every: store the state entering every save_every-th segment (None: no checkpoints).
    retrieve: False computes the states only (y is then None): the backward's regeneration.
    state_in_registers: the kernel variant that holds the running state in registers
    across segments (`TritonOptions.state_in_registers`).

    Returns (y [B, T, H, d] in q's dtype, W, S, G, ckpt_W, ckpt_S): W, S the final weights
    and momentum, G the weights the last segment's gradients used (tuples of fp32
    [B, H, out, in]); ckpt_W/ckpt_S tuples of [B, H, n_ckpt, out, in] (empty without
    save_every).
    """
    B, T, H, d = q.shape
    n_seg = num_segments(T, chunk_size, offset)
    # weights and momentum in two slots (see the kernel): the call's state in slot 0, the
    # state after segment s in slot (s + 1) % 2
    W2 = tuple(two_slots(w) for w in weights)
    S2 = tuple(two_slots(s) for s in momentum)
    first_g0 = offset > 0  # at a chunk boundary the gradient weights are the entry weights
    G = tuple(g.to(torch.float32).contiguous().clone() for g in grad_weights) if first_g0 else W2
    y = q.new_empty(q.shape) if retrieve else None  # contiguous, as the kernel writes it

    save = save_every is not None
    n_ckpt = num_checkpoints(n_seg, save_every)
    cW = tuple(w.new_empty(B, H, n_ckpt, *w.shape[3:]) for w in W2) if save else ()
    cS = tuple(w.new_empty(B, H, n_ckpt, *w.shape[3:]) for w in W2) if save else ()

    _launch(
        (q, k, v, theta, eta, alpha), y, W2, S2, G, cW, cS, offset, n_seg, chunk_size,
        activation, inner_grad_clip, save_every, input_precision, first_g0, n_seg, 1,
        state_in_registers,
    )  # fmt: skip
    W = tuple(w[n_seg % 2] for w in W2)
    S = tuple(s[n_seg % 2] for s in S2)
    if n_seg > 1 or not first_g0:  # the last segment's gradient weights: its entry weights
        G = tuple(w[(n_seg - 1) % 2] for w in W2)
    return y, W, S, G, cW, cS


def _launch(
    inputs, y, W2, S2, G, cW, cS, offset, n_seg, chunk_size, activation, inner_grad_clip,
    save_every, input_precision, first_g0, group_len, groups, state_in_registers,
):  # fmt: skip
    """One launch of the forward kernel over (batch x head, groups) programs (the variant
    holding the state in registers when state_in_registers); y None: no retrieval; cW/cS
    empty: no checkpoints. Shapes as in `lmm_forward_triton`, the state
    buffers W2/S2 [2, groups, B, H, out, in] (or [2, B, H, out, in] for one group)."""
    # the kernel indexes q, k, v, y [B, T, H, d] and the gates [B, T, H] as token ranges
    # of buffers of one length TS (views, `token_stride`); dense copies where they are not
    TS = token_stride((*inputs, y))
    if TS is None:
        inputs = tuple(None if x is None else x.contiguous() for x in inputs)
        TS = inputs[0].shape[1]
    q, k, v, theta, eta, alpha = inputs
    B, T, H, d = q.shape
    depth = len(W2)
    hdim = W2[0].shape[-2] if depth == 2 else d
    save = save_every is not None
    n_ckpt = cW[0].shape[2] if save else 0

    kernel = _lmm_fwd_registers_kernel if state_in_registers else _lmm_fwd_kernel
    kernel[(B * H, groups)](
        q,
        k,
        v,
        theta,
        theta if eta is None else eta,
        theta if alpha is None else alpha,
        q if y is None else y,  # an unused pointer without retrieval
        W2[0],
        second_layer(W2, depth),
        S2[0],
        second_layer(S2, depth),
        G[0],
        second_layer(G, depth),
        cW[0] if save else W2[0],
        second_layer(cW, depth) if save else W2[0],
        cS[0] if save else W2[0],
        second_layer(cS, depth) if save else W2[0],
        T,
        TS,
        H,
        d,
        hdim,
        offset,
        n_seg,
        n_ckpt,
        W2[0][0].numel(),
        group_len,
        float(inner_grad_clip or 0.0),
        SAVE=save,
        SAVE_EVERY=save_every or 1,
        RETRIEVE=y is not None,
        FIRST_G0=first_g0,
        **launch_constants(
            chunk_size, d, hdim, depth, eta, alpha, inner_grad_clip, activation, input_precision
        ),
    )


def regenerate_entry_states(
    q, k, v, theta, eta, alpha, group_weights, group_momentum, grad_weights, offset: int,
    chunk_size: int, activation: str, inner_grad_clip: float | None, group_len: int,
    input_precision: str = "ieee", state_in_registers: bool = False,
):  # fmt: skip
    """The weights and momentum entering every segment of a range, regenerated from the
    checkpoints of its groups of `group_len` segments in one launch, the groups in parallel
    (no retrieval).

    q, k, v: [B, T, H, d] and gates [B, T, H] of the range; group_weights / group_momentum:
    per layer [B, H, n_groups, out, in], the state entering each group (the forward's
    checkpoints); grad_weights: per layer [B, H, out, in], the gradient weights of the
    range's first segment when it starts inside a chunk (offset > 0), else unused.
    Returns (entry_W, entry_S): per layer [B, H, n_seg, out, in] fp32.
    """
    B, T, H, _ = q.shape
    n_seg = num_segments(T, chunk_size, offset)
    groups = group_weights[0].shape[2]
    if groups != num_checkpoints(n_seg, group_len):
        raise ValueError(f"{groups} checkpoints for {n_seg} segments in groups of {group_len}")
    # [B, H, groups, out, in] -> two slots of [groups, B, H, out, in] (see the kernel)
    W2 = tuple(two_slots(w.permute(2, 0, 1, 3, 4)) for w in group_weights)
    S2 = tuple(two_slots(s.permute(2, 0, 1, 3, 4)) for s in group_momentum)
    first_g0 = offset > 0
    G = tuple(g.to(torch.float32).contiguous() for g in grad_weights) if first_g0 else W2
    eW = tuple(w.new_empty(B, H, n_seg, *w.shape[4:]) for w in W2)
    eS = tuple(w.new_empty(B, H, n_seg, *w.shape[4:]) for w in W2)
    _launch(
        (q, k, v, theta, eta, alpha), None, W2, S2, G, eW, eS, offset, n_seg, chunk_size,
        activation, inner_grad_clip, 1, input_precision, first_g0, group_len, groups,
        state_in_registers,
    )  # fmt: skip
    return eW, eS
