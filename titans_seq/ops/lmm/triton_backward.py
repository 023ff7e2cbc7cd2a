"""Fused Triton backward kernel of the Titans memory op (memory depth 1 and 2).

One program per (batch, head) walks the chunk segments of a range of the sequence in
reverse. For each segment it loads the weights and momentum entering it (regenerated per
segment by the forward kernel from the sparse checkpoints, see `triton_autograd.py`),
recomputes the segment's forward quantities (inner forward/backward, clip factor, decays,
dual-form retrieval) and back-propagates, in the same pass, the gradient of the output
rows and of the state leaving the segment to q, k, v, theta, eta, alpha and to the state
entering it. The gradient w.r.t. the running state (dW, dS; fp32) is carried between
segments in global memory in two slots, like the forward's state, and the segment works
through one layer's tiles at a time.

The formulas are the hand-derived adjoint of `chunked._run_chunk` (written out in
docs/architecture.md); the tests compare them with the token-by-token reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_forward import ACT_CODES, NUM_STAGES, _pow2, _two_slots, num_warps
from .triton_helpers import (
    act,
    clipped_rate,
    dact,
    ddact,
    inner_errors,
    inner_hidden,
    log_gate_gradient,
    mm,
    segment_decays,
    segment_weights,
    squared_norms,
    state_tiles,
)


@triton.jit
def _lmm_bwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    theta_ptr,
    eta_ptr,
    alpha_ptr,
    dy_ptr,
    cw1_ptr,
    cw2_ptr,
    cs1_ptr,
    cs2_ptr,
    g01_ptr,
    g02_ptr,
    dw1_ptr,
    dw2_ptr,
    ds1_ptr,
    ds2_ptr,
    dgl1_ptr,
    dgl2_ptr,
    dg01_ptr,
    dg02_ptr,
    dq_ptr,
    dk_ptr,
    dv_ptr,
    dtheta_ptr,
    deta_ptr,
    dalpha_ptr,
    T,
    H,
    d,
    hdim,
    offset,
    n_seg,
    slot,
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
    FIRST_G0: tl.constexpr,
    LAST_DG: tl.constexpr,
    PREC: tl.constexpr,
):
    # inputs [B, T, H, d] / [B, T, H] contiguous (T: this range); entry states per segment
    # [B, H, n_seg, out, in]; carried dW, dS [2, B, H, out, in], two slots `slot` elements
    # apart: step s reads the gradient w.r.t. the state after its segment from slot s % 2
    # and writes the one w.r.t. the state before it to the other (in: slot 0 holds the
    # gradient w.r.t. the state after the range; out: slot n_seg % 2, before it); g0 / dg0:
    # separate gradient weights of the first segment (a range that starts inside a chunk);
    # dgl: gradient w.r.t. the gradient weights of the last segment; input gradients fp32,
    # same layouts as the inputs
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, C)
    cd = tl.arange(0, D)
    causal = rows[:, None] >= rows[None, :]
    size = hdim * d
    base = pid.to(tl.int64) * size
    p1, m1, p2, m2 = state_tiles(d, hdim, D, HID, EXACT)  # layer 1 [hdim, d], 2 [d, hdim]

    # A segment holds one layer's state tiles at a time (weights, momentum, their carried
    # gradients): recompute the inner gradient (layer 1, then 2), back-propagate the
    # retrieval and the end-of-segment state through layer 2, then layer 1, writing each
    # layer's state gradient as soon as it is known, then the decays and the clip, and
    # last the inner forward/backward (layer 2, then 1), adding the gradient weights'
    # share to the stored state gradient. Tiles are re-read from global memory (L1/L2
    # hits) rather than kept live: with every tile live, ptxas spills.
    for step in range(n_seg):
        seg = n_seg - 1 - step
        t0 = tl.maximum(seg * C - offset, 0)
        t1 = tl.minimum((seg + 1) * C - offset, T)
        n = t1 - t0
        rmask = rows < n
        last = rows == n - 1
        tok = (b * T + t0 + rows).to(tl.int64) * H + h
        xmask = rmask[:, None] & (cd[None, :] < d)
        xoff = tok[:, None] * d + cd[None, :]
        q = tl.load(q_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        theta = tl.load(theta_ptr + tok, mask=rmask, other=0.0).to(tl.float32)
        cbase = (pid.to(tl.int64) * n_seg + seg) * size
        # 1 where this segment's gradient weights are the separate g0, not its entry weights
        sep = seg * 0
        if FIRST_G0:
            sep = tl.where(seg == 0, 1, 0)

        # ---- recompute the segment (as in the forward kernel) ----
        wg1 = segment_weights(cw1_ptr + cbase, g01_ptr + base, p1, m1, sep, FIRST_G0)
        z1, a1, g1p = inner_hidden(k, wg1, DEPTH, ACT, PREC)  # z1, g1p: dead after d1
        wg2 = wg1  # not read at depth 1
        if DEPTH == 2:
            wg2 = segment_weights(cw2_ptr + cbase, g02_ptr + base, p2, m2, sep, FIRST_G0)
        _, d1, d2 = inner_errors(z1, a1, g1p, v, wg2, DEPTH, PREC)
        k2, n1, a2, n2, sq = squared_norms(k, a1, d1, d2, DEPTH)
        lr, f, nrm, nrm_c, ratio = clipped_rate(theta, sq, clip, HAS_CLIP)
        alpha, eta, Da, A, De, P, M, bb = segment_decays(
            alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA, PREC
        )
        Mlr = M * lr[None, :]
        a_last = tl.sum(tl.where(last, A, 0.0), 0)
        m_last = tl.sum(tl.where(last[:, None], Mlr, 0.0), 0)
        if HAS_ETA:
            de_last = tl.sum(tl.where(last[:, None], De, 0.0), 0)
            c_last = de_last * lr
            b_last = tl.sum(tl.where(last, bb, 0.0), 0)
            p_last = tl.sum(tl.where(last, P, 0.0), 0)
        else:
            c_last = tl.where(last, lr, 0.0)
            b_last, p_last = 0.0, 0.0  # not read without momentum

        cur = base + (step % 2) * slot  # the carried gradients read
        nxt = base + ((step + 1) % 2) * slot  # and written
        # accumulators over both layers: d loss / d A, Mlr, bb, the last row's m, c and the
        # end-of-segment scalars A_n, b_n, P_n
        dA = tl.zeros([C], tl.float32)
        dMlr = tl.zeros([C, C], tl.float32)
        dbb = tl.zeros([C], tl.float32)
        dm = tl.zeros([C], tl.float32)
        dc = tl.zeros([C], tl.float32)
        dA_n = 0.0
        db_n = 0.0
        dP_n = 0.0

        # layer 1 of the retrieval: z = A (q Ws1^T) + bb (q Ss1^T) - R1 d1
        G1 = mm(q, tl.trans(k), PREC)
        R1 = Mlr * G1
        ws1 = tl.load(cw1_ptr + cbase + p1, mask=m1, other=0.0)
        z = A[:, None] * mm(q, tl.trans(ws1), PREC) - mm(R1, d1, PREC)
        if HAS_ETA:
            ss1 = tl.load(cs1_ptr + cbase + p1, mask=m1, other=0.0)
            z += bb[:, None] * mm(q, tl.trans(ss1), PREC)
        dy = tl.load(dy_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)

        # ---- backward through layer 2: y = A (x2 Ws2^T) + bb (x2 Ss2^T) - R2 d2, and
        # W2' = A_n Ws2 + b_n Ss2 - (d2 * m)^T a1, S2' = P_n Ss2 - (d2 * c)^T a1; the
        # weights' part, then the momentum's, each state gradient stored when complete
        # (dW2 without the gradient weights' share, added at the end) ----
        if DEPTH == 2:
            x2 = act(z, ACT)
            G2 = mm(x2, tl.trans(a1), PREC)
            dR2 = -mm(dy, tl.trans(d2), PREC)
            dd2 = -mm(tl.trans(Mlr * G2), dy, PREC)
            dMlr += dR2 * G2
            dG2 = dR2 * Mlr
            dx2 = mm(dG2, a1, PREC)
            da1 = mm(tl.trans(dG2), x2, PREC)
            dx2, da1, dd2, dA, dbb, dm, dc, dA_n, db_n, dP_n = _layer_state_adjoint(
                cw2_ptr, cs2_ptr, dw2_ptr, ds2_ptr, cbase, cur, nxt, p2, m2, x2, dy, a1, d2,
                A, bb, a_last, b_last, p_last, m_last, c_last,
                dx2, da1, dd2, dA, dbb, dm, dc, dA_n, db_n, dP_n, HAS_ETA, PREC,
            )  # fmt: skip
            dz = dx2 * dact(z, ACT)
        else:
            dz = dy

        # ---- backward through layer 1: z = A (q Ws1^T) + bb (q Ss1^T) - R1 d1, and
        # W1' = A_n Ws1 + b_n Ss1 - (d1 * m)^T k, S1' = P_n Ss1 - (d1 * c)^T k ----
        dR1 = -mm(dz, tl.trans(d1), PREC)
        dd1 = -mm(tl.trans(R1), dz, PREC)
        dMlr += dR1 * G1
        dG1 = dR1 * Mlr
        dq = mm(dG1, k, PREC)
        dk = mm(tl.trans(dG1), q, PREC)
        dq, dk, dd1, dA, dbb, dm, dc, dA_n, db_n, dP_n = _layer_state_adjoint(
            cw1_ptr, cs1_ptr, dw1_ptr, ds1_ptr, cbase, cur, nxt, p1, m1, q, dz, k, d1,
            A, bb, a_last, b_last, p_last, m_last, c_last,
            dq, dk, dd1, dA, dbb, dm, dc, dA_n, db_n, dP_n, HAS_ETA, PREC,
        )  # fmt: skip
        tl.store(dq_ptr + xoff, dq, mask=xmask)  # complete: nothing below adds to dq

        # ---- the end-of-segment scalars, the decays and the clip ----
        dA += tl.where(last, dA_n, 0.0)
        dMlr += tl.where(last[:, None], dm[None, :], 0.0)
        if HAS_ETA:
            dbb += tl.where(last, db_n, 0.0)
            dP = tl.where(last, dP_n, 0.0)
            dlr = dc * de_last
            dDe = tl.where(last[:, None], (dc * lr)[None, :], 0.0)
        else:
            dlr = tl.where(last, dc, 0.0)
        # Mlr = M lr, M = Da De, bb = Da P, Da/De/A/P from cumulative log gates
        dM = dMlr * lr[None, :]
        dlr += tl.sum(dMlr * M, 0)
        if HAS_ETA:
            dDa = mm(dM, tl.trans(De), PREC) + dbb[:, None] * P[None, :]
            dDe += mm(tl.trans(Da), dM, PREC)
            dP += tl.sum(Da * dbb[:, None], 0)
            dle = log_gate_gradient(dDe, De, dP, P, rmask, rows)
            # both branches are evaluated: no 0 / 0 where eta = 0 (padding)
            deta = tl.where(eta > 1e-30, dle / tl.maximum(eta, 1e-30), 0.0)
            tl.store(deta_ptr + tok, deta, mask=rmask)
        else:
            dDa = dM
        if HAS_ALPHA:
            dla = log_gate_gradient(dDa, Da, dA, A, rmask, rows)
            keep = 1.0 - alpha
            dalpha = tl.where(keep > 1e-30, -dla / keep, 0.0)
            tl.store(dalpha_ptr + tok, dalpha, mask=rmask)
        # learning rate: lr = theta * min(1, clip / max(|u|, 1e-12)), |u|^2 = sq
        tl.store(dtheta_ptr + tok, dlr * f, mask=rmask)
        if HAS_CLIP:
            dratio = tl.where(ratio <= 1.0, dlr * theta, 0.0)
            dnrm = tl.where(nrm >= 1e-12, -dratio * clip / (nrm_c * nrm_c), 0.0)
            dsq = tl.where(nrm > 0.0, dnrm / (2.0 * tl.maximum(nrm, 1e-30)), 0.0)
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
        wg1 = segment_weights(cw1_ptr + cbase, g01_ptr + base, p1, m1, sep, FIRST_G0)
        if DEPTH == 2:
            # z1, act'(z1) and e1 computed again: held from the top, they would cost
            # registers through the whole segment
            z1 = mm(k, tl.trans(wg1), PREC)
            g1p = dact(z1, ACT)
            wg2 = segment_weights(cw2_ptr + cbase, g02_ptr + base, p2, m2, sep, FIRST_G0)
            de1 = dd1 * g1p
            dz1 = dd1 * mm(d2, wg2, PREC) * ddact(z1, ACT)
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
        dk += mm(dz1, wg1, PREC)
        dwg1 = mm(tl.trans(dz1), k, PREC)
        if LAST_DG:
            dwg1 += tl.load(dgl1_ptr + base + p1, mask=m1 & (p1 * 0 + lastseg == 1), other=0.0)
        tl.debug_barrier()
        dws1 = tl.load(dw1_ptr + nxt + p1, mask=m1, other=0.0)
        tl.store(dw1_ptr + nxt + p1, dws1 + shared * dwg1, mask=m1)
        tl.store(dg01_ptr + base + p1, dwg1, mask=m1 & (p1 * 0 + sep == 1))

        tl.store(dk_ptr + xoff, dk, mask=xmask)
        tl.store(dv_ptr + xoff, dv, mask=xmask)
        tl.debug_barrier()  # the next segment reads the state gradient just written


@triton.jit
def _layer_state_adjoint(
    cw_ptr, cs_ptr, dw_ptr, ds_ptr, cbase, cur, nxt, p, m, X, dZ, h, delta,
    A, bb, a_last, b_last, p_last, m_last, c_last,
    dX, dh, ddelta, dA, dbb, dm, dc, dA_n, db_n, dP_n,
    HAS_ETA: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """The adjoint of one layer's state terms in a segment: of the retrieval's
    A (X Ws^T) + bb (X Ss^T) given its gradient dZ [C, out] at input rows X [C, in], and of
    the state after the segment, W' = A_n Ws + b_n Ss - (delta * m)^T h and
    S' = P_n Ss - (delta * c)^T h, given the carried gradients dW', dS' (slot `cur`).
    Writes the gradient w.r.t. the entry momentum (complete) and w.r.t. the entry weights
    (without the gradient weights' share) to slot `nxt`. Ws, Ss: the entry state (the
    regenerated checkpoint at `cbase`); h [C, in], delta [C, out]: the layer's inner inputs
    and errors. Adds its share to the accumulated gradients w.r.t. X, h, delta ([C, .]),
    A, bb, m, c ([C]) and the end-of-segment scalars A_n, b_n, P_n, and returns them. Each
    tile is read when first needed, so the layer holds as few as it can at once."""
    ws = tl.load(cw_ptr + cbase + p, mask=m, other=0.0)
    dA += tl.sum(dZ * mm(X, tl.trans(ws), PREC), 1)
    dX += A[:, None] * mm(dZ, ws, PREC)
    dwn = tl.load(dw_ptr + cur + p, mask=m, other=0.0)
    dA_n += tl.sum(dwn * ws)
    tl.store(dw_ptr + nxt + p, mm(tl.trans(A[:, None] * dZ), X, PREC) + a_last * dwn, mask=m)
    hW = mm(h, tl.trans(dwn), PREC)
    ddelta -= m_last[:, None] * hW
    dh -= mm(delta * m_last[:, None], dwn, PREC)
    dm -= tl.sum(delta * hW, 1)
    dsn = tl.load(ds_ptr + cur + p, mask=m, other=0.0)
    hS = mm(h, tl.trans(dsn), PREC)
    ddelta -= c_last[:, None] * hS
    dh -= mm(delta * c_last[:, None], dsn, PREC)
    dc -= tl.sum(delta * hS, 1)
    if HAS_ETA:
        ss = tl.load(cs_ptr + cbase + p, mask=m, other=0.0)
        dbb += tl.sum(dZ * mm(X, tl.trans(ss), PREC), 1)
        dX += bb[:, None] * mm(dZ, ss, PREC)
        db_n += tl.sum(dwn * ss)
        dP_n += tl.sum(dsn * ss)
        dss = mm(tl.trans(bb[:, None] * dZ), X, PREC) + b_last * dwn + p_last * dsn
    else:
        dss = tl.zeros_like(dwn)
    tl.store(ds_ptr + nxt + p, dss, mask=m)
    return dX, dh, ddelta, dA, dbb, dm, dc, dA_n, db_n, dP_n


def lmm_backward_triton(
    q,
    k,
    v,
    theta,
    eta,
    alpha,
    dy,
    entry_weights,
    entry_momentum,
    g0,
    dW,
    dS,
    dG_last,
    offset: int,
    chunk_size: int,
    activation: str,
    inner_grad_clip: float | None,
    input_precision: str = "ieee",
):
    """Backward over one range of segments.

    q, k, v, dy: [B, T, H, d] (this range); theta/eta/alpha: [B, T, H] (eta/alpha may be
    None); entry_weights / entry_momentum: per layer [B, H, n_seg, out, in] fp32, the state
    entering every segment of the range; g0: per layer [B, H, out, in], separate gradient
    weights of segment 0 (a range that starts inside a chunk) or None; dW, dS: per layer
    [B, H, out, in] fp32, the gradient w.r.t. the state after the range, overwritten in place
    with the gradient w.r.t. the state before it; dG_last: gradient w.r.t. the gradient
    weights of the last segment, or None.

    Returns (dq, dk, dv, dtheta, deta, dalpha) in fp32 (None for absent gates) and dG0
    (per layer, or None without g0).
    """
    B, T, H, d = q.shape
    depth = len(entry_weights)
    hdim = entry_weights[0].shape[-2] if depth == 2 else d
    n_seg = entry_weights[0].shape[2]
    q, k, v, dy = (x.contiguous() for x in (q, k, v, dy))
    theta = theta.contiguous()
    eta = None if eta is None else eta.contiguous()
    alpha = None if alpha is None else alpha.contiguous()
    f32 = dict(dtype=torch.float32, device=q.device)
    dq, dk, dv = (torch.empty(B, T, H, d, **f32) for _ in range(3))
    dtheta = torch.empty(B, T, H, **f32)
    deta = None if eta is None else torch.empty(B, T, H, **f32)
    dalpha = None if alpha is None else torch.empty(B, T, H, **f32)
    dG0 = None if g0 is None else tuple(torch.zeros_like(w) for w in dW)
    dW2 = tuple(_two_slots(w) for w in dW)  # the kernel reads and writes them by turns
    dS2 = tuple(_two_slots(s) for s in dS)

    def layer2(xs):
        return xs[1] if depth == 2 else xs[0]

    dummy = dW[0]
    D, HID = _pow2(d), _pow2(hdim)
    _lmm_bwd_kernel[(B * H,)](
        q,
        k,
        v,
        theta,
        theta if eta is None else eta,
        theta if alpha is None else alpha,
        dy,
        entry_weights[0],
        layer2(entry_weights),
        entry_momentum[0],
        layer2(entry_momentum),
        dummy if g0 is None else g0[0],
        dummy if g0 is None else layer2(g0),
        dW2[0],
        layer2(dW2),
        dS2[0],
        layer2(dS2),
        dummy if dG_last is None else dG_last[0],
        dummy if dG_last is None else layer2(dG_last),
        dummy if dG0 is None else dG0[0],
        dummy if dG0 is None else layer2(dG0),
        dq,
        dk,
        dv,
        dtheta,
        dtheta if deta is None else deta,
        dtheta if dalpha is None else dalpha,
        T,
        H,
        d,
        hdim,
        offset,
        n_seg,
        dW[0].numel(),
        float(inner_grad_clip or 0.0),
        C=chunk_size,
        D=D,
        HID=HID,
        DEPTH=depth,
        HAS_ETA=eta is not None,
        HAS_ALPHA=alpha is not None,
        HAS_CLIP=inner_grad_clip is not None,
        EXACT=(D, HID) == (d, hdim),
        ACT=ACT_CODES[activation],
        FIRST_G0=g0 is not None,
        LAST_DG=dG_last is not None,
        PREC=input_precision,
        num_warps=num_warps(D, HID),
        num_stages=NUM_STAGES,
    )
    for out, slots in zip((*dW, *dS), (*dW2, *dS2)):
        out.copy_(slots[n_seg % 2])
    return (dq, dk, dv, dtheta, deta, dalpha), dG0
