"""The chain / retrieval split of a segment step (`segment_step.py`): the retrieval and its
adjoint over a stack of segments equal the per-segment steps, and the split adjoint equals
autograd through the forward."""

from __future__ import annotations

import pytest
import torch

from titans_seq.ops.lmm.memory_mlp import activation_fn, activation_second_derivative
from titans_seq.ops.lmm.segment_step import (
    backward_segment,
    chain_backward,
    chain_forward,
    forward_segment,
    retrieval_adjoint,
    retrieve,
    split_segments,
)

ACT, DACT = activation_fn("silu")
DDACT = activation_second_derivative("silu")


def _segments(momentum: bool, B=2, H=3, T=40, d=8, C=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    theta = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 0.1
    eta = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 0.5 + 0.4 if momentum else None
    alpha = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 0.1
    segments = split_segments(q, k, v, theta, eta, alpha, [C] * (T // C), C)
    weights = [torch.randn(B, H, d, d, generator=g, dtype=torch.float64) / d**0.5 for _ in range(2)]
    return segments, weights


@pytest.mark.parametrize("momentum", [True, False])
def test_the_stacked_retrieval_and_its_adjoint_equal_the_per_segment_steps(momentum):
    segments, W = _segments(momentum)
    S = None  # a fresh stream: zero momentum into the first segment
    entries, chains, ys, saved = [], [], [], []
    for seg in segments:
        y, W_next, S_next, sv = forward_segment(seg, W, S, W, ACT, DACT, 4.0, keep=True)
        W2, S2, chain = chain_forward(seg, W, S, W, ACT, DACT, 4.0)
        for a, b in zip([*W_next, *S_next], [*W2, *S2]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
        entries.append((W, S))
        chains.append(chain)
        ys.append(y)
        saved.append(sv)
        W, S = W_next, S_next

    def stack(xs):
        return torch.stack(xs, 2)

    L = len(W)
    Wst = [stack([e[0][i] for e in entries]) for i in range(L)]
    Sst = [stack([e[0][i] * 0 if e[1] is None else e[1][i] for e in entries]) for i in range(L)]
    hs = [stack([c["inputs"][i] for c in chains]) for i in range(L)]
    deltas = [stack([c["deltas"][i] for c in chains]) for i in range(L)]
    Mlr = stack([c["Mlr"] for c in chains])
    A = stack([s.dec.A for s in segments])
    b = None if not momentum else stack([s.dec.b for s in segments])
    q, qk = stack([s.q for s in segments]), stack([s.qk for s in segments])
    y, rsaved = retrieve(q, qk, A, b, Wst, Sst, hs, deltas, Mlr, ACT)
    torch.testing.assert_close(y, stack(ys), rtol=1e-12, atol=1e-12)

    dy = torch.randn_like(y)
    shares = retrieval_adjoint(dy, A, b, Wst, Sst, hs, deltas, Mlr, rsaved, DACT)
    dW = [torch.randn_like(w) for w in W]
    dS = [torch.randn_like(w) for w in W]
    for j in range(len(segments) - 1, -1, -1):
        Ws, Ss = entries[j]
        expected = backward_segment(
            segments[j], Ws, Ss, Ws, saved[j], dy[:, :, j], dW, dS, ACT, DACT, DDACT, 4.0
        )

        def take(x, j=j):
            return None if x is None else x[:, :, j].clone()

        share = {
            k: [take(x) for x in v] if isinstance(v, list) else take(v) for k, v in shares.items()
        }
        got = chain_backward(
            segments[j], Ws, Ss, Ws, chains[j], share, dW, dS, ACT, DACT, DDACT, 4.0
        )
        for e, g in zip(expected, got):
            if isinstance(e, list):
                for a, c in zip(e, g):
                    assert (a is None) == (c is None)
                    if a is not None:
                        torch.testing.assert_close(c, a, rtol=1e-12, atol=1e-12)
            elif e is None:
                assert g is None
            else:
                torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)
        dW = [a + c for a, c in zip(expected[6], expected[8])]
        dS = expected[7] if expected[7][0] is not None else dS


def test_the_split_adjoint_is_autograd_through_the_forward():
    segments, W = _segments(True, B=1, H=2, T=8, d=4, C=8, seed=1)
    seg = segments[0]
    Ws = [w.clone().requires_grad_() for w in W]
    Ss = [torch.randn_like(w).mul_(0.1).requires_grad_() for w in W]
    y, W2, S2, sv = forward_segment(seg, Ws, Ss, Ws, ACT, DACT, 1.0, keep=True)
    dy = torch.randn_like(y)
    dW = [torch.randn_like(w) for w in W]
    dS = [torch.randn_like(w) for w in W]
    loss = (y * dy).sum() + sum((a * b).sum() for a, b in zip(W2, dW))
    loss = loss + sum((a * b).sum() for a, b in zip(S2, dS))
    auto = torch.autograd.grad(loss, [*Ws, *Ss])
    with torch.no_grad():
        grads = backward_segment(
            seg, W, [s.detach() for s in Ss], W, sv, dy, dW, dS, ACT, DACT, DDACT, 1.0
        )
    dWs = [a + c for a, c in zip(grads[6], grads[8])]
    for a, c in zip([*dWs, *grads[7]], auto):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)
