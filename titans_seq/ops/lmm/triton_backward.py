"""Fused Triton backward kernel of the Titans memory op (memory depth 1 and 2).

One program per (batch, head) walks the chunk segments of a range of the sequence in
reverse. For each segment it loads the weights and momentum entering it (regenerated per
segment by the forward kernel from the sparse checkpoints, see `triton_autograd.py`),
recomputes the segment's forward quantities (inner forward/backward, clip factor, decays,
dual-form retrieval) and back-propagates, in the same pass, the gradient of the output
rows and of the state leaving the segment to q, k, v, theta, eta, alpha and to the state
entering it. The gradient w.r.t. the running state (dW, dS; fp32 [B, H, out, in]) is
carried between segments in global memory, like the forward's state.

The formulas are the hand-derived adjoint of `chunked._run_chunk` (written out in
docs/architecture.md); the tests compare them with the token-by-token reference.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .triton_forward import ACT_CODES, NUM_STAGES, _pow2, num_warps
from .triton_helpers import (
    act,
    clipped_rate,
    dact,
    ddact,
    inner_gradient,
    log_gate_gradient,
    mm,
    segment_decays,
    squared_norms,
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
    clip,
    C: tl.constexpr,
    D: tl.constexpr,
    HID: tl.constexpr,
    DEPTH: tl.constexpr,
    HAS_ETA: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_CLIP: tl.constexpr,
    ACT: tl.constexpr,
    FIRST_G0: tl.constexpr,
    LAST_DG: tl.constexpr,
    PREC: tl.constexpr,
):
    # inputs [B, T, H, d] / [B, T, H] contiguous (T: this range); entry states per segment
    # [B, H, n_seg, out, in]; carried dW, dS [B, H, out, in] (in: the gradient w.r.t. the
    # state after the range, out: before it); g0 / dg0: separate gradient weights of the
    # first segment (a range that starts inside a chunk); dgl: gradient w.r.t. the gradient
    # weights of the last segment; input gradients fp32, same layouts as the inputs
    pid = tl.program_id(0)
    b = pid // H
    h = pid % H
    rows = tl.arange(0, C)
    cd = tl.arange(0, D)
    ch = tl.arange(0, HID)
    causal = rows[:, None] >= rows[None, :]
    size = hdim * d
    base = pid.to(tl.int64) * size
    p1 = ch[:, None] * d + cd[None, :]
    m1 = (ch[:, None] < hdim) & (cd[None, :] < d)
    p2 = cd[:, None] * hdim + ch[None, :]
    m2 = (cd[:, None] < d) & (ch[None, :] < hdim)

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
        ws1 = tl.load(cw1_ptr + cbase + p1, mask=m1, other=0.0)
        ss1 = tl.load(cs1_ptr + cbase + p1, mask=m1, other=0.0)
        if DEPTH == 2:
            ws2 = tl.load(cw2_ptr + cbase + p2, mask=m2, other=0.0)
            ss2 = tl.load(cs2_ptr + cbase + p2, mask=m2, other=0.0)
        # the gradient weights: the entry weights, except a separate W_(c) for segment 0
        sep = seg * 0  # 1 where this segment's gradient weights are the separate g0
        wg1 = ws1
        wg2 = ws1  # not read at depth 1
        if DEPTH == 2:
            wg2 = ws2
        if FIRST_G0:
            sep = tl.where(seg == 0, 1, 0)
            wg1 = tl.where(p1 * 0 + sep == 1, tl.load(g01_ptr + base + p1, mask=m1, other=0.0), ws1)
            if DEPTH == 2:
                g02 = tl.load(g02_ptr + base + p2, mask=m2, other=0.0)
                wg2 = tl.where(p2 * 0 + sep == 1, g02, ws2)

        # ---- recompute the segment (as in the forward kernel) ----
        z1, a1, g1p, e1, d1, d2 = inner_gradient(k, v, wg1, wg2, DEPTH, ACT, PREC)
        k2, n1, a2, n2, sq = squared_norms(k, a1, d1, d2, DEPTH)
        lr, f, nrm, nrm_c, ratio = clipped_rate(theta, sq, clip, HAS_CLIP)
        alpha, eta, Da, A, De, P, M, bb = segment_decays(
            alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA, PREC
        )
        Mlr = M * lr[None, :]

        qW1 = mm(q, tl.trans(ws1), PREC)
        G1 = mm(q, tl.trans(k), PREC)
        R1 = Mlr * G1
        z = A[:, None] * qW1 - mm(R1, d1, PREC)
        if HAS_ETA:
            qS1 = mm(q, tl.trans(ss1), PREC)
            z += bb[:, None] * qS1
        if DEPTH == 2:
            x2 = act(z, ACT)
            xW2 = mm(x2, tl.trans(ws2), PREC)
            G2 = mm(x2, tl.trans(a1), PREC)
            R2 = Mlr * G2
            if HAS_ETA:
                xS2 = mm(x2, tl.trans(ss2), PREC)

        m_last = tl.sum(tl.where(last[:, None], Mlr, 0.0), 0)
        if HAS_ETA:
            de_last = tl.sum(tl.where(last[:, None], De, 0.0), 0)
            c_last = de_last * lr
        else:
            c_last = tl.where(last, lr, 0.0)

        # ---- backward ----
        dy = tl.load(dy_ptr + xoff, mask=xmask, other=0.0).to(tl.float32)
        dwn1 = tl.load(dw1_ptr + base + p1, mask=m1, other=0.0)
        dsn1 = tl.load(ds1_ptr + base + p1, mask=m1, other=0.0)
        if DEPTH == 2:
            dwn2 = tl.load(dw2_ptr + base + p2, mask=m2, other=0.0)
            dsn2 = tl.load(ds2_ptr + base + p2, mask=m2, other=0.0)

        if DEPTH == 2:
            # output layer: y = A (x2 Ws2^T) + bb (x2 Ss2^T) - R2 d2
            dA = tl.sum(dy * xW2, 1)
            dws2 = mm(tl.trans(A[:, None] * dy), x2, PREC)
            dR2 = -mm(dy, tl.trans(d2), PREC)
            dd2 = -mm(tl.trans(R2), dy, PREC)
            dMlr = dR2 * G2
            dG2 = dR2 * Mlr
            dx2 = mm(dG2, a1, PREC)
            dx2 += A[:, None] * mm(dy, ws2, PREC)
            da1 = mm(tl.trans(dG2), x2, PREC)
            if HAS_ETA:
                dbb = tl.sum(dy * xS2, 1)
                dss2 = mm(tl.trans(bb[:, None] * dy), x2, PREC)
                dx2 += bb[:, None] * mm(dy, ss2, PREC)
            dz = dx2 * dact(z, ACT)
        else:
            dz = dy
        # first layer: z = A (q Ws1^T) + bb (q Ss1^T) - R1 d1
        if DEPTH == 2:
            dA += tl.sum(dz * qW1, 1)
        else:
            dA = tl.sum(dz * qW1, 1)
        dws1 = mm(tl.trans(A[:, None] * dz), q, PREC)
        dR1 = -mm(dz, tl.trans(d1), PREC)
        dd1 = -mm(tl.trans(R1), dz, PREC)
        if DEPTH == 2:
            dMlr += dR1 * G1
        else:
            dMlr = dR1 * G1
        dG1 = dR1 * Mlr
        dq = mm(dG1, k, PREC)
        dq += A[:, None] * mm(dz, ws1, PREC)
        dk = mm(tl.trans(dG1), q, PREC)
        if HAS_ETA:
            if DEPTH == 2:
                dbb += tl.sum(dz * qS1, 1)
            else:
                dbb = tl.sum(dz * qS1, 1)
            dss1 = mm(tl.trans(bb[:, None] * dz), q, PREC)
            dq += bb[:, None] * mm(dz, ss1, PREC)

        # end-of-segment state: W' = A_n Ws + b_n Ss - (d * m)^T h, S' = P_n Ss - (d * c)^T h
        a_last = tl.sum(tl.where(last, A, 0.0), 0)
        dws1 += a_last * dwn1
        dA_n = tl.sum(tl.sum(dwn1 * ws1, 1), 0)
        hW = mm(k, tl.trans(dwn1), PREC)  # [C, HID]
        hS = mm(k, tl.trans(dsn1), PREC)
        dd1 -= m_last[:, None] * hW + c_last[:, None] * hS
        dk -= mm(d1 * m_last[:, None], dwn1, PREC)
        dk -= mm(d1 * c_last[:, None], dsn1, PREC)
        dm = -tl.sum(d1 * hW, 1)
        dc = -tl.sum(d1 * hS, 1)
        if DEPTH == 2:
            dws2 += a_last * dwn2
            dA_n += tl.sum(tl.sum(dwn2 * ws2, 1), 0)
            hW2 = mm(a1, tl.trans(dwn2), PREC)  # [C, D]
            hS2 = mm(a1, tl.trans(dsn2), PREC)
            dd2 -= m_last[:, None] * hW2 + c_last[:, None] * hS2
            da1 -= mm(d2 * m_last[:, None], dwn2, PREC)
            da1 -= mm(d2 * c_last[:, None], dsn2, PREC)
            dm -= tl.sum(d2 * hW2, 1)
            dc -= tl.sum(d2 * hS2, 1)
        dA += tl.where(last, dA_n, 0.0)
        dMlr += tl.where(last[:, None], dm[None, :], 0.0)
        if HAS_ETA:
            b_last = tl.sum(tl.where(last, bb, 0.0), 0)
            p_last = tl.sum(tl.where(last, P, 0.0), 0)
            dss1 += b_last * dwn1 + p_last * dsn1
            db_n = tl.sum(tl.sum(dwn1 * ss1, 1), 0)
            dP_n = tl.sum(tl.sum(dsn1 * ss1, 1), 0)
            if DEPTH == 2:
                dss2 += b_last * dwn2 + p_last * dsn2
                db_n += tl.sum(tl.sum(dwn2 * ss2, 1), 0)
                dP_n += tl.sum(tl.sum(dsn2 * ss2, 1), 0)
            dbb += tl.where(last, db_n, 0.0)
            dP = tl.where(last, dP_n, 0.0)
            dlr = dc * de_last
            dDe = tl.where(last[:, None], (dc * lr)[None, :], 0.0)
        else:
            dlr = tl.where(last, dc, 0.0)

        # decays: Mlr = M lr, M = Da De, bb = Da P, Da/De/A/P from cumulative log gates
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

        # inner forward/backward at the gradient weights
        if DEPTH == 2:
            de1 = dd1 * g1p
            dz1 = dd1 * e1 * ddact(z1, ACT)
            dd2 += mm(de1, tl.trans(wg2), PREC)
            dwg2 = mm(tl.trans(d2), de1, PREC)
            dout = 2.0 * dd2
            dv = -dout
            da1 += mm(dout, wg2, PREC)
            dwg2 += mm(tl.trans(dout), a1, PREC)
            dz1 += da1 * g1p
        else:
            dz1 = 2.0 * dd1
            dv = -dz1
        dk += mm(dz1, wg1, PREC)
        dwg1 = mm(tl.trans(dz1), k, PREC)
        if LAST_DG:  # gradient w.r.t. the chunk-entry weights the final state exposes
            lastseg = tl.where(seg == n_seg - 1, 1, 0)
            dwg1 += tl.load(dgl1_ptr + base + p1, mask=m1 & (p1 * 0 + lastseg == 1), other=0.0)
            if DEPTH == 2:
                dwg2 += tl.load(dgl2_ptr + base + p2, mask=m2 & (p2 * 0 + lastseg == 1), other=0.0)

        tl.store(dq_ptr + xoff, dq, mask=xmask)
        tl.store(dk_ptr + xoff, dk, mask=xmask)
        tl.store(dv_ptr + xoff, dv, mask=xmask)

        # gradient w.r.t. the state entering the segment (the gradient weights are the entry
        # weights unless they are the separate g0)
        tl.debug_barrier()
        shared = (1 - sep).to(tl.float32)
        tl.store(dw1_ptr + base + p1, dws1 + shared * dwg1, mask=m1)
        tl.store(dg01_ptr + base + p1, dwg1, mask=m1 & (p1 * 0 + sep == 1))
        if HAS_ETA:
            tl.store(ds1_ptr + base + p1, dss1, mask=m1)
        else:
            tl.store(ds1_ptr + base + p1, tl.zeros([HID, D], tl.float32), mask=m1)
        if DEPTH == 2:
            tl.store(dw2_ptr + base + p2, dws2 + shared * dwg2, mask=m2)
            tl.store(dg02_ptr + base + p2, dwg2, mask=m2 & (p2 * 0 + sep == 1))
            if HAS_ETA:
                tl.store(ds2_ptr + base + p2, dss2, mask=m2)
            else:
                tl.store(ds2_ptr + base + p2, tl.zeros([D, HID], tl.float32), mask=m2)
        tl.debug_barrier()


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
        dW[0],
        layer2(dW),
        dS[0],
        layer2(dS),
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
        float(inner_grad_clip or 0.0),
        C=chunk_size,
        D=D,
        HID=HID,
        DEPTH=depth,
        HAS_ETA=eta is not None,
        HAS_ALPHA=alpha is not None,
        HAS_CLIP=inner_grad_clip is not None,
        ACT=ACT_CODES[activation],
        FIRST_G0=g0 is not None,
        LAST_DG=dG_last is not None,
        PREC=input_precision,
        num_warps=num_warps(D, HID),
        num_stages=NUM_STAGES,
    )
    return (dq, dk, dv, dtheta, deta, dalpha), dG0
