"""The PyTorch memory steps with their products' operands rounded as the Triton kernels'
dot precisions round them (`operand_precision`): every product of the memory with its
inputs, states and gradients rounds, the decays' products do not, and the results stay
within the precision's reach of the exact ones."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import titans_seq as ts
from titans_seq.errors import ConfigError
from titans_seq.ops.lmm import lmm_memory, segment_step
from titans_seq.ops.lmm.operand_precision import operand_dot, round_operand
from titans_seq.ops.lmm.torch_backend import lmm_memory_torch

PRODUCTS = {torch.matmul, torch.Tensor.__matmul__, torch.bmm, torch.Tensor.matmul}


def inputs(B=2, T=37, H=2, d=8, seed=0, momentum=True, forgetting=True):
    g = torch.Generator().manual_seed(seed)
    q, k = (F.normalize(torch.randn(B, T, H, d, generator=g), dim=-1) for _ in range(2))
    v = torch.randn(B, T, H, d, generator=g)
    theta = torch.rand(B, T, H, generator=g) * 0.1
    eta = torch.rand(B, T, H, generator=g) if momentum else None
    alpha = torch.rand(B, T, H, generator=g) * 0.05 if forgetting else None
    weights = tuple(torch.randn(H, d, d, generator=g) / d**0.5 for _ in range(2))
    return (q, k, v, theta, eta, alpha), weights


def representable(x: torch.Tensor, precision: str) -> bool:
    return torch.equal(round_operand(x, precision), x)


@pytest.mark.parametrize("shape", [(3, 5), (2, 4, 7), (64,)])
def test_round_operand_follows_the_formats(shape):
    x = torch.randn(*shape) * 100
    assert round_operand(x, "fp32") is x
    torch.testing.assert_close(
        round_operand(x, "bf16"), x.to(torch.bfloat16).float(), rtol=0, atol=0
    )
    t = round_operand(x, "tf32")
    # TensorFloat-32 keeps 10 mantissa bits: the 13 low bits are zero, cut toward zero
    assert not (t.view(torch.int32) & 0x1FFF).any()
    assert (t.abs() <= x.abs()).all() and (t.sign() == x.sign()).all()
    assert ((x - t).abs() <= x.abs() * 2.0**-10).all()
    assert not torch.equal(t, x)
    # idempotent, and float64 operands keep their dtype
    assert torch.equal(round_operand(t, "tf32"), t)
    assert round_operand(x.double(), "bf16").dtype == torch.float64
    torch.testing.assert_close(
        operand_dot("bf16")(x[None], x[None].mT),
        (round_operand(x, "bf16")[None] @ round_operand(x, "bf16")[None].mT),
    )


class ProductLog(TorchFunctionMode):
    """Records, for every matrix product, whether it ran inside the decays' functions and
    whether both operands were representable at `precision`."""

    def __init__(self, precision):
        super().__init__()
        self.precision = precision
        self.inside_decays = 0
        self.records = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in PRODUCTS:
            a, b = args[0], args[1]
            exact = representable(a, self.precision) and representable(b, self.precision)
            self.records.append((self.inside_decays > 0, exact))
        return func(*args, **(kwargs or {}))


def counted(log, fn):
    def wrapper(*args, **kwargs):
        log.inside_decays += 1
        try:
            return fn(*args, **kwargs)
        finally:
            log.inside_decays -= 1

    return wrapper


def segment_and_state(precision, momentum, depth, T=16, B=2, H=2, d=8):
    """One segment's tensors (split with the rounded q k^T) and an entry state with
    momentum, in the [B, H, ...] layout of the steps."""
    (q, k, v, theta, eta, alpha), _ = inputs(B=B, T=T, H=H, d=d, momentum=momentum)
    prep = [
        None if x is None else x.transpose(1, 2).contiguous() for x in (q, k, v, theta, eta, alpha)
    ]
    (seg,) = segment_step.split_segments(*prep, [T], 16, dot=operand_dot(precision))
    g = torch.Generator().manual_seed(1)
    Ws = tuple(torch.randn(B, H, d, d, generator=g) / d**0.5 for _ in range(depth))
    Ss = tuple(torch.randn(B, H, d, d, generator=g) * 0.01 for _ in range(depth))
    return segment_step.segment_tensors(seg), Ws, Ss


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
@pytest.mark.parametrize("momentum", [True, False])
@pytest.mark.parametrize("depth", [1, 2, 3])
def test_every_memory_product_rounds_its_operands_but_the_decays(
    precision, momentum, depth, monkeypatch
):
    with ProductLog(precision) as log:
        for name in ("segment_decays", "decays_backward"):
            monkeypatch.setattr(segment_step, name, counted(log, getattr(segment_step, name)))
        seg, Ws, Ss = segment_and_state(precision, momentum, depth)  # q k^T taken here
        g = torch.Generator().manual_seed(2)
        dy = torch.randn(seg[0].shape, generator=g)
        dW = tuple(torch.randn(w.shape, generator=g) for w in Ws)
        dS = tuple(torch.randn(s.shape, generator=g) for s in Ss)
        y, _, _, saved = segment_step.step_forward(
            seg, Ws, Ss, Ws, "silu", 1.0, True, precision=precision
        )
        forward = len(log.records)
        segment_step.step_backward(
            seg, Ws, Ss, Ws, saved, dy, dW, dS, "silu", 1.0, precision=precision
        )
    assert forward >= 3 * depth and len(log.records) > 2 * forward  # both directions seen
    memory = [exact for in_decays, exact in log.records if not in_decays]
    decays = [exact for in_decays, exact in log.records if in_decays]
    assert all(memory), f"{memory.count(False)} of {len(memory)} products were not rounded"
    if momentum:  # the decays' products (Da De, Da P and their adjoint) stay exact
        assert decays and not all(decays)


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_the_torch_backend_rounds_in_both_directions(precision, monkeypatch):
    """The backend hands its precision to the forward and the backward steps (the
    backward runs in the autograd engine, where no function mode reaches)."""
    seen = []
    real = segment_step.operand_dot

    def recording(p):
        seen.append(p)
        return real(p)

    monkeypatch.setattr(segment_step, "operand_dot", recording)
    (q, k, v, theta, eta, alpha), weights = inputs(T=37)
    leaves = [x.requires_grad_() for x in (q, k, v, theta, eta, alpha, *weights)]
    y, _ = lmm_memory(
        q, k, v, theta, eta, alpha, weights, chunk_size=16, backend="torch",
        operand_precision=precision,
    )  # fmt: skip
    forward = len(seen)
    torch.autograd.grad(y.sum(), leaves)
    assert forward == 3 and len(seen) == 6  # a step per segment (16 + 16 + 5), each way
    assert set(seen) == {precision}


def test_the_product_log_sees_unrounded_operands_at_fp32():
    (q, k, v, theta, eta, alpha), weights = inputs()
    with ProductLog("bf16") as log:
        lmm_memory(q, k, v, theta, eta, alpha, weights, chunk_size=16, backend="torch")
    assert not all(exact for _, exact in log.records)


@pytest.mark.parametrize("precision, bound", [("bf16", 2e-2), ("tf32", 1e-2)])
@pytest.mark.parametrize("T", [5, 16, 37])
def test_rounded_products_stay_within_the_precisions_reach(precision, bound, T):
    (q, k, v, theta, eta, alpha), weights = inputs(T=T)
    leaves = [x.requires_grad_() for x in (q, k, v, theta, eta, alpha, *weights)]
    results = {}
    for p in ("fp32", precision):
        y, _ = lmm_memory(
            q, k, v, theta, eta, alpha, weights, chunk_size=16, backend="torch",
            operand_precision=p,
        )  # fmt: skip
        results[p] = (y, torch.autograd.grad(y.square().sum(), leaves))
    (y0, g0), (y1, g1) = results["fp32"], results[precision]
    for a, b in zip((y1, *g1), (y0, *g0)):
        assert torch.isfinite(a).all()
        scale = b.abs().max()
        assert (a - b).abs().max() <= bound * scale
    assert not torch.equal(y1, y0)


def test_the_fp32_setting_is_the_torch_backend_unchanged():
    (q, k, v, theta, eta, alpha), weights = inputs(T=37)
    y0, s0 = lmm_memory(
        q, k, v, theta, eta, alpha, weights, chunk_size=16, backend="torch",
        output_final_state=True,
    )  # fmt: skip
    y1, s1 = lmm_memory(
        q, k, v, theta, eta, alpha, weights, chunk_size=16, backend="torch",
        output_final_state=True, operand_precision="fp32",
    )  # fmt: skip
    assert torch.equal(y0, y1) and all(torch.equal(a, b) for a, b in zip(s0.weights, s1.weights))


def test_rounded_streams_continue_from_their_state():
    (q, k, v, theta, eta, alpha), weights = inputs(T=40)
    whole, _ = lmm_memory(
        q, k, v, theta, eta, alpha, weights, chunk_size=16, operand_precision="bf16"
    )
    parts, state = [], None
    for a, b in ((0, 21), (21, 40)):
        piece = [x[:, a:b] for x in (q, k, v, theta, eta, alpha)]
        y, state = lmm_memory(
            *piece, weights, chunk_size=16, initial_state=state, output_final_state=True,
            operand_precision="bf16",
        )  # fmt: skip
        parts.append(y)
    # the second call's first segment is a chunk's tail on its own: the same function,
    # rounded at other points
    torch.testing.assert_close(torch.cat(parts, 1), whole, rtol=2e-2, atol=2e-2)


def test_bad_settings_are_refused_by_name():
    (q, k, v, theta, eta, alpha), weights = inputs(T=8)
    with pytest.raises(ValueError, match="operand_precision must be one of"):
        lmm_memory(q, k, v, theta, eta, alpha, weights, operand_precision="fp16")
    with pytest.raises(ValueError, match="backend='chunked'"):
        lmm_memory(q, k, v, theta, eta, alpha, weights, backend="chunked", operand_precision="bf16")
    with pytest.raises(ValueError, match="compile_step"):
        lmm_memory_torch(
            q, k, v, theta, eta, alpha, weights, compile_step=True, operand_precision="tf32"
        )
    with pytest.raises(ConfigError, match="operand_precision"):
        ts.build_mixer("lmm", dim=16, heads=2, memory={"operand_precision": "fp8"})
    with pytest.raises(ConfigError, match="backend='compiled'"):
        ts.build_mixer(
            "lmm", dim=16, heads=2, backend="compiled", memory={"operand_precision": "bf16"}
        )


@pytest.mark.parametrize("name, options", [("lmm", {}), ("mag", {"window": 8})])
def test_a_mixer_trains_with_rounded_memory_products(name, options):
    torch.manual_seed(0)
    exact = ts.build_mixer(name, dim=16, heads=2, **options)
    torch.manual_seed(0)
    rounded = ts.build_mixer(name, dim=16, heads=2, memory={"operand_precision": "bf16"}, **options)
    x = torch.randn(2, 35, 16)
    y0, _ = exact(x)
    y1, _ = rounded(x)
    y1.square().mean().backward()
    assert not torch.equal(y0, y1)
    torch.testing.assert_close(y1, y0, rtol=5e-2, atol=5e-2)
    assert all(torch.isfinite(p.grad).all() for p in rounded.parameters() if p.grad is not None)
