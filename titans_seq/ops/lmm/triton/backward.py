"""Triton backward kernels of the Titans memory op (memory depth 1 and 2).

Every segment's forward quantities (inner forward/backward, clip factor, decays) follow
from the weights and momentum entering it, which the forward kernel regenerates for every
segment from the sparse checkpoints (`autograd.py`). The adjoint is linear in the
incoming gradients, so it splits in three:

* the retrieval's share, driven by the gradient of the output rows dy: it needs only the
  segment's entry state, so `_lmm_bwd_retrieval_kernel` computes it for every segment at
  once (grid B*H x segments), as flash-linear-attention's chunked kernels do: dq whole,
  and the retrieval's shares of the other per-token gradients and of the gradient w.r.t.
  each segment's entry state, written to scratch, with the segment's inner
  forward/backward (`inner_pass`: three tiles per token) and inner-gradient norms;
* the state's share, driven by the gradient w.r.t. the state after a segment:
  `_lmm_bwd_kernel` walks the segments in reverse (one program per (batch, head)), adds
  the carried state gradient's share to the retrieval's, back-propagates the clip and the
  inner forward/backward once, and hands the gradient w.r.t. the state entering the
  segment on. It recomputes nothing that takes a product with the state: the inner tiles
  are read back where they are used;
* the gates' share: d eta and d alpha feed nothing else, so the sequential pass stores
  the gradients w.r.t. the decay quantities and `_lmm_bwd_gates_kernel` back-propagates
  them for every segment at once.

Doing all three in one sequential pass is less work in all, but the sequential chain then
holds the retrieval's tiles too: on sm_90 it spilled every chunk step and ran 1.1-1.9x
slower on an H200 (benchmarks/results/NOTES.md). The gradient w.r.t. the running state
(dW, dS; fp32) is carried between segments in global memory in two slots, like the
forward's state, and a segment works through one layer's tiles at a time.

The formulas are the hand-derived adjoint of `segment_step.forward_segment` (written out in
docs/derivation.md); the tests compare them with the token-by-token reference.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .helpers import (
    act,
    batch_shift,
    dact,
    ddact,
    gate_adjoint,
    inner_activations,
    mm,
    mm_by_state,
    opaque_index,
    rate_from_norm,
    segment_decays,
    segment_end,
    segment_quantities,
    segment_tokens,
    segment_weights,
    separate_g0,
    squared_norms,
    state_tiles,
    state_tiles_at,
    step_tiles,
)
from .launch import (
    NUM_STAGES,
    interpreter_active,
    launch_constants,
    pow2,
    second_layer,
    token_stride,
)

# the gate pass works on [C, C] tiles and reductions of state tiles: a few warps suffice
GATES_NUM_WARPS = 4
# the compile-time constants of `_lmm_bwd_gates_kernel`, a subset of `launch_constants`
GATES_CONSTEXPRS = ("C", "D", "HID", "DEPTH", "HAS_ETA", "HAS_ALPHA", "EXACT")
# The register budget of the other backward kernels, pinned: left to choose, ptxas builds
# the fp32-dot ("ieee") ones with 32 registers and spills thousands of values per chunk
# step (sm_90: sequential pass 14,915 instructions and 2,828 spill stores per step, against
# 7,945 and 320 with the budget pinned; benchmarks/results/NOTES.md). 255 is the most a thread may
# have at 256 threads per program; with bf16 or tf32 dots ptxas takes it anyway.
BACKWARD_MAX_REGISTERS = 255


@triton.jit
def _token_tile(ptr, tok, cols, W: tl.constexpr):
    """Pointers to the rows [C, W] of a per-token scratch array [B, T, H, W]: tok [C] the
    rows' token-head indices, cols [W] the column indices."""
    return ptr + tok[:, None] * W + cols[None, :]


@triton.jit
def _stored_inner(
    k_ptr, xoff, xmask, iz1_ptr, ie1_ptr, id2_ptr, tok, ch, cd, hmask,
    HID: tl.constexpr, D: tl.constexpr, DEPTH: tl.constexpr, ACT: tl.constexpr,
):  # fmt: skip
    """A segment's inner forward/backward as the retrieval pass stored it (`inner_pass`),
    read back where the sequential pass uses it: (k [C, D], a1, act'(z1), d1 [C, HID], d2
    [C, D], z1, e1 [C, HID]). What a call site leaves unused is not read: each site reads
    its own tiles rather than holding them from the top of the step."""
    k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
    e1 = tl.load(_token_tile(ie1_ptr, tok, ch, HID), mask=hmask, other=0.0)
    z1, d2 = e1, e1
    if DEPTH == 2:
        z1 = tl.load(_token_tile(iz1_ptr, tok, ch, HID), mask=hmask, other=0.0)
        d2 = tl.load(_token_tile(id2_ptr, tok, cd, D), mask=hmask, other=0.0)
    a1, g1p, d1, d2 = inner_activations(z1, e1, d2, DEPTH, ACT)
    return k, a1, g1p, d1, d2, z1, e1


@triton.jit
def _layer_retrieval_adjoint(
    X, h, delta, G, dZ, Mlr, A, bb, dA, dbb, cw_ptr, cs_ptr, cbase, p, m, tw_ptr, ts_ptr,
    tbase, HAS_ETA: tl.constexpr, PREC: tl.constexpr, FLIP: tl.constexpr,
):  # fmt: skip
    """The adjoint of one layer's retrieval Z = A (X Ws^T) + bb (X Ss^T) - (Mlr * G) delta,
    G = X h^T [C, C], given dZ [C, out]; X [C, in] its input rows, h [C, in] and delta
    [C, out] the layer's inner inputs and errors, Ws, Ss the entry state at `cbase`.
    Returns (dX, dh, ddelta, the layer's share of dMlr [C, C], dA, dbb with its share added)
    and stores its shares of the gradients w.r.t. Ws, (A dZ)^T X, and Ss, (bb dZ)^T X, at
    t*_ptr + tbase. FLIP: the products X Ws^T, X Ss^T through `mm_by_state`."""
    dR = -mm(dZ, tl.trans(delta), PREC)
    ddelta = -mm(tl.trans(Mlr * G), dZ, PREC)
    dG = dR * Mlr
    dX = mm(dG, h, PREC)
    dh = mm(tl.trans(dG), X, PREC)
    ws = tl.load(cw_ptr + cbase + p, mask=m, other=0.0)
    dA += tl.sum(dZ * mm_by_state(X, tl.trans(ws), PREC, FLIP), 1)
    dX += A[:, None] * mm(dZ, ws, PREC)
    tl.store(tw_ptr + tbase + p, mm(tl.trans(A[:, None] * dZ), X, PREC), mask=m)
    if HAS_ETA:
        ss = tl.load(cs_ptr + cbase + p, mask=m, other=0.0)
        dbb += tl.sum(dZ * mm_by_state(X, tl.trans(ss), PREC, FLIP), 1)
        dX += bb[:, None] * mm(dZ, ss, PREC)
        tl.store(ts_ptr + tbase + p, mm(tl.trans(bb[:, None] * dZ), X, PREC), mask=m)
    return dX, dh, ddelta, dR * G, dA, dbb


@triton.jit
def _retrieval_adjoint(
    q, k, a1, d1, d2, dy, Mlr, A, bb, cw1_ptr, cs1_ptr, cw2_ptr, cs2_ptr, cbase,
    p1, m1, p2, m2, tw1_ptr, ts1_ptr, tw2_ptr, ts2_ptr, tbase,
    C: tl.constexpr, DEPTH: tl.constexpr, HAS_ETA: tl.constexpr, ACT: tl.constexpr,
    PREC: tl.constexpr, FLIP: tl.constexpr,
):  # fmt: skip
    """The adjoint of a segment's dual-form retrieval y = f(q) given dy [C, D]:
    layer 1 z = A (q Ws1^T) + bb (q Ss1^T) - R1 d1 with R1 = Mlr * (q k^T), and at depth 2
    y = A (x2 Ws2^T) + bb (x2 Ss2^T) - R2 d2 with x2 = act(z), R2 = Mlr * (x2 a1^T).

    Returns (dq [C, D] complete, and the retrieval's shares of dk [C, D], dd1 [C, HID],
    dd2 [C, D], da1 [C, HID], dMlr [C, C], dA [C], dbb [C]; at depth 1 dd2 and da1 are
    stand-ins nobody reads); stores each layer's share of the gradient w.r.t. the entry
    state through `_layer_retrieval_adjoint` at t*_ptr + tbase."""
    G1 = mm(q, tl.trans(k), PREC)
    R1 = Mlr * G1
    ws1 = tl.load(cw1_ptr + cbase + p1, mask=m1, other=0.0)
    z = A[:, None] * mm(q, tl.trans(ws1), PREC) - mm(R1, d1, PREC)
    if HAS_ETA:
        ss1 = tl.load(cs1_ptr + cbase + p1, mask=m1, other=0.0)
        z += bb[:, None] * mm(q, tl.trans(ss1), PREC)
    dA = tl.zeros([C], tl.float32)
    dbb = tl.zeros([C], tl.float32)
    if DEPTH == 2:
        x2 = act(z, ACT)
        dx2, da1, dd2, dMlr, dA, dbb = _layer_retrieval_adjoint(
            x2, a1, d2, mm(x2, tl.trans(a1), PREC), dy, Mlr, A, bb, dA, dbb,
            cw2_ptr, cs2_ptr, cbase, p2, m2, tw2_ptr, ts2_ptr, tbase, HAS_ETA, PREC, FLIP,
        )  # fmt: skip
        dz = dx2 * dact(z, ACT)
    else:
        dz = dy
        dMlr = tl.zeros([C, C], tl.float32)
        dd2, da1 = dy, dy
    dq, dk, dd1, dMlr1, dA, dbb = _layer_retrieval_adjoint(
        q, k, d1, G1, dz, Mlr, A, bb, dA, dbb,
        cw1_ptr, cs1_ptr, cbase, p1, m1, tw1_ptr, ts1_ptr, tbase, HAS_ETA, PREC, FLIP,
    )  # fmt: skip
    dMlr += dMlr1
    return dq, dk, dd1, dd2, da1, dMlr, dA, dbb


@triton.jit
def _carry_adjoint(
    p, m, dw_ptr, ds_ptr, cur, nxt, tw_ptr, ts_ptr, tbase, h, delta,
    a_last, b_last, p_last, m_last, c_last, dh, ddelta, dm, dc,
    HAS_ETA: tl.constexpr, PREC: tl.constexpr, FLIP: tl.constexpr,
):  # fmt: skip
    """The adjoint of one layer's state after the segment, W' = A_n Ws + b_n Ss -
    (delta * m)^T h and S' = P_n Ss - (delta * c)^T h, given the carried gradients dW', dS'
    (slot `cur`). Writes the gradient w.r.t. the entry momentum (complete) and w.r.t. the
    entry weights (without the gradient weights' share) to slot `nxt`, each the sum of the
    carried share and the retrieval's, read at t*_ptr + tbase; h [C, in], delta [C, out]:
    the layer's inner inputs and errors. Adds its share to dh, ddelta ([C, .]), dm, dc
    ([C]) and returns them. The end-of-segment scalars' products with the entry state are
    left to the gates pass (they feed nothing else): dW' and dS' are stored at t*_ptr +
    tbase, over the retrieval's shares just read. Each tile is read when first needed, to
    hold as few as it can at once."""
    dwn = tl.load(dw_ptr + cur + p, mask=m, other=0.0)
    retrieval = tl.load(tw_ptr + tbase + p, mask=m, other=0.0)
    tl.store(dw_ptr + nxt + p, retrieval + a_last * dwn, mask=m)
    tl.store(tw_ptr + tbase + p, dwn, mask=m)
    hW = mm(h, tl.trans(dwn), PREC)
    ddelta -= m_last[:, None] * hW
    dh -= mm_by_state(delta * m_last[:, None], dwn, PREC, FLIP)
    dm -= tl.sum(delta * hW, 1)
    dsn = tl.load(ds_ptr + cur + p, mask=m, other=0.0)
    hS = mm(h, tl.trans(dsn), PREC)
    ddelta -= c_last[:, None] * hS
    dh -= mm_by_state(delta * c_last[:, None], dsn, PREC, FLIP)
    dc -= tl.sum(delta * hS, 1)
    if HAS_ETA:
        retrieval = tl.load(ts_ptr + tbase + p, mask=m, other=0.0)
        dss = retrieval + b_last * dwn + p_last * dsn
        tl.store(ts_ptr + tbase + p, dsn, mask=m)
    else:
        dss = tl.zeros_like(dwn)
    tl.store(ds_ptr + nxt + p, dss, mask=m)
    return dh, ddelta, dm, dc


@triton.jit
def _lmm_bwd_retrieval_kernel(
    q_ptr, k_ptr, v_ptr, theta_ptr, eta_ptr, alpha_ptr, dy_ptr,
    cw1_ptr, cw2_ptr, cs1_ptr, cs2_ptr, g01_ptr, g02_ptr,
    dq_ptr, dk_ptr, pd1_ptr, pd2_ptr, pa1_ptr, pmlr_ptr, pa_ptr, pbb_ptr,
    pw1_ptr, pw2_ptr, ps1_ptr, ps2_ptr, iz1_ptr, ie1_ptr, id2_ptr, inrm_ptr,
    T, TS, H, d, hdim, offset, n_seg, clip,
    C: tl.constexpr, D: tl.constexpr, HID: tl.constexpr, DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr, HAS_CLIP: tl.constexpr,
    EXACT: tl.constexpr, ACT: tl.constexpr, FIRST_G0: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    # grid (B * H, n_seg): one segment per program. Inputs as in `_lmm_bwd_kernel`; out:
    # dq (complete) and dk (the retrieval's share) in [B, T, H, d]; the retrieval's shares
    # of dd1 / da1 [B, T, H, HID], dd2 [B, T, H, D], dMlr [B, T, H, C] (row t of the
    # segment's [C, C]), dA, dbb [B, T, H]; and of the gradient w.r.t. each segment's entry
    # weights and momentum, pw / ps [B, H, n_seg, out, in] like the entry states. And what
    # the sequential pass derives the segment's forward quantities from (`inner_pass`):
    # z1, e1 [B, T, H, HID], d2 [B, T, H, D] (depth 1: e1 only, the layer's error) and the
    # inner gradient's norm [B, T, H] (with a clip). The inputs and dq are token ranges of
    # [B, TS, H, *] buffers (`batch_shift`), the scratch (dk's share too) dense [B, T, H, *]
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    shift = batch_shift(T, TS, H)
    q_ptr, k_ptr, v_ptr = q_ptr + shift * d, k_ptr + shift * d, v_ptr + shift * d
    dy_ptr, dq_ptr = dy_ptr + shift * d, dq_ptr + shift * d
    theta_ptr, eta_ptr, alpha_ptr = theta_ptr + shift, eta_ptr + shift, alpha_ptr + shift
    rows = tl.arange(0, C)
    cd = tl.arange(0, D)
    ch = tl.arange(0, HID)
    causal = rows[:, None] >= rows[None, :]
    size = hdim * d
    base = pid.to(tl.int64) * size
    cbase = (pid.to(tl.int64) * n_seg + seg) * size
    p1, m1, p2, m2 = state_tiles(d, hdim, D, HID, EXACT)
    n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
    q = tl.load(q_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
    theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)
    sep = separate_g0(seg, FIRST_G0)
    a1, d1, d2, _, _, _, _, _, _, nrm, _, _, _, _, _, A, _, _, _, bb, Mlr, z1, e1 = (
        segment_quantities(
            k, v, theta, alpha_ptr, eta_ptr, tok, rmask, causal, cw1_ptr + cbase,
            cw2_ptr + cbase, g01_ptr + base, g02_ptr + base, p1, m1, p2, m2, sep, clip,
            C, DEPTH, HAS_ETA, HAS_ALPHA, HAS_CLIP, ACT, FIRST_G0, PREC,
        )
    )  # fmt: skip
    hmask = rmask[:, None]
    tl.store(_token_tile(ie1_ptr, tok, ch, HID), e1, mask=hmask)
    if DEPTH == 2:
        tl.store(_token_tile(iz1_ptr, tok, ch, HID), z1, mask=hmask)
        tl.store(_token_tile(id2_ptr, tok, cd, D), d2, mask=hmask)
    if HAS_CLIP:
        tl.store(inrm_ptr + tok, nrm, mask=rmask)
    dy = tl.load(dy_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
    dq, dk, dd1, dd2, da1, dMlr, dA, dbb = _retrieval_adjoint(
        q, k, a1, d1, d2, dy, Mlr, A, bb, cw1_ptr, cs1_ptr, cw2_ptr, cs2_ptr, cbase,
        p1, m1, p2, m2, pw1_ptr, ps1_ptr, pw2_ptr, ps2_ptr, cbase, C, DEPTH, HAS_ETA, ACT, PREC,
        # flipped products (`mm_by_state`) on tensor cores: with the output addresses
        # rebuilt below, sm_90 spill stores per segment bf16 10 -> 0 (tf32 0 either way)
        PREC != "ieee",
    )  # fmt: skip
    # the output addresses rebuilt here (see `state_tiles_at`: a key of its own keeps the
    # compiler from reusing those of the top), not held through the segment's products:
    # sm_90 spill stores per segment tf32 13 -> 0, fp32 dots 606 -> 579
    # (benchmarks/results/NOTES.md)
    rows, cd, ch, _, _, _, _, _ = step_tiles(n_seg, d, hdim, C, D, HID, EXACT)
    n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
    hmask = rmask[:, None]
    tl.store(dq_ptr + xoff, dq.to(dq_ptr.dtype.element_ty), mask=xmask)
    tl.store(dk_ptr + xoff, dk, mask=xmask)
    if DEPTH == 2:
        tl.store(_token_tile(pd2_ptr, tok, cd, D), dd2, mask=hmask)
        tl.store(_token_tile(pa1_ptr, tok, ch, HID), da1, mask=hmask)
    tl.store(_token_tile(pd1_ptr, tok, ch, HID), dd1, mask=hmask)
    tl.store(_token_tile(pmlr_ptr, tok, rows, C), dMlr, mask=hmask)
    tl.store(pa_ptr + tok, dA, mask=rmask)
    if HAS_ETA:
        tl.store(pbb_ptr + tok, dbb, mask=rmask)


# the slot parity changes from range to range: not a value to compile a variant for
@triton.jit(do_not_specialize=["parity"])
def _lmm_bwd_kernel(
    k_ptr, theta_ptr, eta_ptr, alpha_ptr,
    cw1_ptr, cw2_ptr, cs1_ptr, cs2_ptr, g01_ptr, g02_ptr,
    dw1_ptr, dw2_ptr, ds1_ptr, ds2_ptr, dgl1_ptr, dgl2_ptr, dg01_ptr, dg02_ptr,
    dk_ptr, dkout_ptr, dv_ptr, dtheta_ptr,
    pd1_ptr, pd2_ptr, pa1_ptr, pmlr_ptr, pw1_ptr, pw2_ptr, ps1_ptr, ps2_ptr,
    pde_ptr, iz1_ptr, ie1_ptr, id2_ptr, inrm_ptr,
    T, TS, H, d, hdim, offset, n_seg, slot, parity, clip,
    C: tl.constexpr, D: tl.constexpr, HID: tl.constexpr, DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr, HAS_CLIP: tl.constexpr,
    EXACT: tl.constexpr, ACT: tl.constexpr, FIRST_G0: tl.constexpr, LAST_DG: tl.constexpr,
    PREC: tl.constexpr, PTX: tl.constexpr,
):  # fmt: skip
    # inputs [B, T, H, d] / [B, T, H] (T: this range) and the input gradients dk (out),
    # dv, dtheta: token ranges of [B, TS, H, *] buffers (`batch_shift`); entry states per
    # segment [B, H, n_seg, out, in]; carried dW, dS [2, B, H, out, in], two slots `slot`
    # elements apart: step s reads the gradient w.r.t. the state after its segment from slot
    # (parity + s) % 2 and writes the one w.r.t. the state before it to the other (in: slot
    # `parity` holds the gradient w.r.t. the state after the range; out: slot
    # (parity + n_seg) % 2, before it); g0 / dg0: separate gradient weights of the first
    # segment (a range that starts inside a chunk); dgl: gradient w.r.t. the gradient weights
    # of the last segment. The retrieval's shares come from
    # `_lmm_bwd_retrieval_kernel` (p*_ptr, and dk as it left it), and the gate gradients
    # are left to `_lmm_bwd_gates_kernel` (the gradient w.r.t. M overwrites the retrieval's
    # share in pmlr, the retrieval's shares of A and bb are all this pass leaves them, the
    # one w.r.t. De's last row goes to pde [B, T, H], and the gradients w.r.t. the state
    # after each segment, which the end-of-segment scalars' gradients are taken from,
    # overwrite the retrieval's state shares in pw, ps); the segment's forward quantities
    # follow from the inner tiles and norms that pass stored (i*_ptr). PTX: compiled for a
    # GPU (inline PTX available), not interpreted
    pid = tl.program_id(0)
    size = hdim * d
    base = pid.to(tl.int64) * size
    shift = batch_shift(T, TS, H)
    k_ptr, dkout_ptr, dv_ptr = k_ptr + shift * d, dkout_ptr + shift * d, dv_ptr + shift * d
    theta_ptr, eta_ptr, alpha_ptr = theta_ptr + shift, eta_ptr + shift, alpha_ptr + shift
    dtheta_ptr = dtheta_ptr + shift
    # the products of a chunk tile by a state tile with the state tile on the left (see
    # `mm_by_state`): fewer spills on tensor cores (benchmarks/results/NOTES.md)
    FLIP: tl.constexpr = PREC != "ieee"
    # the segment index through `opaque_index`: measured per kernel, it pays here (with the
    # token tiles rebuilt below, at every dot precision)
    OPAQUE_SEG: tl.constexpr = PTX

    # A segment holds one layer's state tiles at a time (weights, momentum, their carried
    # gradients): read the inner gradient where it is used, read the retrieval's shares,
    # back-propagate the end-of-segment state through layer 2, then layer 1, writing each
    # layer's state gradient as soon as it is known, then store the decays' gradients for
    # the gates pass, the clip, and last the inner forward/backward (layer 2, then 1),
    # adding the gradient weights' share to the stored state gradient. Tiles are
    # re-read from global memory (L1/L2 hits) rather than kept live: with every tile live,
    # ptxas spills.
    for step in range(n_seg):
        seg = opaque_index(n_seg - 1 - step, OPAQUE_SEG)
        # the index tiles, rebuilt every step rather than held (see `opaque_zero`)
        rows, cd, ch, causal, p1, m1, p2, m2 = step_tiles(seg, d, hdim, C, D, HID, EXACT)
        n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
        last = rows == n - 1
        hmask = rmask[:, None]
        k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)
        cbase = (pid.to(tl.int64) * n_seg + seg) * size
        sep = separate_g0(seg, FIRST_G0)
        # no product with the state on this chain: the rate from the stored norm, the
        # decays from the gates; the inner tiles are read where they are used below
        nrm = theta  # (a stand-in without a clip)
        if HAS_CLIP:
            nrm = tl.load(inrm_ptr + tok, mask=rmask, other=0.0)
        lr, f, nrm, nrm_c, ratio = rate_from_norm(theta, nrm, clip, HAS_CLIP)
        alpha, eta, Da, A, De, P, M, bb = segment_decays(
            alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA
        )
        Mlr = M * lr[None, :]
        a_last, b_last, p_last, m_last, c_last, de_last = segment_end(
            last, A, Mlr, bb, P, De, lr, HAS_ETA
        )

        cur = base + ((parity + step) % 2) * slot  # the carried gradients read
        nxt = base + ((parity + step + 1) % 2) * slot  # and written
        # the retrieval's shares: of d loss / d Mlr, and of the state gradient (tiles at
        # t*_ptr + tbase, which the carried share is added to); its shares of d A and d bb
        # are the gates pass's, which adds the end-of-segment scalars' to them
        dMlr = tl.load(_token_tile(pmlr_ptr, tok, rows, C), mask=hmask, other=0.0)
        tw1, ts1, tw2, ts2, tbase = pw1_ptr, ps1_ptr, pw2_ptr, ps2_ptr, cbase
        # accumulators over both layers: d loss / d the last row's m, c
        dm = tl.zeros([C], tl.float32)
        dc = tl.zeros([C], tl.float32)

        # ---- the state after the segment, layer 2 then 1: W' = A_n Ws + b_n Ss -
        # (delta * m)^T h, S' = P_n Ss - (delta * c)^T h ----
        if DEPTH == 2:
            # the carried adjoint's shares start from zero and the retrieval's are added
            # after it, so that they are not held through it (sm_90, bf16 dots: 16 -> 5
            # spill stores per step; benchmarks/results/NOTES.md)
            dd2 = tl.zeros([C, D], tl.float32)
            da1 = tl.zeros([C, HID], tl.float32)
            _, h2, _, _, delta2, _, _ = _stored_inner(
                k_ptr, xoff, xmask, iz1_ptr, ie1_ptr, id2_ptr, tok, ch, cd, hmask,
                HID, D, DEPTH, ACT,
            )  # fmt: skip
            # the offset tiles rebuilt at each use (see `state_tiles_at`)
            _, _, p2, m2 = state_tiles_at(cur, d, hdim, D, HID, EXACT)
            da1, dd2, dm, dc = _carry_adjoint(
                p2, m2, dw2_ptr, ds2_ptr, cur, nxt, tw2, ts2, tbase,
                h2, delta2, a_last, b_last, p_last, m_last, c_last,
                da1, dd2, dm, dc, HAS_ETA, PREC, FLIP,
            )  # fmt: skip
            da1 += tl.load(_token_tile(pa1_ptr, tok, ch, HID), mask=hmask, other=0.0)
            dd2 += tl.load(_token_tile(pd2_ptr, tok, cd, D), mask=hmask, other=0.0)
        dk = tl.load(dk_ptr + xoff, mask=xmask, other=0.0)
        dd1 = tl.load(_token_tile(pd1_ptr, tok, ch, HID), mask=hmask, other=0.0)
        h1, _, _, delta1, _, _, _ = _stored_inner(
            k_ptr, xoff, xmask, iz1_ptr, ie1_ptr, id2_ptr, tok, ch, cd, hmask,
            HID, D, DEPTH, ACT,
        )  # fmt: skip
        p1, m1, _, _ = state_tiles_at(nxt, d, hdim, D, HID, EXACT)
        dk, dd1, dm, dc = _carry_adjoint(
            p1, m1, dw1_ptr, ds1_ptr, cur, nxt, tw1, ts1, tbase,
            h1, delta1, a_last, b_last, p_last, m_last, c_last,
            dk, dd1, dm, dc, HAS_ETA, PREC, FLIP,
        )  # fmt: skip

        # ---- the decays and the clip (the end-of-segment scalars' gradients: the gates
        # pass) ----
        dMlr += tl.where(last[:, None], dm[None, :], 0.0)
        dde = dc * lr  # d loss / d De's last row
        if HAS_ETA:
            dlr = dc * de_last
        else:
            dlr = tl.where(last, dc, 0.0)
        # Mlr = M lr: the learning rate's share here, the decays' (M = Da De, bb = Da P,
        # A, P) in `gate_adjoint`
        dM = dMlr * lr[None, :]
        dlr += tl.sum(dMlr * M, 0)
        # the gate gradients feed nothing in this chain: `_lmm_bwd_gates_kernel` takes them
        # afterwards from what is stored here (the retrieval's shares overwritten)
        tl.store(_token_tile(pmlr_ptr, tok, rows, C), dM, mask=hmask)
        if HAS_ETA:
            tl.store(pde_ptr + tok, dde, mask=rmask)
        # the token tiles and addresses rebuilt for the rest of the step, from a key of their
        # own (see `state_tiles_at`), rather than held from the top through both layers'
        # products; the key that keeps ptxas from merging the copies best differs by dot
        # precision (sm_90 spill stores per step with `opaque_index` on the segment index:
        # bf16 8 -> 0, tf32 10 -> 0 with the rebuild before the last stores;
        # benchmarks/results/NOTES.md)
        late = nxt if PREC == "tf32" else cur
        rows, cd, ch, _, _, _, _, _ = step_tiles(late, d, hdim, C, D, HID, EXACT)
        n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
        hmask = rmask[:, None]
        # learning rate: lr = theta * min(1, clip / max(|u|, 1e-12)), |u|^2 = sq
        tl.store(dtheta_ptr + tok, (dlr * f).to(dtheta_ptr.dtype.element_ty), mask=rmask)
        if HAS_CLIP:
            dratio = tl.where(ratio <= 1.0, dlr * theta, 0.0)
            dnrm = tl.where(nrm >= 1e-12, -dratio * clip / (nrm_c * nrm_c), 0.0)
            dsq = tl.where(nrm > 0.0, dnrm / (2.0 * tl.maximum(nrm, 1e-30)), 0.0)
            k, a1, _, d1, d2, _, _ = _stored_inner(
                k_ptr, xoff, xmask, iz1_ptr, ie1_ptr, id2_ptr, tok, ch, cd, hmask,
                HID, D, DEPTH, ACT,
            )  # fmt: skip
            k2, n1, a2, n2, _ = squared_norms(k, a1, d1, d2, DEPTH)
            dd1 += (2.0 * dsq * k2)[:, None] * d1
            dk += (2.0 * dsq * n1)[:, None] * k
            if DEPTH == 2:
                dd2 += (2.0 * dsq * a2)[:, None] * d2
                da1 += (2.0 * dsq * n2)[:, None] * a1

        # ---- the inner forward/backward at the gradient weights, layer 2 then 1; their
        # share goes to the state gradient (the gradient weights are the entry weights)
        # unless they are the separate g0 ----
        shared = (1 - sep).to(tl.float32)
        if LAST_DG:  # gradient w.r.t. the chunk-entry weights the final state exposes
            lastseg = tl.where(seg == n_seg - 1, 1, 0)
        p1, m1, p2, m2 = state_tiles_at(cbase, d, hdim, D, HID, EXACT)
        wg1 = segment_weights(cw1_ptr + cbase, g01_ptr + base, p1, m1, sep, FIRST_G0)
        if DEPTH == 2:
            # z1, act'(z1) and e1 read or computed again: held from the top, they would
            # cost registers through the whole segment
            wg2 = segment_weights(cw2_ptr + cbase, g02_ptr + base, p2, m2, sep, FIRST_G0)
            k, a1, g1p, _, d2, z1, e1 = _stored_inner(
                k_ptr, xoff, xmask, iz1_ptr, ie1_ptr, id2_ptr, tok, ch, cd, hmask,
                HID, D, DEPTH, ACT,
            )  # fmt: skip
            de1 = dd1 * g1p
            dz1 = dd1 * e1 * ddact(z1, ACT)
            dd2 += mm(de1, tl.trans(wg2), PREC)
            dout = 2.0 * dd2
            dv = -dout
            da1 += mm(dout, wg2, PREC)
            dwg2 = mm(tl.trans(d2), de1, PREC) + mm(tl.trans(dout), a1, PREC)
            dz1 += da1 * g1p
            if LAST_DG:
                dwg2 += tl.load(dgl2_ptr + base + p2, mask=m2 & (p2 * 0 + lastseg == 1), other=0.0)
            tl.debug_barrier()  # the retrieval's share of dW2, stored above, is visible
            dws2 = tl.load(dw2_ptr + nxt + p2, mask=m2, other=0.0)
            tl.store(dw2_ptr + nxt + p2, dws2 + shared * dwg2, mask=m2)
            tl.store(dg02_ptr + base + p2, dwg2, mask=m2 & (p2 * 0 + sep == 1))
        else:
            dz1 = 2.0 * dd1
            dv = -dz1
        dk += mm_by_state(dz1, wg1, PREC, FLIP)
        dwg1 = mm(tl.trans(dz1), k, PREC)
        if LAST_DG:
            dwg1 += tl.load(dgl1_ptr + base + p1, mask=m1 & (p1 * 0 + lastseg == 1), other=0.0)
        tl.debug_barrier()
        dws1 = tl.load(dw1_ptr + nxt + p1, mask=m1, other=0.0)
        tl.store(dw1_ptr + nxt + p1, dws1 + shared * dwg1, mask=m1)
        tl.store(dg01_ptr + base + p1, dwg1, mask=m1 & (p1 * 0 + sep == 1))

        rows, cd, ch, _, _, _, _, _ = step_tiles(cur, d, hdim, C, D, HID, EXACT)
        n, rmask, tok, xmask, xoff = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
        tl.store(dkout_ptr + xoff, dk.to(dkout_ptr.dtype.element_ty), mask=xmask)
        tl.store(dv_ptr + xoff, dv.to(dv_ptr.dtype.element_ty), mask=xmask)
        tl.debug_barrier()  # the next segment reads the state gradient just written


@triton.jit
def _end_scalar_products(cw_ptr, cs_ptr, pw_ptr, ps_ptr, cbase, p, m, HAS_ETA: tl.constexpr):
    """One layer's share of d loss / d A_n, b_n, P_n, the end-of-segment scalars of W' =
    A_n Ws + b_n Ss - ... and S' = P_n Ss - ...: (<dW', Ws>, <dW', Ss>, <dS', Ss>), with the
    entry state at cw/cs + cbase and dW', dS' (as the sequential pass handed them on) at
    pw/ps + cbase; p, m: the tile's offsets and mask."""
    dwn = tl.load(pw_ptr + cbase + p, mask=m, other=0.0)
    dA_n = tl.sum(dwn * tl.load(cw_ptr + cbase + p, mask=m, other=0.0))
    db_n = 0.0
    dP_n = 0.0
    if HAS_ETA:
        ss = tl.load(cs_ptr + cbase + p, mask=m, other=0.0)
        db_n = tl.sum(dwn * ss)
        dP_n = tl.sum(tl.load(ps_ptr + cbase + p, mask=m, other=0.0) * ss)
    return dA_n, db_n, dP_n


@triton.jit
def _lmm_bwd_gates_kernel(
    eta_ptr, alpha_ptr, cw1_ptr, cw2_ptr, cs1_ptr, cs2_ptr, pw1_ptr, pw2_ptr, ps1_ptr, ps2_ptr,
    pmlr_ptr, pa_ptr, pbb_ptr, pde_ptr, deta_ptr, dalpha_ptr,
    T, TS, H, d, hdim, offset, n_seg,
    C: tl.constexpr, D: tl.constexpr, HID: tl.constexpr, DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr, EXACT: tl.constexpr,
):  # fmt: skip
    # grid (B * H, n_seg): one segment per program. In: the gates [B, T, H], the entry
    # states per segment [B, H, n_seg, out, in] and what the sequential pass stored:
    # the gradients w.r.t. each segment's M [B, T, H, C] (row t of its [C, C]),
    # A, bb (without the end-of-segment scalars' shares) and De's last row [B, T, H], and
    # the gradients w.r.t. the state after each segment, pw / ps like the entry states.
    # Out: d eta, d alpha [B, T, H] (`gate_adjoint`); the decays are recomputed from the
    # gates. The gates and their gradients are token ranges of [B, TS, H] buffers
    # (`batch_shift`), the scratch dense
    pid = tl.program_id(0)
    seg = tl.program_id(1)
    shift = batch_shift(T, TS, H)
    eta_ptr, alpha_ptr = eta_ptr + shift, alpha_ptr + shift
    deta_ptr, dalpha_ptr = deta_ptr + shift, dalpha_ptr + shift
    rows = tl.arange(0, C)
    cd = tl.arange(0, D)
    causal = rows[:, None] >= rows[None, :]
    n, rmask, tok, _, _ = segment_tokens(pid, seg, rows, cd, T, T, H, d, offset, C)
    last = rows == n - 1
    cbase = (pid.to(tl.int64) * n_seg + seg) * (hdim * d)
    p1, m1, p2, m2 = state_tiles(d, hdim, D, HID, EXACT)
    dA_n, db_n, dP_n = _end_scalar_products(
        cw1_ptr, cs1_ptr, pw1_ptr, ps1_ptr, cbase, p1, m1, HAS_ETA
    )
    if DEPTH == 2:
        dA_2, db_2, dP_2 = _end_scalar_products(
            cw2_ptr, cs2_ptr, pw2_ptr, ps2_ptr, cbase, p2, m2, HAS_ETA
        )
        dA_n += dA_2
        db_n += db_2
        dP_n += dP_2
    alpha, eta, Da, A, De, P, _, _ = segment_decays(
        alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA
    )
    dM = tl.load(_token_tile(pmlr_ptr, tok, rows, C), mask=rmask[:, None], other=0.0)
    dA = tl.load(pa_ptr + tok, mask=rmask, other=0.0) + tl.where(last, dA_n, 0.0)
    dbb = dA
    dde = dA
    dP = tl.where(last, dP_n, 0.0)
    if HAS_ETA:
        dbb = tl.load(pbb_ptr + tok, mask=rmask, other=0.0) + tl.where(last, db_n, 0.0)
        dde = tl.load(pde_ptr + tok, mask=rmask, other=0.0)
    deta, dalpha = gate_adjoint(
        dM, dA, dbb, dde, dP, alpha, eta, Da, A, De, P, rmask, rows, last, HAS_ETA, HAS_ALPHA
    )
    if HAS_ETA:
        tl.store(deta_ptr + tok, deta.to(deta_ptr.dtype.element_ty), mask=rmask)
    if HAS_ALPHA:
        tl.store(dalpha_ptr + tok, dalpha.to(dalpha_ptr.dtype.element_ty), mask=rmask)


@dataclasses.dataclass(frozen=True)
class RetrievalPass:
    """One range's retrieval pass, launched, and what the state pass over the range takes
    from it (`retrieval_pass`, `state_pass`): the kernels' tensor arguments and sizes."""

    inputs: tuple  # q, k, v, theta, eta, alpha, dy, entry W1, W2, S1, S2, g0 1, 2
    outputs: tuple  # dk, dv, dtheta, deta, dalpha where the state and gates passes write
    dk_share: torch.Tensor  # the retrieval's share of dk, fp32 [B, T, H, d]
    partials: tuple  # its shares of dd1, dd2, da1, dMlr, dA, dbb
    tiles: tuple  # its shares of the entry states' gradients, per segment
    gates: tuple  # the gradient w.r.t. De's last row (the state pass writes it)
    inner: tuple  # the inner forward/backward's tiles z1, e1, d2 and norms
    sizes: tuple  # T, TS, H, d, hdim, offset, n_seg
    clip: float
    shapes: dict  # the kernels' compile-time constants
    has_g0: bool

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the state pass reads or writes (for stream bookkeeping)."""
        groups = (self.inputs, self.outputs, self.partials, self.tiles, self.gates, self.inner)
        return [x for group in groups for x in group if x is not None] + [self.dk_share]


def retrieval_pass(
    q, k, v, theta, eta, alpha, dy, entry_weights, entry_momentum, g0, offset: int,
    chunk_size: int, activation: str, inner_grad_clip: float | None, input_precision: str,
    grads,
) -> RetrievalPass:  # fmt: skip
    """The retrieval's adjoint over one range of segments, the first of the range's
    backward passes, in one launch parallel over segments (`_lmm_bwd_retrieval_kernel`): dq
    whole, and the retrieval's shares of the rest in scratch, with the inner
    forward/backward's tiles (about 3 D + 4 HID + C + 3 floats per token and one state per
    segment). It needs only the segments' entry states, not the gradient carried from the
    range after, so a range's pass may run while `state_pass` walks the range after it.

    q, k, v, dy: [B, T, H, d] (this range); theta/eta/alpha: [B, T, H] (eta/alpha may be
    None); entry_weights / entry_momentum: per layer [B, H, n_seg, out, in] fp32, the state
    entering every segment of the range; g0: per layer [B, H, out, in], separate gradient
    weights of segment 0 (a range that starts inside a chunk) or None. grads: where the
    passes write (dq, dk, dv, dtheta, deta, dalpha) ([B, T, H, d] / [B, T, H], any float
    dtype; None for absent gates): token ranges of buffers of the inputs' length
    (`token_stride`; the backward writes into its full-length gradients through views,
    without a copy per range)."""
    B, T, H, d = q.shape
    depth = len(entry_weights)
    hdim = entry_weights[0].shape[-2] if depth == 2 else d
    n_seg = entry_weights[0].shape[2]
    f32 = dict(dtype=torch.float32, device=q.device)
    xs = (q, k, v, theta, eta, alpha, dy)
    TS = token_stride((*xs, *grads))
    if TS is None:
        raise ValueError(
            "the inputs, dy and grads must be token ranges of buffers of one length "
            f"(strides {[None if x is None else x.stride() for x in (*xs, *grads)]})"
        )
    dq = grads[0]
    # the retrieval's share of dk, which the sequential pass adds to: fp32 scratch
    dk = torch.empty(B, T, H, d, **f32)

    dummy = entry_weights[0]  # an unused pointer
    D, HID = pow2(d), pow2(hdim)
    shapes = launch_constants(
        chunk_size, d, hdim, depth, eta, alpha, inner_grad_clip, activation, input_precision
    )
    shapes["FIRST_G0"] = g0 is not None
    shapes["maxnreg"] = BACKWARD_MAX_REGISTERS
    inputs = (
        q,
        k,
        v,
        theta,
        theta if eta is None else eta,
        theta if alpha is None else alpha,
        dy,
        entry_weights[0],
        second_layer(entry_weights, depth),
        entry_momentum[0],
        second_layer(entry_momentum, depth),
        dummy if g0 is None else g0[0],
        dummy if g0 is None else second_layer(g0, depth),
    )
    clip = float(inner_grad_clip or 0.0)
    # the retrieval's shares (see `_lmm_bwd_retrieval_kernel`): per token, then per
    # segment like the entry states
    # (what depth 1 or no momentum never touches is the unused `dummy`)
    dd1 = torch.empty(B, T, H, HID, **f32)
    dd2, da1 = (torch.empty(B, T, H, w, **f32) for w in (D, HID))
    if depth == 1:
        dd2, da1 = dummy, dummy
    dmlr = torch.empty(B, T, H, chunk_size, **f32)
    dA = torch.empty(B, T, H, **f32)
    dbb = dummy if eta is None else torch.empty(B, T, H, **f32)
    pw = tuple(torch.empty_like(w) for w in entry_weights)
    ps = pw if eta is None else tuple(torch.empty_like(s) for s in entry_momentum)
    partials = (dd1, dd2, da1, dmlr, dA, dbb)
    tiles = (pw[0], second_layer(pw, depth), ps[0], second_layer(ps, depth))
    # the gradient w.r.t. De's last row, for `_lmm_bwd_gates_kernel`
    gates = (dummy if eta is None else torch.empty(B, T, H, **f32),)
    # the inner forward/backward's tiles z1, e1, d2 (depth 1: e1 only) and norms
    inner = tuple(torch.empty(B, T, H, w, **f32) for w in (HID, HID, D))
    if depth == 1:
        inner = (dummy, inner[1], dummy)
    inner += (dummy if inner_grad_clip is None else torch.empty(B, T, H, **f32),)
    _lmm_bwd_retrieval_kernel[(B * H, n_seg)](
        *inputs, dq, dk, *partials, *tiles, *inner, T, TS, H, d, hdim, offset, n_seg, clip,
        **shapes,
    )  # fmt: skip
    return RetrievalPass(
        inputs=inputs,
        outputs=tuple(grads[1:]),
        dk_share=dk,
        partials=partials,
        tiles=tiles,
        gates=gates,
        inner=inner,
        sizes=(T, TS, H, d, hdim, offset, n_seg),
        clip=clip,
        shapes=shapes,
        has_g0=g0 is not None,
    )


def state_pass(rp: RetrievalPass, carried_weights, carried_momentum, parity: int, dG_last):
    """The state's and the gates' adjoints over the range of `rp` (its retrieval pass,
    which must have run first): the sequential pass (one program per (batch, head)) walks
    its segments last first, then the gates' pass runs parallel over segments. Writes dk,
    dv, dtheta, deta, dalpha into `rp.outputs`.

    carried_weights / carried_momentum: per layer [2, B, H, out, in] fp32 (`two_slots`),
    slot `parity` holding the gradient w.r.t. the state after the range; the kernel reads
    and writes the two slots by turns and leaves the gradient w.r.t. the state before the
    range in slot (parity + n_seg) % 2, the next range's parity (a walk over ranges keeps
    one pair of buffers); dG_last: gradient w.r.t. the gradient weights of the last
    segment, or None. Returns dG0 (per layer, or None without g0)."""
    T, TS, H, d, hdim, offset, n_seg = rp.sizes
    B = rp.inputs[0].shape[0]
    depth = rp.shapes["DEPTH"]
    dk_out, dv, dtheta, deta, dalpha = rp.outputs
    dG0 = None if not rp.has_g0 else tuple(torch.zeros_like(w[0]) for w in carried_weights)
    dW2, dS2 = carried_weights, carried_momentum

    dummy = dW2[0]  # an unused pointer
    inputs, partials, tiles = rp.inputs, rp.partials, rp.tiles
    _lmm_bwd_kernel[(B * H,)](
        inputs[1],  # k and the gates: q, v and dy were the retrieval pass's
        *inputs[3:6],
        *inputs[7:],
        dW2[0],
        second_layer(dW2, depth),
        dS2[0],
        second_layer(dS2, depth),
        dummy if dG_last is None else dG_last[0],
        dummy if dG_last is None else second_layer(dG_last, depth),
        dummy if dG0 is None else dG0[0],
        dummy if dG0 is None else second_layer(dG0, depth),
        rp.dk_share,
        dk_out,
        dv,
        dtheta,
        *partials[:4],  # d A and d bb: the retrieval's, for the gates pass
        *tiles,
        *rp.gates,
        *rp.inner,
        T,
        TS,
        H,
        d,
        hdim,
        offset,
        n_seg,
        dW2[0][0].numel(),
        parity,
        rp.clip,
        LAST_DG=dG_last is not None,
        PTX=not interpreter_active(),
        **rp.shapes,
    )
    if rp.shapes["HAS_ETA"] or rp.shapes["HAS_ALPHA"]:
        # (pw / ps now hold the gradients w.r.t. the state after each segment)
        _lmm_bwd_gates_kernel[(B * H, n_seg)](
            inputs[4],
            inputs[5],
            *inputs[7:11],
            *tiles,
            *partials[3:],
            *rp.gates,
            dtheta if deta is None else deta,
            dtheta if dalpha is None else dalpha,
            T,
            TS,
            H,
            d,
            hdim,
            offset,
            n_seg,
            **{name: rp.shapes[name] for name in GATES_CONSTEXPRS},
            num_warps=GATES_NUM_WARPS,
            num_stages=NUM_STAGES,
        )
    return dG0
