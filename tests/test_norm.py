"""The norms' hand-written backwards against the composite forms autograd differentiates."""

import pytest
import torch

from titans_seq.nn.norm import (
    RMSNorm,
    l2_normalize,
    l2_normalize_reference,
    rms_norm,
    rms_norm_reference,
)

# relative (Frobenius) error against the float64 composite form on the same rounded inputs
TOL = {torch.float64: 1e-13, torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _outputs(norm, x, weight, g):
    leaves = [x] + ([weight] if weight is not None else [])
    y = norm(x, weight, 1e-6)
    return [y, *torch.autograd.grad((y.double() * g).sum(), leaves)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(3, 5, 8), (1, 1, 3), (7, 33)])
def test_matches_the_composite_form(dtype, affine, shape):
    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) * 3).to(dtype)
    w = torch.randn(shape[-1], dtype=torch.float64).to(dtype) if affine else None
    g = torch.randn(shape, dtype=torch.float64)
    fast = _outputs(rms_norm, x.requires_grad_(), w.requires_grad_() if affine else None, g)
    ref = _outputs(
        rms_norm_reference,
        x.detach().double().requires_grad_(),
        w.detach().double().requires_grad_() if affine else None,
        g,
    )
    for a, b in zip(fast, ref):
        assert a.dtype == dtype
        assert _rel(a, b) < TOL[dtype]


def test_under_autocast_and_for_zero_and_huge_rows():
    """bf16 autocast leaves the norm in the input's dtype; a zero row and a row of 1e30
    (whose square overflows float32, in both forms) give finite values and gradients, and
    the same values as the composite form."""
    norm = RMSNorm(4)
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1e30, -1e30, 1e30, 2e30], [1.0, 2.0, 3.0, 4.0]])
    x.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = norm(x)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()
    torch.testing.assert_close(y, rms_norm_reference(x, norm.weight, norm.eps))
    torch.testing.assert_close(y[2], x[2] / (30 / 4) ** 0.5)


def test_compiled_models_trace_the_composite_form(monkeypatch):
    calls = []
    import titans_seq.nn.norm as norm_module

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    real = norm_module.rms_norm_reference
    monkeypatch.setattr(norm_module, "rms_norm_reference", lambda *a: calls.append(1) or real(*a))
    RMSNorm(3)(torch.randn(2, 3))
    assert calls == [1]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
def test_l2_normalize_matches_the_composite_form(dtype):
    """Including a zero vector and one shorter than eps, which pass with no gradient."""
    torch.manual_seed(0)
    x = torch.randn(3, 5, 2, 8, dtype=torch.float64)
    x[0, 0, 0] = 0.0
    x[1, 2, 1] = 1e-9
    x = x.to(dtype)
    g = torch.randn(3, 5, 2, 8, dtype=torch.float64)
    results = []
    for normalize, leaf in ((l2_normalize, x.clone()), (l2_normalize_reference, x.double())):
        leaf.requires_grad_()
        y = normalize(leaf)
        results.append((y, *torch.autograd.grad((y.double() * g).sum(), leaf)))
    for a, b in zip(*results):
        assert a.dtype == dtype
        assert _rel(a, b) < TOL[dtype]
    dx = results[0][1]
    assert not dx[0, 0, 0].any() and not dx[1, 2, 1].any()
    assert torch.isfinite(dx).all()


def test_l2_normalize_under_compile_traces_the_composite_form(monkeypatch):
    calls = []
    import titans_seq.nn.norm as norm_module

    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    real = norm_module.l2_normalize_reference
    monkeypatch.setattr(
        norm_module, "l2_normalize_reference", lambda *a: calls.append(1) or real(*a)
    )
    l2_normalize(torch.randn(2, 3))
    assert calls == [1]
