"""One chunk segment of the memory, forward and adjoint, on plain tensors: the one
PyTorch source of the memory's chunk-parallel maths.

Every PyTorch backend runs a call as a walk over its chunk segments (`state.segment_lengths`):

* "chunked" calls `forward_segment` under autograd, which differentiates it;
* "torch" calls `step_forward` without a graph and `step_backward`, the hand-written
  adjoint (the formulas of docs/derivation.md, which the Triton backward implements for
  depth 1 and 2), for any memory depth;
* "compiled" runs the same two steps as Inductor graphs (`compiled_step.py`), which is why
  they take and return tuples of tensors only (and None).

Retrieval through the per-token weights never materialises them (decays.py): for a layer
with rank-one token gradients delta_r h_r^T,

    W_t x_t = A_t (W_s x_t) + b_t (S_s x_t) - sum_r M[t, r] theta_r (h_r . x_t) delta_r.

A memory that forgets toward its initial weights W_0 (forget_toward="initial") is the same
recurrence on the deviation D = W - W_0: D_t = a_t D_{t-1} + S_t, the inner gradients taken
at W_0 + D_(c), and the retrieval reads W_t x_t = W_0 x_t + A_t (D_s x_t) + ...; the walks
pass deviations as the entry and gradient weights and W_0 as `base`.
"""

from __future__ import annotations

import dataclasses

import torch

from .anchor import absolute
from .clip import clip_factor, rank_one_sq_norm
from .decays import Decays, decays_backward, segment_decays
from .memory_mlp import activation_fn, activation_second_derivative, inner_pass
from .operand_precision import operand_dot


@dataclasses.dataclass
class Segment:
    """One chunk segment's inputs ([B, H, n, ...]) and weight-independent precomputations."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    theta: torch.Tensor
    eta: torch.Tensor | None
    alpha: torch.Tensor | None
    dec: Decays
    qk: torch.Tensor  # q k^T [B, H, n, n]: the first layer's retrieval mixing products


def split_segments(
    q, k, v, theta, eta, alpha, lengths, chunk_size, chunk_major: bool = False, dot=torch.matmul
) -> list[Segment]:
    """Split [B, H, T, ...] inputs into segments of `lengths` tokens; the decays and q k^T
    of all full chunks are computed in one batched operation each.

    chunk_major: the full chunks' tensors are copied chunk-major and contiguous (a compiled
    step's graph then holds for any T), else they are views. dot: the product q k^T is
    taken with (`operand_precision.operand_dot`; the decays' products stay exact).
    """

    def split(x):
        # split (whose backward is one concatenation) rather than slice per segment: a
        # slice's backward zero-fills the whole input once per segment, quadratic in T
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
            # unbind: one backward node rather than one zero-filled gradient per chunk
            if x is None:
                return [None] * count
            return x.movedim(2, 0).contiguous().unbind(0) if chunk_major else x.unbind(2)

        dec = segment_decays(grid(alpha), grid(eta), grid(theta))
        qg, kg = grid(q, q.shape[-1]), grid(k, k.shape[-1])
        qk = dot(qg, kg.transpose(-1, -2))
        fields = [chunks(x) for x in (dec.Da, dec.A, dec.De, dec.P, dec.M, dec.b, qk)]
        inputs = [
            chunks(grid(x, *x.shape[3:]) if x is not None else None)
            for x in (q, k, v, theta, eta, alpha)
        ]
        for j, i in enumerate(full):
            Da, A, De, P, M, b, qk_j = (f[j] for f in fields)
            batched[i] = (tuple(x[j] for x in inputs), Decays(Da, A, De, P, M, b), qk_j)
    segments = []
    for i in range(len(lengths)):
        q_i, k_i, v_i, th_i, eta_i, al_i = (p[i] for p in parts)
        if i in batched:
            (q_i, k_i, v_i, th_i, eta_i, al_i), dec, qk = batched[i]
        else:
            dec, qk = segment_decays(al_i, eta_i, th_i), dot(q_i, k_i.transpose(-1, -2))
        segments.append(Segment(q_i, k_i, v_i, th_i, eta_i, al_i, dec, qk))
    return segments


def chain_forward(
    seg: Segment, Ws, Ss, Wg, act, dact, clip, trace=None, state: bool = True, dot=torch.matmul
):
    """The part of a segment's forward the next segment waits for: the inner gradients at
    Wg and the state after the segment. Ws, Ss, Wg: per layer [B, H, out, in] (Ss None: a
    zero entry momentum, whose products are skipped).

    Returns (W', S', chain): chain holds what the retrieval and the adjoint read (per layer
    inputs h, pre-activations and deltas; the clip's sq and f; lr [B, H, n]; Mlr = M lr
    [B, H, n, n]; m, c [B, H, n], the last row's weights of the state update). trace: see
    `forward_segment`; state=False returns None for W', S'. dot: the products' form
    (`operand_precision.operand_dot`).
    """
    inputs, pre, deltas = inner_pass(Wg, seg.k, seg.v, act, dact, dot)
    f = sq = None
    lr = seg.theta
    if clip is not None or trace is not None:
        # each layer's gradient is rank one: ||u_r||^2 from the segment's deltas and inputs
        sq = rank_one_sq_norm(deltas, inputs)
    if trace is not None:
        # the last layer's delta is 2 (f(k) - v): the inner loss is a quarter of its square
        trace.append((deltas[-1].pow(2).sum(-1) / 4, sq))
    if clip is not None:
        f = clip_factor(sq, clip)
        lr = lr * f
    dec = seg.dec
    Mlr = dec.M * lr.unsqueeze(-2)
    m = Mlr[..., -1, :]  # M[n-1, r] lr_r
    c = None if dec.De is None else dec.De[..., -1, :] * lr
    chain = dict(
        inputs=inputs, pre=pre, deltas=deltas, sq=sq if clip is not None else None,
        f=f, lr=lr, Mlr=Mlr, m=m, c=c,
    )  # fmt: skip
    if not state:
        return None, None, chain
    # the state after the segment's last token
    A_n = dec.A[..., -1, None, None]
    new_W, new_S = [], []
    for i in range(len(Ws)):
        h, delta = inputs[i], deltas[i]
        w = A_n * Ws[i] - dot((delta * m.unsqueeze(-1)).transpose(-1, -2), h)
        if dec.b is not None and Ss is not None:
            w = w + dec.b[..., -1, None, None] * Ss[i]
        new_W.append(w)
        if c is None:  # no momentum: S' = -lr_{n-1} u_{n-1}
            s = -dot((delta[..., -1:, :] * lr[..., -1:, None]).transpose(-1, -2), h[..., -1:, :])
        else:
            s = -dot((delta * c.unsqueeze(-1)).transpose(-1, -2), h)
            if Ss is not None:
                s = s + dec.P[..., -1, None, None] * Ss[i]
        new_S.append(s)
    return new_W, new_S, chain


def retrieve(q, qk, A, b, Ws, Ss, inputs, deltas, Mlr, act, dot=torch.matmul, base=None):
    """The segment's outputs y_t = f_{W_t}(q_t) through the per-token weights, from the
    entry state and what `chain_forward` found. Written for any leading dims: one segment
    ([B, H, n, ...], Ws [B, H, out, in]) or a stack of N segments at once ([B, H, N, n, ...],
    Ws [B, H, N, out, in]).

    q [.., n, d]; qk = q k^T [.., n, n]; A, b [.., n] (b None: no momentum); Ss None: zero
    entry momentum; base: None, or per layer weights every token reads in full (W_0 when
    Ws is the deviation from it), broadcastable to Ws. Returns (y [.., n, d], saved): per
    layer the inputs x, pre-activations z, Q = x Ws^T, B = x Ss^T (or None), G = x h^T and
    R = Mlr * G, which the adjoint reads.
    """
    x = q
    xs, zs, Qs, Bs, Gs, Rs = [], [], [], [], [], []
    L = len(Ws)
    for i in range(L):
        G = qk if i == 0 else dot(x, inputs[i].transpose(-1, -2))
        R = Mlr * G
        Q = dot(x, Ws[i].transpose(-1, -2))
        z = A.unsqueeze(-1) * Q - dot(R, deltas[i])
        Bq = None
        if b is not None and Ss is not None:
            Bq = dot(x, Ss[i].transpose(-1, -2))
            z = z + b.unsqueeze(-1) * Bq
        if base is not None:
            z = z + dot(x, base[i].transpose(-1, -2))
        xs.append(x), zs.append(z), Qs.append(Q), Bs.append(Bq), Gs.append(G), Rs.append(R)
        if i < L - 1:
            x = act(z)
    return zs[-1], dict(xs=xs, zs=zs, Qs=Qs, Bs=Bs, Gs=Gs, Rs=Rs)


def forward_segment(
    seg: Segment,
    Ws,
    Ss,
    Wg,
    act,
    dact,
    clip,
    keep: bool,
    state: bool = True,
    trace=None,
    dot=torch.matmul,
    base=None,
):
    """One segment forward. Ws, Ss, Wg: per layer [B, H, out, in], the entry weights, the
    entry momentum (None: zero, a fresh stream, and its products are skipped) and the
    weights the segment's gradients are taken at. base: None, or per layer [1, H, out, in]
    the initial weights W_0 when the memory forgets toward them: Ws, Wg and the W' returned
    are then deviations from W_0 (the gradients are taken at Wg + base).

    Returns (y [B, H, n, d], W', S', saved): saved holds the intermediates the adjoint
    needs (keep=True, else None); state=False returns None for W', S' (a recomputation in
    the backward). trace: None, or a list that receives the segment's (inner loss, squared
    inner-gradient norm), each [B, H, n]. dot: the products' form
    (`operand_precision.operand_dot`).
    """
    Wg = absolute(Wg, base)
    new_W, new_S, chain = chain_forward(seg, Ws, Ss, Wg, act, dact, clip, trace, state, dot)
    dec = seg.dec
    y, retrieval = retrieve(
        seg.q,
        seg.qk,
        dec.A,
        dec.b,
        Ws,
        Ss,
        chain["inputs"],
        chain["deltas"],
        chain["Mlr"],
        act,
        dot,
        base,
    )
    saved = {**chain, **retrieval} if keep else None
    return y, new_W, new_S, saved


def retrieval_adjoint(
    dy, A, b, Ws, Ss, inputs, deltas, Mlr, saved, dact, dot=torch.matmul, base=None
) -> dict:
    """The adjoint of `retrieve`, for any leading dims (one segment or a stack of them):
    dy [.., n, d] and what `retrieve` and `chain_forward` saved. Nothing in it depends on
    the gradient of the state after the segment, so a walk can take it for all its segments
    at once before walking back.

    Returns dict(dq, dA, db, dMlr, dWs, dSs, dDelta, dH, dBase): the retrieval's shares of
    the gradients w.r.t. q, A, b (None without momentum), Mlr, the entry weights and momentum
    (per layer; dSs entries None when Ss is None), the deltas and inputs (per layer) and
    `base` (per layer [.., out, in], not summed over the leading dims; None without base).
    """
    L = len(Ws)
    dA = torch.zeros_like(A)
    db = None if b is None else torch.zeros_like(b)
    dMlr = torch.zeros_like(Mlr)
    dWs, dSs, dDelta, dH = [None] * L, [None] * L, [None] * L, [None] * L
    dBase = None if base is None else [None] * L
    dq = None
    # top layer down: z_l = A Q_l + b B_l - R_l delta_l
    dz = dy
    for i in range(L - 1, -1, -1):
        x, G, R = saved["xs"][i], saved["Gs"][i], saved["Rs"][i]
        dA = dA + (dz * saved["Qs"][i]).sum(-1)
        Adz = A.unsqueeze(-1) * dz
        dWs[i] = dot(Adz.transpose(-1, -2), x)
        dx = dot(Adz, Ws[i])
        if b is not None and Ss is not None:
            db = db + (dz * saved["Bs"][i]).sum(-1)
            bdz = b.unsqueeze(-1) * dz
            dSs[i] = dot(bdz.transpose(-1, -2), x)
            dx = dx + dot(bdz, Ss[i])
        if base is not None:
            dBase[i] = dot(dz.transpose(-1, -2), x)
            dx = dx + dot(dz, base[i])
        dR = -dot(dz, deltas[i].transpose(-1, -2))
        dDelta[i] = -dot(R.transpose(-1, -2), dz)
        dMlr = dMlr + dR * G
        dG = dR * Mlr
        dx = dx + dot(dG, inputs[i])
        dH[i] = dot(dG.transpose(-1, -2), x)
        if i > 0:
            dz = dx * dact(saved["zs"][i - 1])
        else:
            dq = dx
    return dict(dq=dq, dA=dA, db=db, dMlr=dMlr, dWs=dWs, dSs=dSs, dDelta=dDelta, dH=dH, dBase=dBase)


def backward_segment(
    seg: Segment, Ws, Ss, Wg, sv, dy, dW, dS, act, dact, ddact, clip, dot=torch.matmul, base=None
):
    """The adjoint of `forward_segment`. dy [B, H, n, d], dW/dS: gradients w.r.t. the
    state after the segment (None when nothing downstream reads it); Ss=None: a zero entry
    momentum (its gradients dSs are then None). Returns (dq, dk, dv, dtheta, deta, dalpha,
    dWs, dSs, dWg, dBase): dBase per layer [B, H, out, in] (the batch not yet summed) when
    base is given, else None."""
    dec = seg.dec
    retrieval = retrieval_adjoint(
        dy, dec.A, dec.b, Ws, Ss, sv["inputs"], sv["deltas"], sv["Mlr"], sv, dact, dot, base
    )
    *grads, dWg = chain_backward(
        seg, Ws, Ss, absolute(Wg, base), sv, retrieval, dW, dS, act, dact, ddact, clip, dot
    )
    dBase = None
    if base is not None:  # Wg + base: the gradient weights' share is the base's too
        dBase = [a + b for a, b in zip(retrieval["dBase"], dWg)]
    return (*grads, dWg, dBase)


def chain_backward(
    seg: Segment, Ws, Ss, Wg, sv, retrieval, dW, dS, act, dact, ddact, clip, dot=torch.matmul
):
    """The rest of the adjoint of `forward_segment` once the retrieval's shares are known
    (`retrieval_adjoint`; its dMlr and db are updated in place, so pass tensors of this
    segment's own, not views into a stack of several segments'): the state
    update's adjoint, the decays', the clip's and the inner forward/backward's. sv: what
    `chain_forward` saved (the retrieval's intermediates are not read). Returns (dq, dk, dv,
    dtheta, deta, dalpha, dWs, dSs, dWg) like `backward_segment`."""
    dec = seg.dec
    L = len(Ws)
    inputs, pre, deltas = sv["inputs"], sv["pre"], sv["deltas"]
    lr, m, c = sv["lr"], sv["m"], sv["c"]
    A = dec.A
    # dMlr and db take the state's terms in place: `retrieval` is this call's to consume
    dq, dA, db, dMlr = retrieval["dq"], retrieval["dA"], retrieval["db"], retrieval["dMlr"]
    dWs, dDelta, dH = list(retrieval["dWs"]), list(retrieval["dDelta"]), list(retrieval["dH"])
    dSs = list(retrieval["dSs"]) if Ss is not None else [None] * L

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
        hW = dot(h, dW[i].transpose(-1, -2))
        dDelta[i] = dDelta[i] - m.unsqueeze(-1) * hW
        dH[i] = dH[i] - dot(delta * m.unsqueeze(-1), dW[i])
        dm = dm - (delta * hW).sum(-1)
        if dec.b is not None and Ss is not None:
            dSs[i] = (
                dSs[i] + dec.b[..., -1, None, None] * dW[i] + dec.P[..., -1, None, None] * dS[i]
            )
            db_n = db_n + (dW[i] * Ss[i]).sum((-2, -1))
            dP_n = dP_n + (dS[i] * Ss[i]).sum((-2, -1))
        if c is None:  # S' = -lr_{n-1} delta_{n-1} h_{n-1}^T
            hS = dot(h[..., -1:, :], dS[i].transpose(-1, -2))  # [.., 1, out]
            last = -(delta[..., -1:, :] * hS).sum(-1)[..., 0]
            dlr_last = last * 0 if dlr_last is None else dlr_last
            dlr_last = dlr_last + last
            dDelta[i][..., -1:, :] -= lr[..., -1:, None] * hS
            dH[i][..., -1:, :] -= dot(delta[..., -1:, :] * lr[..., -1:, None], dS[i])
        else:
            hS = dot(h, dS[i].transpose(-1, -2))
            dDelta[i] = dDelta[i] - c.unsqueeze(-1) * hS
            dH[i] = dH[i] - dot(delta * c.unsqueeze(-1), dS[i])
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
    dalpha, deta = decays_backward(dec, seg.alpha, seg.eta, dA, dM, db, dP, dDe)
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
        E = dot(deltas[j + 1], Wg[j + 1])
        dE = dDelta[j] * gp
        dP_pre[j] = dDelta[j] * E * ddact(pre[j])
        dDelta[j + 1] = dDelta[j + 1] + dot(dE, Wg[j + 1].transpose(-1, -2))
        dWg[j + 1] = dot(deltas[j + 1].transpose(-1, -2), dE)
    dout = 2.0 * dDelta[L - 1]
    dv = -dout
    dP_pre[L - 1] = dout
    # the forward chain h_{l+1} = act(p_l), p_l = h_l Wg_l^T, top-down
    for i in range(L - 1, -1, -1):
        dp = dP_pre[i]
        dWg[i] = dot(dp.transpose(-1, -2), inputs[i]) + (0 if dWg[i] is None else dWg[i])
        dh = dH[i] + dot(dp, Wg[i])
        if i > 0:
            dP_pre[i - 1] = dP_pre[i - 1] + dh * dact(pre[i - 1])
        else:
            dk = dh
    if dec.b is None and Ss is not None:
        dSs = [torch.zeros_like(s) for s in Ss]
    return dq, dk, dv, dtheta, deta, dalpha, dWs, dSs, dWg


def _as_segment(q, k, v, theta, eta, alpha, decays, qk) -> Segment:
    return Segment(q, k, v, theta, eta, alpha, Decays(*decays), qk)


def step_forward(
    seg_tensors,
    Ws,
    Ss,
    Wg,
    activation: str,
    clip,
    keep: bool,
    precision: str = "fp32",
    base=None,
):
    """One chunk segment forward on plain tensors (what `torch.compile` takes): seg_tensors
    = (q, k, v, theta, eta, alpha, (Da, A, De, P, M, b), qk). Returns (y, W', S', saved):
    saved (keep=True) holds the intermediates the backward step needs. precision: the
    products' operands (`operand_precision`; "fp32" as they are). base: W_0 per layer when
    the memory forgets toward it (Ws, Wg, W' deviations; `forward_segment`)."""
    act, dact = activation_fn(activation)
    seg = _as_segment(*seg_tensors)
    dot = operand_dot(precision)
    return forward_segment(seg, Ws, Ss, Wg, act, dact, clip, keep, dot=dot, base=base)


def step_backward(
    seg_tensors,
    Ws,
    Ss,
    Wg,
    saved,
    dy,
    dW,
    dS,
    activation: str,
    clip,
    fold: bool = False,
    precision: str = "fp32",
    base=None,
):
    """One chunk segment backward: the adjoint of its forward, from the forward's saved
    intermediates (recomputed from the entry state when saved is None). Returns (dq, dk,
    dv, dtheta, deta, dalpha, dWs, dSs, dWg, dBase); fold (the gradient weights are the
    entry weights, Wg = Ws): dWs holds the sum dWs + dWg, the whole gradient w.r.t. the
    entry weights, and dWg is None (inside a compiled step the sum is fused with its last
    kernels instead of costing two more operations per chunk). precision, base: as in
    `step_forward`; dBase (None without base) per layer, summed over the batch."""
    act, dact = activation_fn(activation)
    dot = operand_dot(precision)
    seg = _as_segment(*seg_tensors)
    if saved is None:
        _, _, _, saved = forward_segment(
            seg, Ws, Ss, Wg, act, dact, clip, True, state=False, dot=dot, base=base
        )
    ddact = activation_second_derivative(activation)
    *grads, dWs, dSs, dWg, dBase = backward_segment(
        seg, Ws, Ss, Wg, saved, dy, dW, dS, act, dact, ddact, clip, dot, base
    )
    if dBase is not None:
        dBase = [g.sum(0, keepdim=True) for g in dBase]
    if fold:
        return (*grads, [a + b for a, b in zip(dWs, dWg)], dSs, None, dBase)
    return (*grads, dWs, dSs, dWg, dBase)


def segment_tensors(seg: Segment):
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
