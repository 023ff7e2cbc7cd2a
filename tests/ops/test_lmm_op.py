"""The chunk-parallel memory op against the token-by-token reference (forward and gradients).

Two chunk-parallel backends are checked: "chunked" (the dual form under autograd) and
"torch" (the same form with a hand-written backward, `ops/lmm/torch_backend.py`).
"""

import pytest
import torch
from lmm_helpers import make_inputs, rel_err

from titans_seq.ops.lmm import lmm_memory

TOL = {torch.float64: 1e-9, torch.float32: 1e-4}


def run(backend, gates, weights, **kw):
    return lmm_memory(*gates, weights, backend=backend, **kw)


FAST = ["chunked", "torch"]


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("T", [1, 5, 16, 37, 100])
@pytest.mark.parametrize("chunk_size", [1, 4, 16])
def test_chunked_matches_reference_forward_and_gradients(backend, dtype, depth, T, chunk_size):
    gates, weights = make_inputs(T=T, depth=depth, dtype=dtype, requires_grad=True, seed=T + depth)
    inputs = [t for t in (*gates, *weights) if t is not None]
    outs = {}
    for name in ("reference", backend):
        y, state = run(name, gates, weights, chunk_size=chunk_size, output_final_state=True)
        # a loss that touches the output and every part of the final state
        loss = (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum()
        loss = loss + sum((w**2).sum() for w in (*state.weights, *state.momentum)) * 0.1
        if state.offset:
            loss = loss + 0.1 * sum(w.sum() for w in state.chunk_weights)
        grads = torch.autograd.grad(loss, inputs)
        outs[name] = (y, state, grads)
    (y_ref, s_ref, g_ref), (y_chk, s_chk, g_chk) = outs["reference"], outs[backend]
    tol = TOL[dtype]
    assert y_chk.dtype == dtype
    assert rel_err(y_chk, y_ref) < tol
    for a, b in zip(
        (*s_chk.weights, *s_chk.momentum, *s_chk.chunk_weights),
        (*s_ref.weights, *s_ref.momentum, *s_ref.chunk_weights),
    ):
        assert rel_err(a, b) < tol
    assert s_chk.offset == s_ref.offset == T % chunk_size
    for a, b in zip(g_chk, g_ref):
        assert torch.isfinite(a).all()
        assert rel_err(a, b) < tol


def _partial_loss(part, y, state):
    """A loss reading only some of the op's outputs (the others get no gradient)."""
    if part == "output":
        return y.sin().sum()
    if part == "weights":
        return sum((w**2).sum() for w in state.weights)
    if part == "momentum":
        return sum(s.sin().sum() for s in state.momentum)
    if part == "chunk_weights":
        return sum(g.cos().sum() for g in state.chunk_weights)
    return y.sin().sum() + state.momentum[-1].sum()  # "output+last momentum"


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize(
    "part", ["output", "weights", "momentum", "chunk_weights", "output+last momentum"]
)
@pytest.mark.parametrize("T", [5, 16, 21])
def test_gradients_when_the_loss_reads_only_some_outputs(backend, part, T):
    """Unused outputs reach the backward as no gradient at all (the hand-written backward
    then skips the final state's adjoint); every input gradient must still match."""
    gates, weights = make_inputs(T=T, depth=2, requires_grad=True, seed=T)
    inputs = [t for t in (*gates, *weights) if t is not None]
    grads = {}
    for name in ("reference", backend):
        y, state = run(name, gates, weights, chunk_size=8, output_final_state=True)
        loss = _partial_loss(part, y, state)
        grads[name] = torch.autograd.grad(loss, inputs, allow_unused=True)
    for a, b in zip(grads[backend], grads["reference"]):
        if b is None or not b.any():
            assert a is None or not a.any()
            continue
        assert torch.isfinite(a).all()
        assert rel_err(a, b) < 1e-9


@pytest.mark.parametrize("backend", FAST)
@pytest.mark.parametrize("momentum,forgetting", [(False, False), (True, False), (False, True)])
@pytest.mark.parametrize("depth", [1, 2])
def test_ablations_match_reference(backend, momentum, forgetting, depth):
    gates, weights = make_inputs(
        T=23, depth=depth, momentum=momentum, forgetting=forgetting, requires_grad=True
    )
    inputs = [t for t in (*gates, *weights) if t is not None]
    results = []
    for name in ("reference", backend):
        y, s = run(name, gates, weights, chunk_size=4, output_final_state=True)
        results.append((y, s, torch.autograd.grad(y.sin().sum(), inputs)))
    assert rel_err(results[1][0], results[0][0]) < 1e-9
    for a, b in zip(results[1][1].momentum, results[0][1].momentum):
        assert rel_err(a, b) < 1e-9
    for a, b in zip(results[1][2], results[0][2]):
        assert rel_err(a, b) < 1e-9


@pytest.mark.parametrize("backend", ["reference", *FAST])
def test_inner_gradient_clip_matches_reference_and_binds(backend):
    gates, weights = make_inputs(T=21, depth=2, requires_grad=True)
    y_ref, _ = run("reference", gates, weights, chunk_size=4, inner_grad_clip=0.05)
    y, _ = run(backend, gates, weights, chunk_size=4, inner_grad_clip=0.05)
    y_free, _ = run(backend, gates, weights, chunk_size=4)
    assert rel_err(y, y_ref) < 1e-9
    assert rel_err(y, y_free) > 1e-3  # the clip is active at this size


def test_linear_memory_without_momentum_or_forgetting_is_the_delta_rule():
    """depth 1, no momentum, no forgetting, chunk 1: W_t = W_{t-1} - 2 theta_t (W k - v) k^T."""
    (q, k, v, theta, _, _), (W0,) = make_inputs(B=1, T=9, H=1, d=3, depth=1)
    y, _ = lmm_memory(q, k, v, theta, None, None, (W0,), chunk_size=1)
    W = W0[0].clone()
    for t in range(9):
        kt, vt, qt = k[0, t, 0], v[0, t, 0], q[0, t, 0]
        W = W - 2 * theta[0, t, 0] * torch.outer(W @ kt - vt, kt)
        torch.testing.assert_close(y[0, t, 0], W @ qt, rtol=1e-12, atol=1e-12)


def test_mini_batch_gradients_are_taken_at_the_chunk_start():
    """Linear memory, no momentum/forgetting, chunk C: every token of a chunk uses W_(c)."""
    (q, k, v, theta, _, _), (W0,) = make_inputs(B=1, T=8, H=1, d=3, depth=1)
    y, _ = lmm_memory(q, k, v, theta, None, None, (W0,), chunk_size=4)
    W = W0[0].clone()
    for t in range(8):
        if t % 4 == 0:
            Wc = W.clone()
        W = W - 2 * theta[0, t, 0] * torch.outer(Wc @ k[0, t, 0] - v[0, t, 0], k[0, t, 0])
        torch.testing.assert_close(y[0, t, 0], W @ q[0, t, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["reference", *FAST])
@pytest.mark.parametrize("depth", [1, 2])
def test_streaming_equals_one_shot(backend, depth):
    T, C = 45, 8
    gates, weights = make_inputs(T=T, depth=depth)
    y_full, s_full = run(backend, gates, weights, chunk_size=C, output_final_state=True)
    g = torch.Generator().manual_seed(depth)
    for _ in range(3):
        cuts = sorted(torch.randperm(T - 1, generator=g)[:5].add(1).tolist())
        bounds, state, pieces = [0, *cuts, T], None, []
        for a, b in zip(bounds[:-1], bounds[1:]):
            part = [None if x is None else x[:, a:b] for x in gates]
            y, state = run(
                backend, part, weights, chunk_size=C, initial_state=state, output_final_state=True
            )
            pieces.append(y)
        assert rel_err(torch.cat(pieces, dim=1), y_full) < 1e-12
        for a, b in zip(state.weights, s_full.weights):
            assert rel_err(a, b) < 1e-12


def test_one_token_pieces_equal_one_shot():
    gates, weights = make_inputs(T=11, depth=2)
    y_full, _ = run("torch", gates, weights, chunk_size=4)
    state, pieces = None, []
    for t in range(11):
        part = [None if x is None else x[:, t : t + 1] for x in gates]
        y, state = run(
            "torch", part, weights, chunk_size=4, initial_state=state, output_final_state=True
        )
        pieces.append(y)
    assert rel_err(torch.cat(pieces, 1), y_full) < 1e-12


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_inputs_keep_a_float32_state(dtype):
    gates, weights = make_inputs(T=37, depth=2, dtype=torch.float32)
    low = [None if x is None else x.to(dtype) for x in gates]
    y_ref, _ = run("reference", gates, weights, chunk_size=16)
    y, state = run("torch", low, weights, chunk_size=16, output_final_state=True)
    assert y.dtype == dtype and state.weights[0].dtype == torch.float32
    assert rel_err(y, y_ref) < 3e-2  # bf16/fp16 rounding of the inputs only


def test_causality_of_the_op():
    gates, weights = make_inputs(T=20, depth=2)
    y, _ = run("torch", gates, weights, chunk_size=8)
    perturbed = [None if x is None else x.clone() for x in gates]
    for x in perturbed:
        if x is not None:
            x[:, 13:] = x[:, 13:] * 0.5 + 0.1
    y2, _ = run("torch", perturbed, weights, chunk_size=8)
    torch.testing.assert_close(y2[:, :13], y[:, :13], rtol=0, atol=0)
    assert not torch.allclose(y2[:, 13:], y[:, 13:])


def test_bad_inputs_raise_clear_errors():
    (q, k, v, theta, eta, alpha), weights = make_inputs(T=5, depth=2)
    with pytest.raises(ValueError, match=r"\[B, T, H, d\]"):
        lmm_memory(q[0], k, v, theta, eta, alpha, weights)
    with pytest.raises(ValueError, match="theta"):
        lmm_memory(q, k, v, theta[:, :3], eta, alpha, weights)
    with pytest.raises(ValueError, match="weights\\[1\\]"):
        lmm_memory(q, k, v, theta, eta, alpha, (weights[0], weights[1][:, :2]))
    with pytest.raises(ValueError, match="empty"):
        lmm_memory(q[:, :0], k[:, :0], v[:, :0], theta[:, :0], eta[:, :0], alpha[:, :0], weights)
    with pytest.raises(ValueError, match="backend"):
        lmm_memory(q, k, v, theta, eta, alpha, weights, backend="cuda-magic")
    with pytest.raises(TypeError, match="floating"):
        lmm_memory(q.long(), k, v, theta, eta, alpha, weights)
    with pytest.raises(ValueError, match="chunk_size"):
        lmm_memory(q, k, v, theta, eta, alpha, weights, chunk_size=0)
    _, state = lmm_memory(q, k, v, theta, eta, alpha, weights, output_final_state=True)
    with pytest.raises(ValueError, match="initial_state"):
        lmm_memory(q[:1], k[:1], v[:1], theta[:1], eta[:1], alpha[:1], weights, initial_state=state)
