"""The Triton memory op under a user's `torch.compile`: one custom operator per pass.

A compiled function or mixer that calls the Triton backend must trace without a graph
break (`fullgraph=True`) and give what the eager autograd Function gives: output, final
state and every gradient, with and without an entry state, for bf16 inputs, without
momentum and forgetting, with each backward form, at a second sequence length, and when a
kernel fails to build under backend="auto". `torch.library.opcheck` checks the operators'
schemas, fake implementations and autograd registration.

As in test_lmm_triton.py, on CPU the kernels run under Triton's interpreter in a
subprocess that executes this file as a script; on a GPU the same checks run in-process
(marker `gpu`).
"""

from __future__ import annotations

import contextlib
import os
import sys

if __name__ == "__main__":  # the interpreter subprocess: before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import interpreter_helpers
import pytest
import torch
from lmm_helpers import make_inputs, rel_err


def _leaves(xs, dtype, device):
    return [
        None if x is None else x.to(device=device, dtype=dtype).detach().requires_grad_()
        for x in xs
    ]


def _call_and_grads(fn, gates, weights, state_inputs, dtype, device):
    """fn(*gates, weights, state) -> (y, final state); a loss on y and the whole final state.
    Returns (y, final state tensors, gradients of gates, weights and the entry state)."""
    from titans_seq.ops.lmm import MemoryState

    xs, ws = _leaves(gates, dtype, device), _leaves(weights, torch.float32, device)
    init = None
    if state_inputs is not None:
        w, s, g, offset = state_inputs
        init = MemoryState(*(tuple(_leaves(t, torch.float32, device)) for t in (w, s, g)), offset)
    y, st = fn(*xs, tuple(ws), init)
    ramp = torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)
    loss = (y.float() * ramp).sum()
    loss = loss + 0.1 * sum((t**2).sum() for t in (*st.weights, *st.momentum))
    loss = loss + 0.1 * sum(t.sum() for t in st.chunk_weights)
    leaves = [x for x in xs if x is not None]
    leaves += list(ws) if init is None else [*init.weights, *init.momentum, *init.chunk_weights]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
    state = [t.detach() for t in (*st.weights, *st.momentum, *st.chunk_weights)]
    return y.detach(), state, grads


def check_compiled_call_matches_eager(
    T=37, depth=2, dtype="float32", prefix=0, momentum=True, forgetting=True,
    backward="split", lengths=(), device="cpu", tol=1e-5, state_in_registers=None,
    overlap_backward=False,
):  # fmt: skip
    """`torch.compile(fullgraph=True)` of a function calling the Triton backend against the
    same call made eagerly. prefix > 0: the call enters mid-chunk from a state; lengths:
    further sequence lengths through the same compiled function."""
    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    torch._dynamo.reset()
    dtype = getattr(torch, dtype)
    options = TritonOptions(
        save_every=2,
        regenerate_groups=2,
        backward=backward,
        state_in_registers=state_in_registers,
        overlap_backward=overlap_backward,
    )

    def memory(q, k, v, theta, eta, alpha, weights, state):
        return lmm_memory(
            q, k, v, theta, eta, alpha, weights, chunk_size=16, initial_state=state,
            output_final_state=True, backend="triton", triton_options=options,
        )  # fmt: skip

    compiled = torch.compile(memory, fullgraph=True, backend="aot_eager")
    errors = {}
    for n in (T, *lengths):
        gates, weights = make_inputs(
            2, prefix + n, 2, 16, depth, 16, momentum=momentum, forgetting=forgetting
        )
        gates = [None if x is None else x.float() for x in gates]
        weights = tuple(w.float() for w in weights)
        state = None
        if prefix:
            head = [None if x is None else x[:, :prefix] for x in gates]
            _, st = lmm_memory(*head, weights, chunk_size=16, output_final_state=True)
            state = (st.weights, st.momentum, st.chunk_weights, st.offset)
            gates = [None if x is None else x[:, prefix:] for x in gates]
        eager = _call_and_grads(memory, gates, weights, state, dtype, device)
        with _side_stream_requests() as asked:
            graph = _call_and_grads(compiled, gates, weights, state, dtype, device)
        # the option reached the backward operator (the kernels' backward asks for a stream)
        assert set(asked) == ({overlap_backward} if backward == "split" else set())
        assert graph[0].dtype == dtype
        errors[f"T={n} y"] = rel_err(graph[0], eager[0])
        for i, (a, b) in enumerate(zip(graph[1], eager[1])):
            errors[f"T={n} state[{i}]"] = rel_err(a, b)
        for i, (a, b) in enumerate(zip(graph[2], eager[2])):
            assert torch.isfinite(a).all(), f"T={n}: gradient {i} is not finite"
            errors[f"T={n} grad[{i}]"] = rel_err(a, b)
    bad = {k: v for k, v in errors.items() if not v < tol}
    assert not bad, f"relative errors above {tol}: {bad}"


@contextlib.contextmanager
def _side_stream_requests():
    """Yields the `wanted` flags the backward asks `side_stream` for inside the block."""
    from titans_seq.ops.lmm.triton import autograd as ta

    original, asked = ta.side_stream, []

    def recording(device, wanted):
        asked.append(wanted)
        return original(device, wanted)

    ta.side_stream = recording
    try:
        yield asked
    finally:
        ta.side_stream = original


def check_compiled_mixer_matches_eager(T=29, device="cpu", autocast=False):
    """The lmm mixer with backend="triton" under `torch.compile(fullgraph=True)`: output,
    a streamed second call and every parameter gradient as eagerly; autocast: both under
    bf16 autocast (the memory itself computes in fp32 there: the rest rounds to bf16)."""
    import titans_seq as ts

    torch._dynamo.reset()
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=32, heads=2, memory_depth=2, backend="triton").to(device)
    compiled = torch.compile(mixer, fullgraph=True, backend="aot_eager")
    x = torch.randn(2, T, 32, device=device)
    results = []
    for run in (mixer, compiled):
        mixer.zero_grad()
        with torch.autocast(torch.device(device).type, torch.bfloat16, enabled=autocast):
            y1, state = run(x[:, :11])
            y2, _ = run(x[:, 11:], state)
        y = torch.cat([y1, y2], 1).float()
        (y * torch.linspace(-1, 1, y.numel(), device=device).view_as(y)).sum().backward()
        results.append((y.detach(), [p.grad.clone() for p in mixer.parameters()]))
    (y_eager, g_eager), (y_graph, g_graph) = results
    tol_y, tol_grad = (1e-2, 3e-2) if autocast else (1e-5, 1e-4)
    assert rel_err(y_graph, y_eager) < tol_y, rel_err(y_graph, y_eager)
    for a, b in zip(g_graph, g_eager):
        assert rel_err(a, b) < tol_grad, rel_err(a, b)


def check_operators_pass_opcheck():
    """`torch.library.opcheck` on both operators: schema, fake implementation (shapes,
    dtypes, strides), no aliasing, and the autograd registration of the forward."""
    from titans_seq.ops.lmm.triton import graph_op

    gates, weights = make_inputs(1, 21, 2, 16, 2, 16)
    q, k, v, theta, eta, alpha = (x.float().requires_grad_() for x in gates)
    W0 = [w.float().unsqueeze(0).requires_grad_() for w in weights]
    S0 = [torch.zeros_like(w).requires_grad_() for w in W0]
    G0 = [w.detach().clone() + 0.01 for w in W0]  # a call entering 3 tokens into a chunk
    offset, n_checkpoints = 3, 1
    # activation, clip, save_every, n_checkpoints, regenerate_groups, dot_precision,
    # backward, state_in_registers, overlap_backward, fallback
    fixed = ("silu", None, 2, n_checkpoints, 2, "ieee", "split", False, False, False)
    forward_args = (q, k, v, theta, eta, alpha, W0, S0, G0, offset, 16, *fixed)
    torch.library.opcheck(graph_op._forward_op, forward_args)
    out = graph_op._forward_op(*(x.detach() if torch.is_tensor(x) else x for x in forward_args))
    cW, cS = out[7:9], out[9:11]
    dy = torch.randn_like(q)
    d_state = [torch.randn_like(w) for w in (*W0, *W0, *W0)]
    backward_args = (
        q.detach(), k.detach(), v.detach(), theta.detach(), eta.detach(), alpha.detach(),
        G0, list(cW), list(cS), dy, d_state[:2], d_state[2:4], d_state[4:], offset, 16,
        "silu", None, 2, 2, "ieee", "split", False, False, False,
    )  # fmt: skip
    # (the backward operator has no autograd formula of its own: no double backward)
    tests = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(graph_op._backward_op, backward_args, test_utils=tests)


def check_build_failure_under_compile_falls_back_only_for_auto(T=37):
    """A kernel that fails to build (a simulated OutOfResources) inside the compiled graph:
    with the "auto" flag the forward runs the "torch" backend group by group, or the
    backward recomputes, with a warning once and the same output and gradients; without
    it (an explicit "triton") the error is raised."""
    import warnings

    from triton.runtime.errors import OutOfResources

    from titans_seq.ops.lmm.triton import autograd as ta
    from titans_seq.ops.lmm.triton import graph_op

    def fail(*args, **kwargs):
        raise OutOfResources(300000, 232448, "shared memory")

    gates, weights = make_inputs(1, T, 2, 16, 2, 16)
    gates = [None if x is None else x.float() for x in gates]
    weights = tuple(w.float() for w in weights)

    def memory(fallback):
        options = ta.TritonOptions(save_every=1)

        def call(q, k, v, theta, eta, alpha, weights, state):
            return graph_op.lmm_memory_triton_graph(
                q, k, v, theta, eta, alpha, weights, 16, state, True,
                fallback=fallback, triton_options=options,
            )  # fmt: skip

        return call

    reference = _call_and_grads(memory(False), gates, weights, None, torch.float32, "cpu")
    for module, attr, kernel in (
        (graph_op, "_forward", "forward"),
        (ta, "_backward_kernels", "backward"),
    ):
        original = getattr(module, attr)
        setattr(module, attr, fail)
        graph_op.auto_fallback.cache_clear()
        torch._dynamo.reset()
        try:
            explicit = torch.compile(memory(False), fullgraph=True, backend="aot_eager")
            try:  # not pytest.raises: this runs in the interpreter subprocess
                _call_and_grads(explicit, gates, weights, None, torch.float32, "cpu")
                raise AssertionError(f"explicit backend='triton' hid the {kernel} failure")
            except OutOfResources:
                pass
            auto = torch.compile(memory(True), fullgraph=True, backend="aot_eager")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = _call_and_grads(auto, gates, weights, None, torch.float32, "cpu")
                _call_and_grads(auto, gates, weights, None, torch.float32, "cpu")
            messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
            assert len(messages) == 1 and kernel in messages[0], messages
            assert set(graph_op.auto_fallback().failures) == {kernel}
            assert rel_err(result[0], reference[0]) < 1e-4
            for a, b in zip((*result[1], *result[2]), (*reference[1], *reference[2])):
                assert rel_err(a, b) < 1e-4, (kernel, rel_err(a, b))
        finally:
            setattr(module, attr, original)
            graph_op.auto_fallback.cache_clear()


CASES = {
    "prefix_state": dict(T=30, prefix=7),
    "short_and_second_length": dict(T=5, lengths=(21,)),
    "bf16_no_gates": dict(dtype="bfloat16", momentum=False, forgetting=False, tol=1e-2),
    "mixer": "mixer",
    "opcheck": "opcheck",
    "build_failure": "build_failure",
}
SLOW_CASES = {
    "fresh": dict(),
    "torch_backward": dict(T=30, prefix=7, backward="torch"),
    "depth1": dict(depth=1, T=23),
    "state_in_registers": dict(T=30, prefix=7, state_in_registers=True),
    # the option reaches the backward operator (a side stream on CUDA only)
    "overlap_backward": dict(T=70, prefix=7, overlap_backward=True),
    "mixer_bf16_autocast": "mixer_bf16_autocast",
}


def run_case(name: str) -> str:
    spec = {**CASES, **SLOW_CASES}[name]
    checks = {
        "mixer": check_compiled_mixer_matches_eager,
        "mixer_bf16_autocast": lambda: check_compiled_mixer_matches_eager(autocast=True),
        "opcheck": check_operators_pass_opcheck,
        "build_failure": check_build_failure_under_compile_falls_back_only_for_auto,
    }
    if isinstance(spec, str):
        checks[spec]()
    else:
        check_compiled_call_matches_eager(**spec)
    return "ok"


@pytest.fixture(scope="module")
def interpreter_results():
    return interpreter_helpers.interpreter_results(__file__, list(CASES))


@pytest.mark.parametrize("name", list(CASES))
def test_triton_op_under_torch_compile_matches_eager(interpreter_results, name):
    assert interpreter_results[name] == "ok", interpreter_results[name]


@pytest.mark.slow
def test_triton_op_under_torch_compile_slow_grid():
    results = interpreter_helpers.interpreter_results(__file__, list(SLOW_CASES))
    assert all(r == "ok" for r in results.values()), results


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name", [n for n, spec in {**CASES, **SLOW_CASES}.items() if isinstance(spec, dict)]
)
def test_triton_op_under_torch_compile_on_gpu(name):
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (no GPU on this machine)")
    check_compiled_call_matches_eager(**{**CASES, **SLOW_CASES}[name], device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("autocast", [False, True])
def test_triton_mixer_under_torch_compile_on_gpu(autocast):
    pytest.importorskip("triton")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (no GPU on this machine)")
    check_compiled_mixer_matches_eager(device="cuda", autocast=autocast)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    interpreter_helpers.report_cases(run_case, sys.argv[1:])
