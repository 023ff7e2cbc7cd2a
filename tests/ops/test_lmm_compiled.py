"""The "compiled" backend chunk by chunk (its path on a GPU, and on a CPU where PyTorch has
no scan operator; test_lmm_chunk_scan.py covers the CPU's chunk scan): Inductor-compiled
chunk steps agree with the eager ones, on the Dynamo-free graph of a layout's first
geometry and on the torch.compile'd one of the others; a step whose C++ wrapper does not
build falls back to Inductor's default wrapper silently, and a compilation failure with
every option to the eager step with one warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from titans_seq.ops.lmm import lmm_memory, torch_backend
from titans_seq.ops.lmm.compiled_step import StepCompiler
from titans_seq.ops.lmm.segment_step import step_backward, step_forward
from titans_seq.ops.lmm.state import fresh_state


@pytest.fixture(autouse=True)
def chunk_by_chunk(monkeypatch):
    """Every "compiled" call of this file steps its chunks one by one."""
    monkeypatch.setattr(torch_backend, "shared_chunk_scan", lambda: None)


def inputs(B=2, T=37, H=2, d=8, hidden=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1)
    v = torch.randn(B, T, H, d, generator=g)
    gates = [0.2 * torch.rand(B, T, H, generator=g) for _ in range(3)]
    weights = (
        torch.randn(H, hidden, d, generator=g) / 3,
        torch.randn(H, d, hidden, generator=g) / 3,
    )
    return [q, k, v, *gates], weights


def run(backend, xs, weights, **kw):
    xs = [x.clone().requires_grad_() for x in xs]
    ws = [w.clone().requires_grad_() for w in weights]
    y, state = lmm_memory(
        *xs, tuple(ws), chunk_size=16, backend=backend, output_final_state=True, **kw
    )
    (y.square().sum() + state.weights[0].sum()).backward()
    return y.detach(), [t.grad for t in (*xs, *ws)]


def assert_gradients_close(grads, reference):
    """Float32 gradients of two backends, each to 1e-4 of its reference's largest magnitude:
    a different summation order moves every element by rounding of the tensor's scale, and
    the gates' gradients (divided by small gate values in the decays' adjoint) by some 1e-5
    of it, which an absolute 1e-5 refused on some CPUs."""
    for a, b in zip(grads, reference, strict=True):
        scale = b.abs().max().item()
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * max(scale, 1e-6))


@pytest.mark.parametrize("B, H", [(2, 2), (1, 1)], ids=["threaded", "serial"])
def test_compiled_steps_match_the_eager_ones(B, H):
    """T = 37 with chunk 16: two compiled full chunks and an eager partial one, with
    multi-threaded kernels and (one (batch, head) pair on two threads) serial ones."""
    xs, weights = inputs(B=B, H=H)
    y_eager, g_eager = run("torch", xs, weights, inner_grad_clip=1.0)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        y_comp, g_comp = run("compiled", xs, weights, inner_grad_clip=1.0)
    finally:
        torch.set_num_threads(threads)
    torch.testing.assert_close(y_comp, y_eager, rtol=1e-5, atol=1e-6)
    assert_gradients_close(g_comp, g_eager)


def fresh_compiler(monkeypatch) -> StepCompiler:
    """A compiler of its own for this test's "compiled" calls: no graphs yet, the compile
    options at their first level."""
    compiler = StepCompiler(step_forward, step_backward)
    monkeypatch.setattr(torch_backend, "shared_step_compiler", lambda: compiler)
    return compiler


def compiled_by_dynamo(module):
    """torch.compile(module) with Dynamo's caches emptied first, so that the frames it runs
    are compiled for this test rather than run eagerly past an earlier test's recompile
    limit (a comparison with eager would then compare eager with itself)."""
    torch._dynamo.reset()
    return torch.compile(module)


def graphs_compiled() -> int:
    """Graphs Dynamo has compiled since the last reset."""
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def test_a_compilation_failure_falls_back_to_eager_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler here")

    fresh_compiler(monkeypatch)
    monkeypatch.setattr(torch._inductor, "compile", broken)
    monkeypatch.setattr(torch, "compile", broken)
    xs, weights = inputs(T=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, grads = run("compiled", xs, weights)
        run("compiled", xs, weights)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "eager" in messages[0]
    y_eager, g_eager = run("torch", xs, weights)
    torch.testing.assert_close(y, y_eager, rtol=0, atol=0)


def test_without_the_cpp_wrapper_the_default_wrapper_is_used_silently(monkeypatch):
    real_compile = torch._inductor.compile
    asked = []

    def no_cpp_wrapper(graph, example_inputs, options=None):
        asked.append(options)
        if options and options.get("cpp_wrapper"):

            def fails_when_run(*args):
                raise RuntimeError("the C++ wrapper does not build here")

            return fails_when_run
        return real_compile(graph, example_inputs, options=options)

    compiler = fresh_compiler(monkeypatch)
    monkeypatch.setattr(torch._inductor, "compile", no_cpp_wrapper)
    xs, weights = inputs(T=20)  # one full chunk: a forward and a backward step
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        y, grads = run("compiled", xs, weights)
    assert compiler.level == 1 and compiler.failure is None
    # the forward with the C++ wrapper fails when run; the forward and the backward
    # without it compile and run
    assert len(asked) == 3 and asked[0]["cpp_wrapper"]
    assert not any((o or {}).get("cpp_wrapper") for o in asked[1:])
    y_eager, g_eager = run("torch", xs, weights)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    assert_gradients_close(grads, g_eager)


def test_fewer_heads_than_threads_get_single_threaded_kernels(monkeypatch):
    asked = []

    def records(graph, example_inputs, options=None):
        asked.append(options)
        return graph  # the traced step: this test checks which options are asked for

    fresh_compiler(monkeypatch)
    monkeypatch.setattr(torch._inductor, "compile", records)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run("compiled", *inputs(B=1, H=1))  # one (batch, head) pair, two threads
        run("compiled", *inputs(B=2, H=1))
    finally:
        torch.set_num_threads(threads)
    serial = {"cpp_wrapper": True, "cpp.threads": 1}
    threaded = {"cpp_wrapper": True}
    # each: a fresh stream's first chunk and the next one, forward then backward
    assert asked == [serial] * 4 + [threaded] * 4


def test_sequence_lengths_and_grad_mode_do_not_recompile_a_step(monkeypatch):
    """A fit meets many sequence lengths, several batch sizes (a last partial batch,
    validation batches) and runs with and without autograd. Each step layout (a fresh
    stream's first chunk, the chunks after it; forward and backward) compiles once without
    Dynamo for the first batch size and once through Dynamo, with a dynamic batch size, for
    all others; neither the length nor the grad mode compiles it again. Both kinds of graph
    agree with the eager steps."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    real_compile, real_inductor = torch.compile, torch._inductor.compile
    direct = []

    def counting(fn, options=None, **kwargs):
        return real_compile(fn, backend=counter)

    def counting_inductor(graph, example_inputs, options=None):
        direct.append(graph)
        return real_inductor(graph, example_inputs, options=options)

    torch._dynamo.reset()  # frames compiled by earlier tests would hide recompilations
    fresh_compiler(monkeypatch)
    monkeypatch.setattr(torch, "compile", counting)
    monkeypatch.setattr(torch._inductor, "compile", counting_inductor)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # B * H >= 2 below: the threaded kernels throughout
    try:
        for B, T in ((3, 37), (3, 53), (4, 70), (6, 40)):
            xs, weights = inputs(B=B, T=T)
            y, grads = run("compiled", xs, weights)
            y_eager, g_eager = run("torch", xs, weights)
            torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
            assert_gradients_close(grads, g_eager)
            with torch.no_grad():
                y_inference, _ = lmm_memory(*xs, weights, chunk_size=16, backend="compiled")
            torch.testing.assert_close(y_inference, y, rtol=1e-5, atol=1e-6)
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    # forward and backward, for the first chunk (zero momentum) and the next ones:
    # without Dynamo for B = 3, with a dynamic batch size for B = 4 and 6
    assert len(direct) == 4
    assert counter.frame_count == 4


@pytest.mark.parametrize(
    "case",
    [
        dict(split=5),  # the second call starts mid-chunk: a partial segment first
        pytest.param(dict(split=32, inner_grad_clip=0.5), marks=pytest.mark.slow),
        pytest.param(dict(split=21, gates=(True, False)), marks=pytest.mark.slow),  # no decay
        dict(split=21, gates=(False, True), activation="gelu"),
        pytest.param(dict(split=40, depth=3), marks=pytest.mark.slow),
        dict(split=18, depth=1, explicit_state=True),
    ],
    ids=["mid_chunk", "clip", "no_decay", "no_momentum_gelu", "depth3", "depth1_given_state"],
)
def test_streamed_compiled_steps_match_the_eager_ones(case):
    """State carried across calls, optional gates absent, other depths and activations,
    and a caller-built initial state (broadcast weights: strides the cached graphs were
    not traced with, so the guard must send it elsewhere). In float64, where the two
    backends agree to rounding (in float32 the gates' gradients, divided by small gate
    values, differ by some 1e-5 of their scale between any two summation orders)."""
    case = dict(case)
    split, depth = case.pop("split"), case.pop("depth", 2)
    use_eta, use_alpha = case.pop("gates", (True, True))
    explicit = case.pop("explicit_state", False)
    xs, _ = inputs(B=2, T=70, d=8, hidden=8, seed=3)
    xs = [x.double() for x in xs]
    g = torch.Generator().manual_seed(4)
    weights = tuple(
        torch.randn(2, 8, 8, generator=g, dtype=torch.float64) / 3 for _ in range(depth)
    )
    if not use_eta:
        xs[4] = None
    if not use_alpha:
        xs[5] = None

    def go(backend):
        state = fresh_state(weights, 2, torch.float64) if explicit else None
        return stream(backend, xs, weights, split, state, **case)

    y_eager, g_eager = go("torch")
    y_comp, g_comp = go("compiled")
    torch.testing.assert_close(y_comp, y_eager, rtol=1e-10, atol=1e-12)
    for a, b in zip(g_comp, g_eager):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


def stream(backend, xs, weights, split, initial_state=None, **kw):
    """The memory over xs (q, k, v, theta, eta, alpha; the gates may be None) in two calls,
    the state carried at `split`: y and the gradients of the inputs and the weights."""
    leaves = [x.clone().requires_grad_() if x is not None else None for x in xs]
    ws = [w.clone().requires_grad_() for w in weights]

    def part(sl):
        return [None if x is None else x[:, sl] for x in leaves]

    options = dict(chunk_size=16, backend=backend, output_final_state=True, **kw)
    y1, state = lmm_memory(
        *part(slice(0, split)), tuple(ws), initial_state=initial_state, **options
    )
    y2, state = lmm_memory(*part(slice(split, None)), tuple(ws), initial_state=state, **options)
    y = torch.cat([y1, y2], dim=1)
    (y.square().sum() + state.momentum[-1].sum()).backward()
    return y.detach(), [t.grad for t in (*leaves, *ws) if t is not None]


@pytest.mark.parametrize("name", ["lmm", "mag"])
def test_mixers_accept_the_compiled_backend(name):
    import titans_seq as ts

    options = {"window": 8} if name == "mag" else {}
    mixer = ts.build_mixer(name, dim=16, heads=2, backend="compiled", **options)
    assert mixer.backend == "compiled"


@pytest.mark.parametrize("backend", ["torch", "compiled"])
def test_a_users_torch_compile_of_the_whole_mixer_traces_the_chunked_form(monkeypatch, backend):
    """`torch.compile(model)` over the CPU backends: Dynamo cannot trace their hand-written
    autograd Function (it refuses the intermediates the forward keeps for the backward),
    and the step graphs of our own cannot run its fake tensors. Under the outer trace the
    op is the chunked dual form, which the outer compilation compiles and differentiates;
    nothing fails and the compiled steps are not switched off for the rest of the
    process. Checked against the eager mixer, forward, input gradient and a streamed
    second call."""
    import titans_seq as ts

    compiler = fresh_compiler(monkeypatch)
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=16, heads=2, backend=backend)
    eager = ts.build_mixer("lmm", dim=16, heads=2, backend="torch")
    eager.load_state_dict(mixer.state_dict())
    x, more = torch.randn(2, 37, 16), torch.randn(2, 5, 16)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        compiled = compiled_by_dynamo(mixer)
        y, state = compiled(xs[0])
        y.square().sum().backward()
        y_more, _ = compiled(more, state)
        y_other = compiled(x[:, :29])[0]  # a second length: symbolic shapes in Dynamo
    y_eager, state_eager = eager(xs[1])
    y_eager.square().sum().backward()
    y_more_eager, _ = eager(more, state_eager)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y_more, y_more_eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y_other, eager(x[:, :29])[0], rtol=1e-5, atol=1e-6)
    assert compiler.failure is None and compiler.level == 0
    assert graphs_compiled() > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["lmm", "mag", "mal", "mac"])
def test_a_users_torch_compile_of_the_memory_mixers_matches_eager(name):
    """The memory mixers under `torch.compile` with the default backend (the memory's
    chunked form under the trace) give the eager outputs and input gradients, also at a
    second sequence length (which makes Dynamo's shapes symbolic) and streamed in pieces."""
    import titans_seq as ts

    torch.manual_seed(0)
    options = {"lmm": {"chunk_size": 8}, "mac": {"segment_size": 8}}.get(name, {"window": 8})
    mixer = ts.build_mixer(name, dim=16, heads=2, **options)
    x = torch.randn(2, 21, 16)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    compiled = compiled_by_dynamo(mixer)
    y, _ = compiled(xs[0])
    y.square().sum().backward()
    y_eager, _ = mixer(xs[1])
    y_eager.square().sum().backward()
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xs[0].grad, xs[1].grad, rtol=1e-4, atol=1e-5)
    longer = torch.randn(2, 40, 16)
    torch.testing.assert_close(compiled(longer)[0], mixer(longer)[0], rtol=1e-5, atol=1e-6)
    # streamed in pieces of several lengths: each call enters at another offset within the
    # memory's chunk (and MAC's segment), which Dynamo would otherwise make symbolic
    state = state_eager = None
    for piece in longer.split([5, 7, 9, 11, 8], dim=1):
        y, state = compiled(piece, state)
        y_eager, state_eager = mixer(piece, state_eager)
        torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    assert graphs_compiled() > 0


def test_a_backward_that_cannot_compile_runs_eagerly_on_the_compiled_forwards_intermediates(
    monkeypatch,
):
    """The forward steps compiled, the backward steps failing with every option: the eager
    backward takes the intermediates the compiled forward saved in its flat form."""

    def broken(*args, **kwargs):
        raise RuntimeError("the backward does not build here")

    compiler = fresh_compiler(monkeypatch)
    monkeypatch.setattr(compiler, "_compiled_backward", broken)
    xs, weights = inputs(T=40)  # two full chunks and a partial one
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y, grads = run("compiled", xs, weights, inner_grad_clip=1.0)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "eager" in messages[0]
    y_eager, g_eager = run("torch", xs, weights, inner_grad_clip=1.0)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    assert_gradients_close(grads, g_eager)
