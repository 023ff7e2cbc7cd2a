"""The "compiled" backend: torch.compile'd chunk steps agree with the eager ones; a step
whose C++ wrapper does not build falls back to Inductor's default wrapper silently, and a
compilation failure with every option to the eager step with one warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from titans_seq.ops.lmm import fused, lmm_memory


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
    for a, b in zip(g_comp, g_eager):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_compilation_failure_falls_back_to_eager_with_one_warning(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(fused, "_COMPILE_FAILURE", [])
    monkeypatch.setattr(fused, "_COMPILE_LEVEL", [0])
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
    real_compile = torch.compile
    asked = []

    def no_cpp_wrapper(fn, options=None, **kwargs):
        asked.append(options)
        if options and options.get("cpp_wrapper"):

            def fails_when_run(*args):
                raise RuntimeError("the C++ wrapper does not build here")

            return fails_when_run
        return real_compile(fn, options=options, **kwargs)

    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(fused, "_COMPILE_FAILURE", [])
    monkeypatch.setattr(fused, "_COMPILE_LEVEL", [0])
    monkeypatch.setattr(torch, "compile", no_cpp_wrapper)
    xs, weights = inputs(T=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        y, grads = run("compiled", xs, weights)
    assert fused._COMPILE_LEVEL == [1] and not fused._COMPILE_FAILURE
    assert len(asked) == 4 and all(o["cpp_wrapper"] for o in asked[:2])
    assert not any((o or {}).get("cpp_wrapper") for o in asked[2:])
    y_eager, g_eager = run("torch", xs, weights)
    torch.testing.assert_close(y, y_eager, rtol=1e-5, atol=1e-6)
    for a, b in zip(grads, g_eager):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_fewer_heads_than_threads_get_single_threaded_kernels(monkeypatch):
    asked = []

    def records(fn, options=None, **kwargs):
        asked.append(options)
        return fn  # the eager step: this test checks which options are asked for

    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(fused, "_COMPILE_FAILURE", [])
    monkeypatch.setattr(fused, "_COMPILE_LEVEL", [0])
    monkeypatch.setattr(torch, "compile", records)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        run("compiled", *inputs(B=1, H=1))  # one (batch, head) pair, two threads
        run("compiled", *inputs(B=2, H=1))
    finally:
        torch.set_num_threads(threads)
    serial = {"cpp_wrapper": True, "cpp.threads": 1}
    assert asked == [serial, serial, {"cpp_wrapper": True}, {"cpp_wrapper": True}]


def test_sequence_lengths_and_grad_mode_do_not_recompile_a_step(monkeypatch):
    """A fit meets many sequence lengths, several batch sizes (a last partial batch,
    validation batches) and runs with and without autograd. Each step variant (a fresh
    stream's first chunk, the chunks after it) compiles for the first batch size and once
    more, with a dynamic batch size, for all others; neither the length nor the grad mode
    compiles it again."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    real_compile = torch.compile

    def counting(fn, options=None, **kwargs):
        return real_compile(fn, backend=counter)

    torch._dynamo.reset()  # frames compiled by earlier tests would hide recompilations
    monkeypatch.setattr(fused, "_COMPILED", {})
    monkeypatch.setattr(fused, "_COMPILE_FAILURE", [])
    monkeypatch.setattr(fused, "_COMPILE_LEVEL", [0])
    monkeypatch.setattr(torch, "compile", counting)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # B * H >= 2 below: the threaded kernels throughout
    try:
        for B, T in ((3, 37), (3, 53), (4, 70), (6, 40)):
            xs, weights = inputs(B=B, T=T)
            xs = [x.requires_grad_() for x in xs]
            y, _ = lmm_memory(*xs, weights, chunk_size=16, backend="compiled")
            y.square().sum().backward()
            with torch.no_grad():
                y_inference, _ = lmm_memory(*xs, weights, chunk_size=16, backend="compiled")
            torch.testing.assert_close(y_inference, y, rtol=1e-5, atol=1e-6)
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    # forward and backward, for the first chunk (zero momentum) and the next ones, each
    # static for B = 3 and dynamic after
    assert counter.frame_count == 8


@pytest.mark.parametrize("name", ["lmm", "mag"])
def test_mixers_accept_the_compiled_backend(name):
    import titans_seq as ts

    options = {"window": 8} if name == "mag" else {}
    mixer = ts.build_mixer(name, dim=16, heads=2, backend="compiled", **options)
    assert mixer.backend == "compiled"
