"""The causal depthwise convolution's backends against the reference, forward and backward.

The Triton kernels run on CPU under Triton's interpreter. TRITON_INTERPRET must be set before
triton is first imported, which this pytest process may already have done, so those checks
run in one subprocess executing this file as a script (`python test_causal_conv.py CASE...`)
that reports each case; the pytest tests assert on the results. On a GPU the same checks
run in-process (marker `gpu`).

Tolerances: relative error (Frobenius) against the float64 reference run on the same
rounded inputs: 1e-5 for float32, 1e-2 for float16 and bfloat16 (one rounding of the output
and of each gradient; the kernels accumulate in fp32).
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # the interpreter subprocess: before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pytest
import torch
import torch.nn.functional as F
from interpreter_helpers import interpreter_results, report_cases

TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 1e-2, torch.float16: 1e-2}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# name -> (B, T, C, K, with cache, dtype): T below K, T not a multiple of the 64-step tile,
# C not a multiple of the 64-channel tile, K = 1 (no past), K = 8 (a cache longer than T), one step
CASES = {
    "odd_tiles": (2, 70, 67, 4, True, "float32"),
    "shorter_than_kernel": (1, 2, 5, 4, True, "float32"),
    "one_step": (3, 1, 130, 3, True, "float32"),
    "no_cache": (2, 77, 9, 4, False, "float32"),
    "kernel_one": (2, 5, 8, 1, False, "float32"),
    # the long-context recipe's kernel: the cache holds 7 steps, more than T of one call
    "kernel_eight": (2, 70, 67, 8, True, "float32"),
    "kernel_eight_short": (2, 5, 9, 8, True, "bfloat16"),
    "empty": (2, 0, 4, 4, True, "float32"),
    "bfloat16": (3, 129, 33, 4, True, "bfloat16"),
    "float16": (2, 65, 70, 2, True, "float16"),
}
GPU_CASES = {
    **CASES,
    "wide": (4, 1000, 3 * 1024, 4, False, "bfloat16"),
    "wide_fp32": (2, 333, 3 * 512 + 5, 4, True, "float32"),
}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def run_backends(backend, B, T, C, K, with_cache, dtype, device="cpu", cache_grad=True):
    """y, new cache and the gradients of x, weight, bias (and cache) from `backend` and from
    the float64 reference on the same (rounded) inputs, under one random loss."""
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    gen = torch.Generator().manual_seed(B * 1000 + T * 10 + K)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(dtype)

    x, w, b = rand(B, T, C), rand(C, K), rand(C)
    cache = rand(B, K - 1, C) if with_cache else None
    g_y, g_cache = rand(B, T, C), rand(B, K - 1, C)
    results = []
    for which, dt in ((backend, dtype), ("reference", torch.float64)):
        leaves = [t.to(device=device, dtype=dt).requires_grad_() for t in (x, w, b)]
        c = None
        if cache is not None:
            c = cache.to(device=device, dtype=dt).requires_grad_(cache_grad)
        y, new_cache = causal_depthwise_conv(*leaves, c, backend=which)
        loss = (y.double() * g_y.to(device).double()).sum()
        loss = loss + (new_cache.double() * g_cache.to(device).double()).sum()
        wrt = leaves + ([c] if c is not None and cache_grad else [])
        grads = torch.autograd.grad(loss, wrt, allow_unused=True)
        grads = [torch.zeros_like(t) if gr is None else gr for t, gr in zip(wrt, grads)]
        assert y.dtype == dt and y.shape == (B, T, C)
        results.append([y, new_cache, *grads])
    return results


def check_against_reference(B, T, C, K, with_cache, dtype, backend="triton", device="cpu"):
    dtype = DTYPES.get(dtype, dtype)
    fast, ref = run_backends(backend, B, T, C, K, with_cache, dtype, device)
    names = ["y", "new_cache", "dx", "dweight", "dbias", "dcache"]
    for name, a, b in zip(names, fast, ref):
        assert a.dtype == dtype, (name, a.dtype)
        if b.numel() and b.abs().max() > 0:
            err = _rel(a, b)
            assert err < TOL[dtype], f"{name}: relative error {err:.2e} (tolerance {TOL[dtype]})"
        else:
            assert not a.abs().max() if a.numel() else True, name


def check_streaming_equals_one_shot(backend="triton", device="cpu"):
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    torch.manual_seed(0)
    x, w, b = torch.randn(2, 150, 70), torch.randn(70, 4), torch.randn(70)
    x, w, b = x.to(device), w.to(device), b.to(device)
    y, final = causal_depthwise_conv(x, w, b, backend=backend)
    cache, pieces = None, []
    for lo, hi in ((0, 1), (1, 3), (3, 70), (70, 150)):
        out, cache = causal_depthwise_conv(x[:, lo:hi], w, b, cache, backend=backend)
        pieces.append(out)
    torch.testing.assert_close(torch.cat(pieces, 1), y, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(cache, final)


def check_cache_without_grad(backend="triton", device="cpu"):
    """A cache that needs no gradient (a detached streaming state) is read, not written."""
    fast, ref = run_backends(backend, 2, 20, 8, 4, True, torch.float32, device, cache_grad=False)
    for a, b in zip(fast, ref):
        assert _rel(a, b) < 1e-5


def run_case(name: str) -> str:
    if name == "streaming":
        check_streaming_equals_one_shot()
    elif name == "cache_without_grad":
        check_cache_without_grad()
    else:
        check_against_reference(*CASES[name])
    return "ok"


INTERPRETER_CASES = [*CASES, "streaming", "cache_without_grad"]


@pytest.fixture(scope="module")
def interpreted():
    return interpreter_results(__file__, INTERPRETER_CASES, timeout=600)


@pytest.mark.parametrize("name", INTERPRETER_CASES)
def test_triton_interpreter_matches_reference(interpreted, name):
    assert interpreted[name] == "ok", interpreted[name]


@pytest.mark.parametrize("backend", ["torch", "traceable", "onednn"])
@pytest.mark.parametrize("name", list(CASES))
def test_cpu_backends_match_reference(name, backend):
    check_against_reference(*CASES[name], backend=backend)


@pytest.mark.parametrize("backend", ["torch", "traceable", "onednn"])
def test_cpu_backends_float64_are_exact(backend):
    check_against_reference(2, 37, 11, 4, True, torch.float64, backend=backend)


@pytest.mark.parametrize("backend", ["torch", "traceable", "onednn"])
def test_cpu_backends_stream_and_take_a_cache_without_grad(backend):
    check_streaming_equals_one_shot(backend=backend)
    check_cache_without_grad(backend=backend)


def test_onednn_backend_takes_non_contiguous_inputs_and_gradients():
    """x as a slice of a wider projection (q, k, v split off one matrix product) and an
    incoming gradient that is a transposed view: the same values as contiguous copies."""
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    torch.manual_seed(0)
    wide = torch.randn(3, 11, 20, dtype=torch.float64)
    w, b = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, dtype=torch.float64)
    g = torch.randn(3, 6, 11, dtype=torch.float64).transpose(1, 2)  # [3, 11, 6], not contiguous
    results = []
    for x in (wide[..., 5:11], wide[..., 5:11].contiguous()):
        x = x.detach().requires_grad_()
        y, _ = causal_depthwise_conv(x, w, b, backend="onednn")
        (dx,) = torch.autograd.grad((y * g).sum(), x)
        results.append((y, dx))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-14)


def test_onednn_backend_refuses_gpu_tensors():
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    x = torch.randn(1, 3, 2, device="meta")
    with pytest.raises(ValueError, match="takes CPU tensors"):
        causal_depthwise_conv(x, torch.randn(2, 2, device="meta"), torch.zeros(2, device="meta"),
                              backend="onednn")  # fmt: skip


def test_reference_is_the_grouped_conv1d():
    """The specification itself against PyTorch's grouped convolution."""
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    torch.manual_seed(0)
    x, w, b = torch.randn(2, 9, 6).double(), torch.randn(6, 3).double(), torch.randn(6).double()
    cache = torch.randn(2, 2, 6).double()
    y, new_cache = causal_depthwise_conv(x, w, b, cache, backend="reference")
    padded = torch.cat([cache, x], dim=1)
    ref = F.conv1d(padded.transpose(1, 2), w[:, None], b, groups=6).transpose(1, 2)
    torch.testing.assert_close(y, ref)
    torch.testing.assert_close(new_cache, padded[:, -2:])


@pytest.mark.parametrize("backend", ["reference", "torch", "traceable", "onednn"])
def test_causal(backend):
    """Changing inputs from step t on leaves every output before t as it was."""
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    torch.manual_seed(0)
    x, w, b = torch.randn(1, 30, 5), torch.randn(5, 4), torch.randn(5)
    y, _ = causal_depthwise_conv(x, w, b, backend=backend)
    x2 = x.clone()
    x2[:, 17:] = torch.randn(1, 13, 5)
    y2, _ = causal_depthwise_conv(x2, w, b, backend=backend)
    assert torch.equal(y[:, :17], y2[:, :17])
    assert not torch.equal(y[:, 17:], y2[:, 17:])


def test_auto_uses_onednn_on_cpu_and_the_shifted_form_without_it(monkeypatch):
    from titans_seq.ops import causal_conv

    calls = []
    for name in ("torch", "onednn"):
        real = causal_conv._BACKEND_FUNCTIONS[name]
        monkeypatch.setitem(
            causal_conv._BACKEND_FUNCTIONS,
            name,
            lambda *a, name=name, real=real: calls.append(name) or real(*a),
        )
    args = torch.randn(1, 4, 3), torch.randn(3, 2), torch.zeros(3)
    causal_conv.causal_depthwise_conv(*args)
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    causal_conv.causal_depthwise_conv(*args)
    assert calls == ["onednn", "torch"]


def test_auto_under_torch_compile_is_the_traceable_form_in_one_graph(monkeypatch):
    """Under a user's `torch.compile` "auto" takes the plain-operation form, which traces
    without a graph break (`fullgraph=True`) and gives the reference's output, new cache
    and gradients, for a stream's start and with a cache."""
    from titans_seq.ops import causal_conv

    calls = []
    real = causal_conv._BACKEND_FUNCTIONS["traceable"]
    monkeypatch.setitem(
        causal_conv._BACKEND_FUNCTIONS, "traceable", lambda *a: calls.append(1) or real(*a)
    )
    torch._dynamo.reset()
    conv = torch.compile(causal_conv.causal_depthwise_conv, fullgraph=True, backend="aot_eager")
    torch.manual_seed(0)
    for cache in (None, torch.randn(2, 3, 6)):
        x, w, b = torch.randn(2, 13, 6), torch.randn(6, 4), torch.randn(6)
        outs = []
        for fn, backend in ((conv, "auto"), (causal_conv.causal_depthwise_conv, "reference")):
            leaves = [t.clone().requires_grad_() for t in (x, w, b)]
            y, new_cache = fn(*leaves, cache, backend=backend)
            (y * torch.linspace(-1, 1, y.numel()).view_as(y)).sum().backward()
            outs.append([y, new_cache, *(t.grad for t in leaves)])
        for a, r in zip(*outs):
            torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)
    assert calls, "auto did not take the traceable form under the trace"


def test_bad_shapes_and_backends_are_refused():
    from titans_seq.ops.causal_conv import causal_depthwise_conv

    x, w, b = torch.randn(2, 5, 3), torch.randn(3, 4), torch.zeros(3)
    with pytest.raises(ValueError, match=r"cache must be \[B, K-1, C\]"):
        causal_depthwise_conv(x, w, b, torch.zeros(2, 2, 3))
    with pytest.raises(ValueError, match="expected x"):
        causal_depthwise_conv(x[0], w, b)
    with pytest.raises(ValueError, match="expected x"):
        causal_depthwise_conv(x, torch.randn(4, 4), b)
    with pytest.raises(ValueError, match="backend must be one of"):
        causal_depthwise_conv(x, w, b, backend="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(GPU_CASES))
def test_triton_gpu_matches_reference(name):
    check_against_reference(*GPU_CASES[name], backend="triton", device="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_triton_gpu_streaming_and_detached_cache():
    check_streaming_equals_one_shot(device="cuda")
    check_cache_without_grad(device="cuda")


if __name__ == "__main__":
    report_cases(run_case, sys.argv[1:])
