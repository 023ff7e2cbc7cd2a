"""The "torch" backend: the chunk-parallel form with a hand-written backward.

`chunked.py` computes the memory with plain PyTorch operations under autograd: every one of
the ~100 small operations of a chunk becomes an autograd node, and on a CPU (or as GPU
kernel launches) their bookkeeping costs far more than their arithmetic. This module
computes the same function in one `torch.autograd.Function`:

* before the sequential walk, everything that does not depend on the memory weights is
  computed for all chunks at once: the decay products of the gates (A, P, Da, De, M = Da
  De, b = Da P) and the C x C products q k^T of the first layer;
* the forward walks the chunks with no autograd graph and keeps only the weights and
  momentum entering each chunk;
* the backward walks the chunks in reverse, recomputes each chunk's forward quantities
  from its entry state and applies the adjoint of the dual form (the formulas of
  docs/architecture.md, which the fused Triton backward implements for depth 1 and 2),
  here for any memory depth.

The token-by-token reference (`reference.py`) and the autograd dual form (`chunked.py`)
stay beside it as the obvious implementations; the tests compare all three.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.autograd.function import once_differentiable

from .chunked import _LOG_FLOOR, _segment_decays
from .clip import clip_factor, rank_one_sq_norm
from .memory_mlp import activation_fn
from .state import MemoryState, fresh_state, state_dtype


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


def _seg_tensors(seg: _Segment):
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


# torch.compile'd step functions, made on first use (keyed by whether their kernels are
# serial); None: compilation failed here
_COMPILED: dict[tuple[bool, str], object] = {}
_COMPILE_FAILURE: list[str] = []
# Inductor's options, tried in order until one compiles and runs. First its C++ wrapper:
# a chunk step is some 50 small kernels, and the default Python wrapper's per-kernel
# overhead (allocations, calls) costs more than their arithmetic on CPU (the C++ wrapper is
# about 1.25x faster for a whole layer at (1, 1024, 64); docs/benchmarks.md). Then the
# default wrapper, where the C++ one does not build; then the eager step.
COMPILE_OPTIONS: tuple[dict, ...] = ({"cpp_wrapper": True}, {})
_COMPILE_LEVEL: list[int] = [0]  # the index into COMPILE_OPTIONS in use
# With fewer (batch, head) pairs than threads, a chunk step's loops hold too little work to
# share: single-threaded kernels are then faster on CPU (1.16x for a layer at (1, 1024, 64)
# on 2 threads), while with B*H >= threads the threads pay (0.92x at B*H = 4 and 16 when
# serial; docs/benchmarks.md).
_SERIAL_OPTIONS = {"cpp.threads": 1}
# Recompilations: a step's graph depends on which of its arguments are None (a fresh
# stream's first chunk has no momentum), not on T (this backend lays full chunks out
# chunk-major, with the same strides for any T; `_segments`) nor on the grad mode (the
# steps take detached tensors). Dynamo compiles it for the first batch size and, at the
# first other one, once more with a dynamic batch size. Marking the batch dynamic from the
# start would save that compilation but costs 3-4% per step at a fixed batch size
# (measured at (4, 1024, 256)).


def compiled_steps(serial: bool = False):
    """(forward, backward) step functions compiled by torch.compile (Inductor: C++ on CPU,
    Triton on CUDA) with the first `COMPILE_OPTIONS` entry that has not failed (serial:
    with single-threaded CPU kernels), or None when compilation is unavailable (reported
    once)."""
    if _COMPILE_FAILURE:
        return None
    if (serial, "forward") not in _COMPILED:
        options = dict(COMPILE_OPTIONS[_COMPILE_LEVEL[0]])
        if serial:
            options.update(_SERIAL_OPTIONS)
        try:
            for name, fn in (("forward", step_forward), ("backward", step_backward)):
                _COMPILED[serial, name] = torch.compile(fn, options=options or None)
        except Exception as err:  # noqa: BLE001 - any failure: the next options, or eager
            _compile_failed(err)
            return compiled_steps(serial)
    return _COMPILED[serial, "forward"], _COMPILED[serial, "backward"]


def _compile_failed(err: BaseException) -> None:
    """Drop the compiled steps; move on to the next `COMPILE_OPTIONS` entry, or, after the
    last, to the eager step for the rest of the process with one warning."""
    import warnings

    _COMPILED.clear()
    if _COMPILE_LEVEL[0] + 1 < len(COMPILE_OPTIONS):
        _COMPILE_LEVEL[0] += 1
        return
    _COMPILE_FAILURE.append(f"{type(err).__name__}: {err}")
    warnings.warn(
        f"torch.compile of the LMM chunk step failed ({type(err).__name__}: "
        f"{str(err)[:300]}); the eager chunk step is used from now on",
        RuntimeWarning,
        stacklevel=3,
    )


def serial_kernels(weights: torch.Tensor) -> bool:
    """Whether a layer's compiled steps get single-threaded kernels: on CPU, with fewer
    (batch, head) pairs than torch threads. weights: [B, H, out, in]."""
    programs = weights.numel() // (weights.shape[-1] * weights.shape[-2])  # B * H
    return weights.device.type == "cpu" and programs < torch.get_num_threads()


def _run_step(which: str, compile_step: bool, full: bool, serial: bool, *args):
    """A forward or backward step, compiled for full chunks when asked and available
    (partial segments, whose shapes vary, stay eager), with a fallback through
    `COMPILE_OPTIONS` to the eager step. serial: `serial_kernels` of the layer (decided
    once per call, not per chunk); args: those of `step_forward` / `step_backward`."""
    eager = step_forward if which == "forward" else step_backward
    while compile_step and full:
        steps = compiled_steps(serial)
        if steps is None:
            break
        try:
            return steps[0 if which == "forward" else 1](*args)
        except Exception as err:  # noqa: BLE001 - a compiler error: the next options
            _compile_failed(err)
    return eager(*args)


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
        # the step functions' view of each segment, built once for the forward and the backward
        seg_tensors = [_seg_tensors(seg) for seg in segs]
        cfg["serial"] = cfg["compile"] and serial_kernels(W0[0])
        for i, seg in enumerate(seg_tensors):
            Wg = G0 if (i == 0 and offset > 0) else W
            entries.append((W, S))
            full = cfg["lengths"][i] == C
            y, W, S, sv = _run_step(
                "forward", cfg["compile"], full, cfg["serial"], seg, tuple(W), _tuple_or_none(S),
                tuple(Wg), cfg["activation"], cfg["clip"], True,
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
        ctx.segments = seg_tensors
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
            dq, dk, dv, dth, deta, dal, dWs, dSs, dWg = _run_step(
                "backward", cfg["compile"], full, cfg["serial"], segs[i], Ws, Ss,
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
