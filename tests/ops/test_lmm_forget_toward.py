"""Forgetting toward the initial weights (forget_toward="initial"): every PyTorch backend
(the autograd dual form, the hand-written adjoint eager and compiled, the compiled walk over
full chunks) and the decode step against the token-by-token reference (outputs, states and
gradients, the initial weights' included, on odd shapes and carried states), streaming
against one shot, the recurrence's fixed point; a linear memory through its deviation from
W_0 (the Triton kernels' path), and the kernels refusing a deeper one."""

import warnings

import pytest
import torch
from lmm_helpers import make_inputs

import titans_seq as ts
from titans_seq.ops.lmm import (
    lmm_memory,
    lmm_memory_chunked,
    lmm_memory_reference,
    lmm_memory_step,
    torch_backend,
)
from titans_seq.ops.lmm.anchor import linear_on_deviation
from titans_seq.ops.lmm.segment_step import retrieval_adjoint, retrieve

ANCHOR = dict(forget_toward="initial")


def _leaves(gates, weights):
    gates = [None if g is None else g.detach().clone().requires_grad_() for g in gates]
    weights = tuple(w.detach().clone().requires_grad_() for w in weights)
    return gates, weights


def _run(fn, gates, weights, **options):
    y, state = fn(*gates, weights, output_final_state=True, **options)
    # a loss that weighs every position differently and reads the final state
    scale = torch.linspace(0.5, 1.5, y.numel(), dtype=y.dtype).view_as(y)
    loss = (y * scale).sum() + sum(w.pow(2).sum() for w in state.weights)
    leaves = [t for t in (*gates, *weights) if t is not None]
    return y, state, torch.autograd.grad(loss, leaves)


def _backend(name):
    def run(*args, **options):
        return lmm_memory(*args, backend=name, **options)

    return run


BACKENDS = {"chunked": lmm_memory_chunked, "torch": _backend("torch")}


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize(
    "T, chunk, depth, clip, prefix",
    [
        (1, 4, 2, None, 0),
        (3, 4, 2, None, 0),
        (13, 4, 2, 0.05, 0),
        (16, 4, 1, None, 0),
        (21, 8, 3, 0.5, 0),
        (14, 4, 2, None, 3),  # a carried state entering mid-chunk
        (12, 4, 2, 0.05, 8),  # a carried state at a chunk boundary
    ],
)
def test_backends_equal_reference_outputs_states_and_gradients(
    backend, T, chunk, depth, clip, prefix
):
    _check_against_reference(BACKENDS[backend], T, chunk, depth, clip, prefix)


@pytest.mark.slow
@pytest.mark.parametrize("walk", ["chunk_scan", "per_chunk"])
def test_compiled_walks_equal_reference(walk, monkeypatch):
    # a carried state entering mid-chunk: an eager partial segment, four full chunks (one
    # compiled scan on a CPU, or four compiled steps), an eager partial one; a compilation
    # that failed (reported as a RuntimeWarning, then run eagerly) fails the test
    if walk == "per_chunk":
        monkeypatch.setattr(torch_backend, "shared_chunk_scan", lambda: None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        _check_against_reference(_backend("compiled"), 19, 4, 2, 0.5, 3)


def _check_against_reference(run, T, chunk, depth, clip, prefix):
    gates, weights = _leaves(*make_inputs(2, prefix + T, 2, 5, depth, hidden=6))
    options = dict(chunk_size=chunk, inner_grad_clip=clip, **ANCHOR)
    if prefix:
        head = [None if g is None else g[:, :prefix].detach() for g in gates]
        # a state that has moved away from W_0 (its momentum too), as a stream carries it
        _, state = lmm_memory_reference(*head, weights, output_final_state=True, **options)
        options["initial_state"] = state.detach()
        gates = [None if g is None else g[:, prefix:].detach().requires_grad_() for g in gates]
    y, state, grads = _run(run, gates, weights, **options)
    y_ref, state_ref, grads_ref = _run(lmm_memory_reference, gates, weights, **options)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    assert state.offset == state_ref.offset
    finals = (state.weights, state.momentum, state.chunk_weights)
    finals_ref = (state_ref.weights, state_ref.momentum, state_ref.chunk_weights)
    for a, b in zip(sum(finals, ()), sum(finals_ref, ())):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_low_precision_inputs_follow_the_float64_reference(dtype):
    gates, weights = make_inputs(2, 19, 2, 5, 2)
    low = [None if g is None else g.to(dtype) for g in gates]
    y, _ = lmm_memory(*low, tuple(w.float() for w in weights), chunk_size=8, **ANCHOR)
    y_ref, _ = lmm_memory_reference(*gates, weights, chunk_size=8, **ANCHOR)
    assert y.dtype == dtype
    tol = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}[dtype]
    torch.testing.assert_close(y.double(), y_ref, rtol=tol, atol=tol)


def test_streaming_equals_one_shot_across_odd_splits():
    gates, weights = make_inputs(2, 29, 2, 4, 2)
    options = dict(chunk_size=6, **ANCHOR)
    whole, _ = lmm_memory(*gates, weights, **options)
    state, parts, start = None, [], 0
    for stop in (5, 6, 13, 14, 29):  # splits inside chunks, a one-token call (decode)
        piece = [None if g is None else g[:, start:stop] for g in gates]
        y, state = lmm_memory(
            *piece, weights, initial_state=state, output_final_state=True, **options
        )
        parts.append(y)
        start = stop
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("offset", [0, 2])
def test_decode_step_equals_reference(offset):
    gates, weights = make_inputs(2, offset + 1, 2, 4, 2)
    options = dict(chunk_size=4, **ANCHOR)
    head = [None if g is None else g[:, :offset] for g in gates]
    state = None
    if offset:
        _, state = lmm_memory_reference(*head, weights, output_final_state=True, **options)
    token = [None if g is None else g[:, offset:] for g in gates]
    token, weights = _leaves(token, weights)
    results = [
        _run(fn, token, weights, initial_state=state, **options)
        for fn in (lmm_memory_step, lmm_memory_reference)
    ]
    (y, final, grads), (y_ref, final_ref, grads_ref) = results
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    for a, b in zip(final.weights, final_ref.weights):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def test_without_writes_the_weights_return_to_the_initial_ones():
    # theta = 0: nothing is written, so the weights decay from wherever they are to W_0
    # (toward zero under the paper's forgetting)
    gates, weights = make_inputs(1, 40, 2, 4, 2)
    gates[3] = torch.zeros_like(gates[3])
    gates[5] = torch.full_like(gates[5], 0.5)
    far = tuple(w + 3.0 for w in weights)
    _, start = lmm_memory_reference(*[g[:, :1] for g in gates], far, output_final_state=True)
    for toward, target in (("initial", weights), ("zero", tuple(0 * w for w in weights))):
        _, state = lmm_memory(
            *[g[:, 1:] for g in gates], weights, initial_state=start,
            output_final_state=True, forget_toward=toward,
        )  # fmt: skip
        for w, t in zip(state.weights, target):
            torch.testing.assert_close(w[0], t, rtol=0, atol=1e-9)


def test_without_forgetting_both_targets_are_the_same_memory():
    gates, weights = make_inputs(2, 11, 2, 4, 2, forgetting=False)
    zero, _ = lmm_memory(*gates, weights, chunk_size=4, backend="torch")
    anchored, _ = lmm_memory(*gates, weights, chunk_size=4, **ANCHOR)
    torch.testing.assert_close(anchored, zero, rtol=1e-10, atol=1e-12)


def test_the_retrieval_adjoint_gives_the_base_its_gradient():
    # the hand-written adjoint's share of W_0 (`base`) against autograd through `retrieve`
    g = torch.Generator().manual_seed(3)
    B, H, n, d = 2, 2, 5, 4

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    q, A, Mlr = rnd(B, H, n, d), rnd(B, H, n).sigmoid(), rnd(B, H, n, n).tril()
    inputs, deltas = [rnd(B, H, n, d), rnd(B, H, n, 6)], [rnd(B, H, n, 6), rnd(B, H, n, d)]
    Ws = [rnd(B, H, 6, d), rnd(B, H, d, 6)]
    base = [rnd(1, H, 6, d).requires_grad_(), rnd(1, H, d, 6).requires_grad_()]
    qk = q @ inputs[0].transpose(-1, -2)
    act = torch.nn.functional.silu
    y, saved = retrieve(q, qk, A, None, Ws, None, inputs, deltas, Mlr, act, base=base)
    dy = rnd(*y.shape)
    expected = torch.autograd.grad((y * dy).sum(), base)

    def dact(z):
        s = torch.sigmoid(z)
        return s * (1 + z * (1 - s))

    found = retrieval_adjoint(dy, A, None, Ws, None, inputs, deltas, Mlr, saved, dact, base=base)
    for share, want in zip(found["dBase"], expected):
        torch.testing.assert_close(share.sum(0, keepdim=True), want, rtol=1e-10, atol=1e-12)


def _on_deviation(*args, forget_toward, **options):
    # the identity the Triton kernels run a linear memory through, here around the
    # "torch" backend's paper rule, so that it is checked on any machine
    assert forget_toward == "initial"
    return linear_on_deviation(_backend("torch"), *args, **options)


@pytest.mark.parametrize(
    "T, chunk, clip, prefix",
    [(1, 4, None, 0), (13, 4, 0.05, 0), (14, 4, None, 3), (12, 4, 0.05, 8), (21, 8, 0.5, 5)],
)
def test_a_linear_memory_on_its_deviation_equals_reference(T, chunk, clip, prefix):
    _check_against_reference(_on_deviation, T, chunk, 1, clip, prefix)


def test_the_triton_kernels_refuse_it_for_a_deeper_memory_by_name():
    gates, weights = make_inputs(1, 8, 2, 4, 2)
    with pytest.raises(ValueError, match="forget_toward='initial'.*2 layers, not 'triton'"):
        lmm_memory(*gates, weights, backend="triton", **ANCHOR)
    with pytest.raises(ValueError, match="2 layers, not 'triton'"):
        ts.build_mixer("lmm", 16, 2, backend="triton", memory={"forget_toward": "initial"})
    mixer = ts.build_mixer(
        "lmm", 16, 2, backend="triton", memory={"depth": 1, "forget_toward": "initial"}
    )
    assert mixer.backend == "triton"  # a linear memory runs the kernels on its deviation


def test_an_unknown_target_is_refused():
    gates, weights = make_inputs(1, 8, 2, 4, 2)
    with pytest.raises(ValueError, match="forget_toward must be one of"):
        lmm_memory(*gates, weights, forget_toward="init")
