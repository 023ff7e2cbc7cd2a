"""The "compiled" backend on a CPU walks a call's full chunks as one compiled loop per
direction (`chunk_scan.py`). It agrees with the eager per-chunk steps on calls with a partial
first and last segment, streamed or not, with every combination of gates; a shape change
compiles nothing new; a compilation failure
runs the same walk eagerly, with one warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from titans_seq.ops.lmm import chunk_scan, lmm_memory, torch_backend
from titans_seq.ops.lmm.state import fresh_state

pytestmark = pytest.mark.skipif(not chunk_scan.available(), reason="no scan operator")


def inputs(B=2, T=70, H=2, d=8, depth=2, gates=(True, True), seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=dtype), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g, dtype=dtype), dim=-1)
    v = torch.randn(B, T, H, d, generator=g, dtype=dtype)
    theta = 0.1 * torch.rand(B, T, H, generator=g, dtype=dtype)
    eta = 0.5 + 0.45 * torch.rand(B, T, H, generator=g, dtype=dtype)  # momentum
    alpha = 0.1 * torch.rand(B, T, H, generator=g, dtype=dtype)  # forgetting
    xs = [q, k, v, theta, eta if gates[0] else None, alpha if gates[1] else None]
    weights = tuple(torch.randn(H, d, d, generator=g, dtype=dtype) / 3 for _ in range(depth))
    return xs, weights


def stream(backend, xs, weights, splits, initial_state=None, **kw):
    """The memory over xs in calls of `splits` tokens, the state carried between them: y,
    the final state's tensors and the gradients of the inputs and weights of a loss on both."""
    leaves = [None if x is None else x.clone().requires_grad_() for x in xs]
    ws = [w.clone().requires_grad_() for w in weights]
    state, ys, start = initial_state, [], 0
    for n in splits:
        part = [None if x is None else x[:, start : start + n] for x in leaves]
        y, state = lmm_memory(
            *part, tuple(ws), chunk_size=16, backend=backend, initial_state=state,
            output_final_state=True, **kw,
        )  # fmt: skip
        ys.append(y)
        start += n
    y = torch.cat(ys, 1)
    final = [*state.weights, *state.momentum]
    (y.square().sum() + sum(t.sin().sum() for t in final)).backward()
    # (weights that a caller-built initial state replaces get no gradient)
    grads = [x.grad for x in (*leaves, *ws) if x is not None and x.grad is not None]
    return y.detach(), [t.detach() for t in final], grads


def assert_same(got, want, rtol=1e-10):
    """Each tensor to rtol of the largest magnitude of its reference: in float32 the gates'
    gradients (divided by small gate values in the decays' adjoint) move by some 1e-5 of
    their scale between two summation orders."""
    (y_a, st_a, g_a), (y_b, st_b, g_b) = got, want
    for a, b in zip([y_a, *st_a, *g_a], [y_b, *st_b, *g_b], strict=True):
        torch.testing.assert_close(a, b, rtol=rtol, atol=rtol * max(b.abs().max().item(), 1e-6))


@pytest.fixture
def fresh_scan(monkeypatch):
    """A chunk scan of this test's own (no walks compiled yet) for "compiled" calls."""
    scan = chunk_scan.ChunkScan()
    monkeypatch.setattr(torch_backend, "shared_chunk_scan", lambda: scan)
    return scan


def test_the_chunk_scan_matches_the_eager_steps_streamed(fresh_scan):
    """In float64, where both agree to rounding: calls of 5 tokens (no full chunk), 65
    (a partial head, three full chunks in the scan, a partial tail) and 50 (a head, two
    full chunks, a tail), with the inner-gradient clip; the final state's gradient flows
    into the last call's tail and the scan."""
    xs, weights = inputs(T=120)
    got = stream("compiled", xs, weights, [5, 65, 50], inner_grad_clip=0.5)
    want = stream("torch", xs, weights, [5, 65, 50], inner_grad_clip=0.5)
    assert len(fresh_scan) == 1
    assert_same(got, want)


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        dict(gates=(True, False)),  # no forgetting: Da is the causal mask, A is one
        dict(gates=(False, True), activation="gelu"),  # no momentum: M is Da
        dict(gates=(False, False), depth=1),
        dict(depth=3, splits=[64]),  # whole chunks only: nothing eager beside the scan
        dict(explicit_state=True, splits=[37, 40]),  # a caller-built (expanded) state
    ],
    ids=["no_forgetting", "no_momentum_gelu", "no_gates_depth1", "depth3_whole", "given_state"],
)
def test_the_chunk_scan_matches_the_eager_steps_for_every_layout(fresh_scan, case):
    case = dict(case)
    splits = case.pop("splits", [70])
    explicit = case.pop("explicit_state", False)
    xs, weights = inputs(gates=case.pop("gates", (True, True)), depth=case.pop("depth", 2))
    state = fresh_state(weights, 2, torch.float64) if explicit else None
    got = stream("compiled", xs, weights, splits, initial_state=state, **case)
    want = stream("torch", xs, weights, splits, initial_state=state, **case)
    assert len(fresh_scan) == 1
    assert_same(got, want)


@pytest.mark.slow
def test_float32_with_a_single_batch_and_head_runs_serial_kernels(fresh_scan):
    """One (batch, head) pair on two threads: the walk's kernels are single-threaded."""
    xs, weights = inputs(B=1, H=1, T=53, dtype=torch.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = stream("compiled", xs, weights, [53])
    finally:
        torch.set_num_threads(threads)
    want = stream("torch", xs, weights, [53])
    assert [serial for _, serial in fresh_scan._walks] == [True]
    assert_same(got, want, rtol=1e-4)


def test_lengths_and_batch_sizes_compile_each_walk_once(monkeypatch, fresh_scan):
    """A fit meets many lengths and a few batch sizes: the number of chunks and the batch
    size are symbolic from the first compilation, so no later shape compiles again.
    Dynamo's graphs (run here without Inductor) agree with eager."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    real_compile = torch.compile

    def counting(fn, fullgraph=False, options=None, **kwargs):
        return real_compile(fn, fullgraph=fullgraph, backend=counter)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", counting)
    try:
        for B, T in ((3, 37), (3, 53), (3, 100), (4, 70), (6, 40), (2, 90)):
            xs, weights = inputs(B=B, T=T)
            assert_same(stream("compiled", xs, weights, [T]), stream("torch", xs, weights, [T]))
    finally:
        torch._dynamo.reset()
    assert counter.frame_count == 2  # the forward and the backward walk


def test_a_walk_that_cannot_compile_runs_eagerly_with_one_warning(monkeypatch, fresh_scan):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    xs, weights = inputs(T=40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = stream("compiled", xs, weights, [40])
        stream("compiled", xs, weights, [40])
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "eagerly" in messages[0]
    assert len(fresh_scan) == 0
    assert_same(got, stream("torch", xs, weights, [40]))
