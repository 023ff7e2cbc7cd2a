"""One chunk segment of the memory, forward and adjoint, on plain tensors.

The "torch" and "compiled" backends (`fused.py`) walk a sequence's chunks with these two
steps: `step_forward` computes a segment's outputs, the state after it and the
intermediates its adjoint needs; `step_backward` is that adjoint (the formulas of
docs/architecture.md, which the fused Triton backward implements for depth 1 and 2), for
any memory depth. They take and return tuples of tensors only (and None), so that
`torch.compile` or `make_fx` can trace them (`compiled_step.py`).
"""

from __future__ import annotations

import dataclasses

import torch

from .chunked import _LOG_FLOOR, _segment_decays
from .clip import clip_factor, rank_one_sq_norm
from .memory_mlp import activation_fn


def _second_derivative(name: str):
    """act''(z) of the memory activation (the inner backward's derivative)."""
    if name == "silu":

        def ddact(z):
            s = torch.sigmoid(z)
            return s * (1 - s) * (2 + z * (1 - 2 * s))

    else:

        def ddact(z):
            pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
            return pdf * (2 - z * z)

    return ddact


@dataclasses.dataclass
class _Decays:
    """Decay products of one segment's gates ([..., n] / [..., n, n]; see chunked.py)."""

    Da: torch.Tensor  # prod_{s<j<=t} a_j (lower triangular), a = 1 - alpha
    A: torch.Tensor  # prod_{j<=t} a_j
    De: torch.Tensor | None  # prod_{r<j<=s} eta_j (None without momentum)
    P: torch.Tensor | None  # prod_{j<=s} eta_j
    M: torch.Tensor  # Da @ De (Da without momentum)
    b: torch.Tensor | None  # Da @ P


def _decays(alpha, eta, like) -> _Decays:
    n = like.shape[-1]
    Da, A = _segment_decays(None if alpha is None else 1 - alpha, n, like)
    if eta is None:
        return _Decays(Da, A, None, None, Da, None)
    De, P = _segment_decays(eta, n, like)
    return _Decays(Da, A, De, P, Da @ De, (Da @ P.unsqueeze(-1)).squeeze(-1))


def _decays_backward(dec: _Decays, alpha, eta, dA, dM, db, dP, dDe):
    """Gradients of alpha and eta ([..., n]) from those of A, M, b, P and De."""
    dalpha = deta = None
    if dec.De is not None:
        dDa = dM @ dec.De.transpose(-1, -2) + db.unsqueeze(-1) * dec.P.unsqueeze(-2)
        dDe = dDe + dec.Da.transpose(-1, -2) @ dM
        dP = dP + (dec.Da * db.unsqueeze(-1)).sum(-2)
        Y = dDe * dec.De
        dcum = Y.sum(-1) - Y.sum(-2) + dP * dec.P
        dlog = dcum.flip(-1).cumsum(-1).flip(-1)  # reverse cumulative sum
        deta = torch.where(eta > _LOG_FLOOR, dlog / eta, torch.zeros_like(eta))
    else:
        dDa = dM
    if alpha is not None:
        X = dDa * dec.Da
        dcum = X.sum(-1) - X.sum(-2) + dA * dec.A
        dlog = dcum.flip(-1).cumsum(-1).flip(-1)
        keep = 1 - alpha
        dalpha = torch.where(keep > _LOG_FLOOR, -dlog / keep, torch.zeros_like(keep))
    return dalpha, deta


def _inner(Wg, k, v, act, dact):
    """The memory MLP at the gradient weights over a segment: per layer the inputs h_l
    [..., n, in], pre-activations p_l [..., n, out] and errors delta_l [..., n, out]."""
    inputs, pre = [], []
    h = k
    for i, w in enumerate(Wg):
        inputs.append(h)
        p = h @ w.transpose(-1, -2)
        pre.append(p)
        if i < len(Wg) - 1:
            h = act(p)
    deltas = [None] * len(Wg)
    delta = 2.0 * (pre[-1] - v)
    for i in range(len(Wg) - 1, -1, -1):
        deltas[i] = delta
        if i > 0:
            delta = (delta @ Wg[i]) * dact(pre[i - 1])
    return inputs, pre, deltas


@dataclasses.dataclass
class _Segment:
    """One chunk segment's inputs ([B, H, n, ...]) and weight-independent precomputations."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    theta: torch.Tensor
    eta: torch.Tensor | None
    alpha: torch.Tensor | None
    dec: _Decays
    qk: torch.Tensor  # q k^T [B, H, n, n]: the first layer's retrieval mixing products


def _forward_segment(seg: _Segment, Ws, Ss, Wg, act, dact, clip, keep: bool, state: bool = True):
    """One segment forward. Returns (y [B, H, n, d], W', S', saved): saved holds the
    intermediates the adjoint needs (keep=True, else None); state=False skips W', S' (a
    recomputation in the backward). Ss=None: the entry momentum is zero (a fresh stream),
    and its products are skipped."""
    inputs, pre, deltas = _inner(Wg, seg.k, seg.v, act, dact)
    f = sq = None
    lr = seg.theta
    if clip is not None:
        sq = rank_one_sq_norm(deltas, inputs)
        f = clip_factor(sq, clip)
        lr = lr * f
    dec = seg.dec
    Mlr = dec.M * lr.unsqueeze(-2)
    x = seg.q
    xs, zs, Qs, Bs, Gs, Rs = [], [], [], [], [], []
    L = len(Ws)
    for i in range(L):
        G = seg.qk if i == 0 else x @ inputs[i].transpose(-1, -2)
        R = Mlr * G
        Q = x @ Ws[i].transpose(-1, -2)
        z = dec.A.unsqueeze(-1) * Q - R @ deltas[i]
        Bq = None
        if dec.b is not None and Ss is not None:
            Bq = x @ Ss[i].transpose(-1, -2)
            z = z + dec.b.unsqueeze(-1) * Bq
        xs.append(x), zs.append(z), Qs.append(Q), Bs.append(Bq), Gs.append(G), Rs.append(R)
        if i < L - 1:
            x = act(z)
    y = zs[-1]
    m = Mlr[..., -1, :]  # M[n-1, r] lr_r
    c = None if dec.De is None else dec.De[..., -1, :] * lr
    saved = None
    if keep:
        saved = dict(
            inputs=inputs, pre=pre, deltas=deltas, sq=sq, f=f, lr=lr, Mlr=Mlr, m=m, c=c,
            xs=xs, zs=zs, Qs=Qs, Bs=Bs, Gs=Gs, Rs=Rs,
        )  # fmt: skip
    if not state:
        return y, None, None, saved
    # the state after the segment's last token
    A_n = dec.A[..., -1, None, None]
    new_W, new_S = [], []
    for i in range(L):
        h, delta = inputs[i], deltas[i]
        w = A_n * Ws[i] - (delta * m.unsqueeze(-1)).transpose(-1, -2) @ h
        if dec.b is not None and Ss is not None:
            w = w + dec.b[..., -1, None, None] * Ss[i]
        new_W.append(w)
        if c is None:  # no momentum: S' = -lr_{n-1} u_{n-1}
            s = -(delta[..., -1:, :] * lr[..., -1:, None]).transpose(-1, -2) @ h[..., -1:, :]
        else:
            s = -(delta * c.unsqueeze(-1)).transpose(-1, -2) @ h
            if Ss is not None:
                s = s + dec.P[..., -1, None, None] * Ss[i]
        new_S.append(s)
    return y, new_W, new_S, saved


def _backward_segment(seg: _Segment, Ws, Ss, Wg, sv, dy, dW, dS, act, dact, ddact, clip):
    """The adjoint of `_forward_segment`. dy [B, H, n, d], dW/dS: gradients w.r.t. the
    state after the segment (None when nothing downstream reads it); Ss=None: a zero entry
    momentum (its gradients dSs are then None). Returns (dq, dk, dv, dtheta, deta, dalpha,
    dWs, dSs, dWg)."""
    dec = seg.dec
    L = len(Ws)
    inputs, pre, deltas = sv["inputs"], sv["pre"], sv["deltas"]
    lr, Mlr, m, c = sv["lr"], sv["Mlr"], sv["m"], sv["c"]
    A = dec.A
    dA = torch.zeros_like(A)
    db = None if dec.b is None else torch.zeros_like(dec.b)
    dMlr = torch.zeros_like(Mlr)
    dWs = [None] * L
    dSs = [None] * L
    dDelta = [None] * L
    dH = [None] * L
    dq = None

    # ---- retrieval, top layer down: z_l = A Q_l + b B_l - R_l delta_l ----
    dz = dy
    for i in range(L - 1, -1, -1):
        x, G, R = sv["xs"][i], sv["Gs"][i], sv["Rs"][i]
        dA = dA + (dz * sv["Qs"][i]).sum(-1)
        Adz = A.unsqueeze(-1) * dz
        dWs[i] = Adz.transpose(-1, -2) @ x
        dx = Adz @ Ws[i]
        if db is not None and Ss is not None:
            db = db + (dz * sv["Bs"][i]).sum(-1)
            bdz = dec.b.unsqueeze(-1) * dz
            dSs[i] = bdz.transpose(-1, -2) @ x
            dx = dx + bdz @ Ss[i]
        dR = -(dz @ deltas[i].transpose(-1, -2))
        dDelta[i] = -(R.transpose(-1, -2) @ dz)
        dMlr = dMlr + dR * G
        dG = dR * Mlr
        dx = dx + dG @ inputs[i]
        dH[i] = dG.transpose(-1, -2) @ x
        if i > 0:
            dz = dx * dact(sv["zs"][i - 1])
        else:
            dq = dx

    # ---- the state after the segment: W' = A_n Ws + b_n Ss - (delta m)^T h, S' = ... ----
    # (dW = dS = None: nothing downstream reads that state, its adjoint is zero)
    A_n = A[..., -1, None, None]
    dA_n = 0
    db_n = dP_n = 0
    dm = torch.zeros_like(m)
    dc = None if c is None else torch.zeros_like(c)
    dlr_last = None
    for i in range(L if dW is not None else 0):
        h, delta = inputs[i], deltas[i]
        dWs[i] = dWs[i] + A_n * dW[i]
        dA_n = dA_n + (dW[i] * Ws[i]).sum((-2, -1))
        hW = h @ dW[i].transpose(-1, -2)
        dDelta[i] = dDelta[i] - m.unsqueeze(-1) * hW
        dH[i] = dH[i] - (delta * m.unsqueeze(-1)) @ dW[i]
        dm = dm - (delta * hW).sum(-1)
        if dec.b is not None and Ss is not None:
            dSs[i] = (
                dSs[i] + dec.b[..., -1, None, None] * dW[i] + dec.P[..., -1, None, None] * dS[i]
            )
            db_n = db_n + (dW[i] * Ss[i]).sum((-2, -1))
            dP_n = dP_n + (dS[i] * Ss[i]).sum((-2, -1))
        if c is None:  # S' = -lr_{n-1} delta_{n-1} h_{n-1}^T
            hS = h[..., -1:, :] @ dS[i].transpose(-1, -2)  # [.., 1, out]
            last = -(delta[..., -1:, :] * hS).sum(-1)[..., 0]
            dlr_last = last * 0 if dlr_last is None else dlr_last
            dlr_last = dlr_last + last
            dDelta[i][..., -1:, :] -= lr[..., -1:, None] * hS
            dH[i][..., -1:, :] -= (delta[..., -1:, :] * lr[..., -1:, None]) @ dS[i]
        else:
            hS = h @ dS[i].transpose(-1, -2)
            dDelta[i] = dDelta[i] - c.unsqueeze(-1) * hS
            dH[i] = dH[i] - (delta * c.unsqueeze(-1)) @ dS[i]
            dc = dc - (delta * hS).sum(-1)
    dA = dA.clone()
    dA[..., -1] += dA_n
    dMlr[..., -1, :] += dm
    dDe = None
    dP = None
    if dec.De is not None:
        db[..., -1] += db_n
        dP = torch.zeros_like(dec.P)
        dP[..., -1] = dP_n
        dDe = torch.zeros_like(dec.De)
        dDe[..., -1, :] = dc * lr
        dlr = dc * dec.De[..., -1, :]
    else:
        dlr = torch.zeros_like(lr)
        if dlr_last is not None:
            dlr[..., -1] += dlr_last

    # ---- decays and learning rate: Mlr = M lr ----
    dM = dMlr * lr.unsqueeze(-2)
    dlr = dlr + (dMlr * dec.M).sum(-2)
    dalpha, deta = _decays_backward(dec, seg.alpha, seg.eta, dA, dM, db, dP, dDe)
    if clip is None:
        dtheta = dlr
    else:
        f, sq = sv["f"], sv["sq"]
        dtheta = dlr * f
        # f = clip / sqrt(sq) where the clip is active: df/dsq = -f / (2 sq)
        active = f < 1
        dsq = torch.where(active, -(dlr * seg.theta) * f / (2 * torch.where(active, sq, 1)), 0)
        for i in range(L):
            h, delta = inputs[i], deltas[i]
            dDelta[i] = dDelta[i] + (2 * dsq * h.pow(2).sum(-1)).unsqueeze(-1) * delta
            dH[i] = dH[i] + (2 * dsq * delta.pow(2).sum(-1)).unsqueeze(-1) * h

    # ---- the inner forward/backward at the gradient weights ----
    dWg = [None] * L
    dP_pre = [None] * L
    # the error recursion delta_{j} = (delta_{j+1} Wg_{j+1}) * act'(p_j), bottom-up
    for j in range(L - 1):
        gp = dact(pre[j])
        E = deltas[j + 1] @ Wg[j + 1]
        dE = dDelta[j] * gp
        dP_pre[j] = dDelta[j] * E * ddact(pre[j])
        dDelta[j + 1] = dDelta[j + 1] + dE @ Wg[j + 1].transpose(-1, -2)
        dWg[j + 1] = deltas[j + 1].transpose(-1, -2) @ dE
    dout = 2.0 * dDelta[L - 1]
    dv = -dout
    dP_pre[L - 1] = dout
    # the forward chain h_{l+1} = act(p_l), p_l = h_l Wg_l^T, top-down
    for i in range(L - 1, -1, -1):
        dp = dP_pre[i]
        dWg[i] = dp.transpose(-1, -2) @ inputs[i] + (0 if dWg[i] is None else dWg[i])
        dh = dH[i] + dp @ Wg[i]
        if i > 0:
            dP_pre[i - 1] = dP_pre[i - 1] + dh * dact(pre[i - 1])
        else:
            dk = dh
    if dec.b is None and Ss is not None:
        dSs = [torch.zeros_like(s) for s in Ss]
    return dq, dk, dv, dtheta, deta, dalpha, dWs, dSs, dWg


def _as_segment(q, k, v, theta, eta, alpha, decays, qk) -> _Segment:
    return _Segment(q, k, v, theta, eta, alpha, _Decays(*decays), qk)


def step_forward(seg_tensors, Ws, Ss, Wg, activation: str, clip, keep: bool):
    """One chunk segment forward on plain tensors (what `torch.compile` takes): seg_tensors
    = (q, k, v, theta, eta, alpha, (Da, A, De, P, M, b), qk). Returns (y, W', S', saved):
    saved (keep=True) holds the intermediates the backward step needs."""
    act, dact = activation_fn(activation)
    seg = _as_segment(*seg_tensors)
    return _forward_segment(seg, Ws, Ss, Wg, act, dact, clip, keep)


def step_backward(
    seg_tensors, Ws, Ss, Wg, saved, dy, dW, dS, activation: str, clip, fold: bool = False
):
    """One chunk segment backward: the adjoint of its forward, from the forward's saved
    intermediates (recomputed from the entry state when saved is None). Returns (dq, dk,
    dv, dtheta, deta, dalpha, dWs, dSs, dWg); fold (the gradient weights are the entry
    weights, Wg = Ws): dWs holds the sum dWs + dWg, the whole gradient w.r.t. the entry
    weights, and dWg is None (inside a compiled step the sum is fused with its last
    kernels instead of costing two more operations per chunk)."""
    act, dact = activation_fn(activation)
    seg = _as_segment(*seg_tensors)
    if saved is None:
        _, _, _, saved = _forward_segment(seg, Ws, Ss, Wg, act, dact, clip, True, state=False)
    *grads, dWs, dSs, dWg = _backward_segment(
        seg, Ws, Ss, Wg, saved, dy, dW, dS, act, dact, _second_derivative(activation), clip
    )
    if fold:
        return (*grads, [a + b for a, b in zip(dWs, dWg)], dSs, None)
    return (*grads, dWs, dSs, dWg)


def segment_tensors(seg: _Segment):
    """The tuple of a segment's tensors that `step_forward` and `step_backward` take."""
    d = seg.dec
    return (
        seg.q,
        seg.k,
        seg.v,
        seg.theta,
        seg.eta,
        seg.alpha,
        (d.Da, d.A, d.De, d.P, d.M, d.b),
        seg.qk,
    )
