"""Finite outputs and gradients for every finite input, in every mixer and memory backend.

Inputs shaped like what users feed: zero rows (padding embeddings, zero-padded series),
constant rows, batches padded to very different lengths, large values, lengths around the
chunk size, memory depths 1-3, with the default clip and without it.
"""

from __future__ import annotations

import pytest
import torch
from mixer_checks import VARIANTS, variant

import titans_seq as ts
from titans_seq.ops.lmm import lmm_memory

DIM, HEADS, CHUNK = 16, 2, 4
MEMORY_MIXERS = ("lmm", "mag", "mal", "mac", *VARIANTS)
SMALL = {
    "lmm": {},
    "mag": dict(window=6),
    "mal": dict(window=6),
    "mac": dict(segment_size=6),
}
LENGTHS = (1, CHUNK - 1, CHUNK, CHUNK + 1, 4 * CHUNK + 3)


def make_input(kind: str, T: int, seed: int = 0) -> torch.Tensor:
    """[3, T, DIM] float32 inputs of one kind."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, T, DIM, generator=g)
    if kind == "zeros":
        return torch.zeros_like(x)
    if kind == "padded":  # three sequences padded with zero rows to the longest
        for row, length in enumerate((T, max(1, T // 2), 1)):
            x[row, length:] = 0
        return x
    if kind == "constant":
        return torch.full_like(x, 0.7)
    if kind == "large":
        return x * 1e4
    return x


def assert_all_finite(mixer, x: torch.Tensor, label: str) -> None:
    x = x.detach().requires_grad_(True)
    mixer.zero_grad()
    y, state = mixer(x)
    assert torch.isfinite(y).all(), f"{label}: output"
    # a loss that weighs every output, so that every parameter gets a gradient
    (y.square().mean() + y.mean()).backward()
    assert torch.isfinite(x.grad).all(), f"{label}: input gradient"
    for name, p in mixer.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"{label}: gradient of {name}"


@pytest.mark.parametrize("name", MEMORY_MIXERS)
@pytest.mark.parametrize("kind", ["zeros", "padded", "constant", "large", "random"])
@pytest.mark.parametrize("clip", ["default", None])
def test_memory_mixers_are_finite_for_odd_inputs(name, kind, clip):
    if clip is None and kind == "large":
        # without the safety clip a deep memory's writes grow with the value scale (values
        # 1e4 times a pre-normed input's are beyond its stable range): the clip's job
        pytest.skip("large inputs need the inner-gradient clip")
    options = {} if clip == "default" else {"inner_grad_clip": None}
    for depth in (1, 2, 3):
        torch.manual_seed(depth)
        base, variant_options = variant(name)
        mixer = ts.build_mixer(
            base,
            dim=DIM,
            heads=HEADS,
            chunk_size=CHUNK,
            memory_depth=depth,
            backend="torch",
            **SMALL[base],
            **variant_options,
            **options,
        )
        for T in LENGTHS:
            assert_all_finite(mixer, make_input(kind, T), f"{name} depth={depth} T={T} {kind}")


@pytest.mark.parametrize("name", MEMORY_MIXERS)
@pytest.mark.parametrize("kind", ["zeros", "padded", "large"])
def test_reference_backend_is_finite_for_odd_inputs(name, kind):
    torch.manual_seed(0)
    base, variant_options = variant(name)
    mixer = ts.build_mixer(
        base,
        dim=DIM,
        heads=HEADS,
        chunk_size=CHUNK,
        backend="reference",
        **SMALL[base],
        **variant_options,
    )
    for T in (CHUNK + 1, 2 * CHUNK + 3):
        assert_all_finite(mixer, make_input(kind, T), f"{name} reference T={T} {kind}")


@pytest.mark.parametrize("kind", ["zeros", "padded", "large"])
def test_compiled_backend_is_finite_for_odd_inputs(kind):
    """The compiled chunk steps (full chunks as Inductor graphs) on the inputs above."""
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=DIM, heads=HEADS, chunk_size=CHUNK, backend="compiled")
    for T in (CHUNK + 1, 4 * CHUNK + 3):
        assert_all_finite(mixer, make_input(kind, T), f"lmm compiled T={T} {kind}")


def _zero_gradient_cases():
    """Every backend x clip; the compiled backend compiles a walk per clip (30-60 s on a
    2-core CPU), so only the clip whose norm meets u_t = 0 stays in the default tier."""
    for backend in ("reference", "torch", "compiled"):
        for clip in (1.0, 0.05, None):
            slow = backend == "compiled" and clip != 1.0
            yield pytest.param(backend, clip, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize(("backend", "clip"), list(_zero_gradient_cases()))
def test_the_op_has_finite_gradients_at_a_zero_inner_gradient(backend, clip):
    """k = v = 0 on some tokens with zero weights: u_t = 0 exactly, where the norm of the
    clip has an infinite derivative (the root of the NaN gradients on padded data)."""
    B, T, H, d = 2, 9, 2, 4
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, d, generator=g, dtype=torch.float64) for _ in range(3))
    k[:, 4:], v[:, 4:] = 0, 0
    gates = [torch.rand(B, T, H, generator=g, dtype=torch.float64) * 0.5 for _ in range(3)]
    weights = (torch.zeros(H, 8, d, dtype=torch.float64), torch.zeros(H, d, 8, dtype=torch.float64))
    leaves = [q, k, v, *gates, *weights]
    for t in leaves:
        t.requires_grad_(True)
    y, _ = lmm_memory(q, k, v, *gates, weights, chunk_size=4, backend=backend, inner_grad_clip=clip)
    grads = torch.autograd.grad(y.square().sum() + y.sum(), leaves)
    for name, grad in zip(["q", "k", "v", "theta", "eta", "alpha", "W1", "W2"], grads):
        assert torch.isfinite(grad).all(), name


def test_memory_arithmetic_stays_float32_under_bf16_autocast():
    """The op computes the same numbers inside and outside an autocast region, and the
    mixer's memory gates are float32 there (only the projections around it are bf16)."""
    torch.manual_seed(0)
    B, T, H, d = 1, 70, 2, 8
    q, k, v = (torch.nn.functional.normalize(torch.randn(B, T, H, d), dim=-1) for _ in range(3))
    gates = [torch.rand(B, T, H) * 0.3 for _ in range(3)]
    weights = (torch.randn(H, 8, d) / 3, torch.randn(H, d, 8) / 3)
    for backend in ("reference", "torch"):
        y32, s32 = lmm_memory(q, k, v, *gates, weights, backend=backend, output_final_state=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, s = lmm_memory(q, k, v, *gates, weights, backend=backend, output_final_state=True)
        assert y.dtype == torch.float32
        torch.testing.assert_close(y, y32, rtol=0, atol=0)
        torch.testing.assert_close(s.weights[0], s32.weights[0], rtol=0, atol=0)

    mixer = ts.build_mixer("lmm", dim=32, heads=2)
    x = torch.randn(2, 20, 32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, _, _, theta, eta, alpha, _ = mixer.memory.project(x, None)
    assert theta.dtype == eta.dtype == alpha.dtype == torch.float32


ALL_MIXERS = ("lmm", "mag", "mal", "mac", "attention", "swa")
HALF_PRECISIONS = {
    "fp16 autocast": (torch.float32, torch.float16),
    "bf16 autocast": (torch.float32, torch.bfloat16),
    "fp16 model": (torch.float16, None),
    "bf16 model": (torch.bfloat16, None),
}


@pytest.mark.parametrize("name", ALL_MIXERS)
@pytest.mark.parametrize("precision", list(HALF_PRECISIONS))
@pytest.mark.parametrize("kind", ["padded", "random"])
def test_every_mixer_is_finite_in_16_bit_precision(name, precision, kind):
    """Under float16/bfloat16 autocast and for a model cast to 16 bits: finite outputs and
    gradients, zero-padded rows included (a norm's eps squared is zero in float16)."""
    dtype, autocast_dtype = HALF_PRECISIONS[precision]
    torch.manual_seed(0)
    options = SMALL.get(name, {}) if name != "swa" else dict(window=6)
    mixer = ts.build_mixer(name, dim=DIM, heads=HEADS, **options).to(dtype)
    x = make_input(kind, 4 * CHUNK + 3).to(dtype).requires_grad_(True)
    with torch.autocast("cpu", dtype=autocast_dtype or dtype, enabled=autocast_dtype is not None):
        y, _ = mixer(x)
    assert torch.isfinite(y).all(), "output"
    (y.float().square().mean() + y.float().mean()).backward()
    assert torch.isfinite(x.grad).all(), "input gradient"
    for param_name, p in mixer.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"gradient of {param_name}"
