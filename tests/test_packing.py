"""Packed documents (`cu_seqlens`): every mixer, the memory op, the Backbone and TitansLM
process each document of a packed row exactly as if it were alone, forward and gradients,
and nothing crosses a document boundary."""

import pytest
import torch
from lmm_helpers import make_inputs
from mixer_checks import SMALL_OPTIONS, VARIANTS, build_small, library_mixers

import titans_seq as ts
from titans_seq.backbone import Backbone
from titans_seq.packing import (
    check_cu_seqlens,
    cu_seqlens_from_lengths,
    cu_seqlens_from_starts,
    pack,
    packed_layout,
    reverse_documents,
    unpack,
)

DIM, HEADS = 16, 2
# lengths that cross the small chunks / windows / segments below, and one of a single token
LENGTHS = (9, 1, 14, 5)


def build(name):
    return build_small(name, DIM, HEADS)


def separately(run, x, lengths):
    """run(document [1, L, ...]) for each document of packed x [1, total, ...], joined."""
    outs, start = [], 0
    for n in lengths:
        outs.append(run(x[:, start : start + n]))
        start += n
    return torch.cat(outs, 1)


def grads_of(module, x, y, ramp):
    module.zero_grad()
    (gx,) = torch.autograd.grad((y * ramp).sum(), x, retain_graph=True)
    (y * ramp).sum().backward()
    return gx, {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def assert_same_gradients(a, b, **tol):
    torch.testing.assert_close(a[0], b[0], **tol)
    assert set(a[1]) == set(b[1])
    for name in a[1]:
        torch.testing.assert_close(a[1][name], b[1][name], **tol, msg=name)


# -- the layout ------------------------------------------------------------------------------
def test_layout_round_trip_and_reversal():
    cu = cu_seqlens_from_lengths(LENGTHS)
    assert cu.tolist() == [0, 9, 10, 24, 29]
    x = torch.arange(29.0).view(1, 29, 1)
    layout = packed_layout(cu, 29)
    padded = unpack(x, layout)
    assert padded.shape == (4, 14, 1)
    assert padded[1, :, 0].tolist() == [9.0] + [0.0] * 13  # zeros after the document
    assert torch.equal(pack(padded, layout), x)
    reversed_ = reverse_documents(padded, layout.lengths)
    assert reversed_[3, :, 0].tolist() == [28.0, 27.0, 26.0, 25.0, 24.0] + [0.0] * 9


def test_cu_seqlens_from_starts_joins_rows_and_documents():
    # two rows of 6 positions; documents also start at 2 (row 0) and 9 (row 1)
    assert cu_seqlens_from_starts([2, 9], 6, rows=2).tolist() == [0, 2, 6, 9, 12]
    assert cu_seqlens_from_starts([], 6, rows=1).tolist() == [0, 6]


@pytest.mark.parametrize(
    "cu, match",
    [
        ([1, 5, 10], "start at 0"),
        ([0, 5, 9], "end at the packed length 10"),
        ([0, 5, 5, 10], "strictly increasing"),
        ([[0, 10]], "1-D"),
        ([0.0, 10.0], "integer"),
    ],
)
def test_bad_cu_seqlens_are_refused(cu, match):
    with pytest.raises(ValueError, match=match):
        check_cu_seqlens(torch.tensor(cu), 10)


def test_packed_call_refuses_a_state_and_a_batch():
    mixer = build("lmm")
    x = torch.randn(1, 29, DIM, dtype=torch.float64)
    _, state = mixer(x)
    with pytest.raises(ValueError, match="state=None"):
        mixer(x, state, cu_seqlens=cu_seqlens_from_lengths(LENGTHS))
    with pytest.raises(ValueError, match="batch size 1"):
        mixer(x.expand(2, -1, -1), cu_seqlens=cu_seqlens_from_lengths(LENGTHS))


# -- every mixer --------------------------------------------------------------------------
@pytest.fixture(params=[*library_mixers(), *VARIANTS])
def name(request):
    return request.param


def test_packed_equals_separate_forward_and_gradients(name):
    mixer = build(name)
    total = sum(LENGTHS)
    x = torch.randn(1, total, DIM, dtype=torch.float64, requires_grad=True)
    ramp = torch.linspace(-1, 1, total * DIM, dtype=torch.float64).view(1, total, DIM)
    y_packed, state = mixer(x, cu_seqlens=cu_seqlens_from_lengths(LENGTHS))
    assert state is None
    y_alone = separately(lambda d: mixer(d)[0], x, LENGTHS)
    torch.testing.assert_close(y_packed, y_alone, rtol=1e-10, atol=1e-12)
    assert_same_gradients(
        grads_of(mixer, x, y_packed, ramp),
        grads_of(mixer, x, y_alone, ramp),
        rtol=1e-9,
        atol=1e-11,
    )


def test_nothing_crosses_a_document_boundary(name):
    """Changing one document changes none of the outputs of the others, and the gradient
    of a document's outputs reaches no other document's inputs."""
    mixer = build(name)
    cu = cu_seqlens_from_lengths(LENGTHS)
    x = torch.randn(1, sum(LENGTHS), DIM, dtype=torch.float64)
    y, _ = mixer(x, cu_seqlens=cu)
    x2 = x.clone()
    x2[:, 10:24] += torch.randn(1, 14, DIM, dtype=torch.float64)  # the third document
    y2, _ = mixer(x2, cu_seqlens=cu)
    outside = torch.ones(sum(LENGTHS), dtype=torch.bool)
    outside[10:24] = False
    torch.testing.assert_close(y2[:, outside], y[:, outside], rtol=0, atol=0)
    assert not torch.allclose(y2[:, 10:24], y[:, 10:24])
    xg = x.clone().requires_grad_(True)
    (gx,) = torch.autograd.grad(mixer(xg, cu_seqlens=cu)[0][:, 10:24].sum(), xg)
    assert torch.count_nonzero(gx[:, outside]) == 0


@pytest.mark.parametrize("backend", ["reference", "chunked", "torch"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_memory_op_packed_equals_separate(backend, dtype):
    lengths = (7, 1, 16, 3)  # chunk 4: T not a multiple, T below a chunk, T a multiple
    gates, weights = make_inputs(1, sum(lengths), 2, 4, 2, 6, seed=3)
    gates = [None if g is None else g.to(dtype).requires_grad_() for g in gates]
    weights = tuple(w.to(dtype).requires_grad_() for w in weights)
    leaves = [g for g in gates if g is not None] + list(weights)
    options = dict(chunk_size=4, backend=backend, inner_grad_clip=0.5)
    y, final = ts.ops.lmm.lmm_memory(
        *gates, weights, cu_seqlens=cu_seqlens_from_lengths(lengths), **options
    )
    assert final is None
    pieces, start = [], 0
    for n in lengths:
        part = [None if g is None else g[:, start : start + n] for g in gates]
        pieces.append(ts.ops.lmm.lmm_memory(*part, weights, **options)[0])
        start += n
    y_alone = torch.cat(pieces, 1)
    tol = dict(rtol=1e-9, atol=1e-11) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(y, y_alone, **tol)
    ramp = torch.linspace(-1, 1, y.numel(), dtype=dtype).view_as(y)
    for a, b in zip(
        torch.autograd.grad((y * ramp).sum(), leaves),
        torch.autograd.grad((y_alone * ramp).sum(), leaves),
    ):
        torch.testing.assert_close(a, b, **tol)


def test_memory_op_packed_refuses_states():
    gates, weights = make_inputs(1, 8, 1, 4, 1)
    cu = cu_seqlens_from_lengths([3, 5])
    with pytest.raises(ValueError, match="output_final_state=False"):
        ts.ops.lmm.lmm_memory(*gates, weights, cu_seqlens=cu, output_final_state=True)
    with pytest.raises(ValueError, match="same"):
        ts.ops.lmm.lmm_memory(gates[0], gates[1][:, :7], *gates[2:], weights, cu_seqlens=cu)


# -- the stack and the language model -------------------------------------------------------
@pytest.mark.parametrize("bidirectional", [False, True])
def test_backbone_packed_equals_separate(bidirectional):
    torch.manual_seed(0)
    backbone = Backbone(
        DIM,
        3,
        mixer="lmm,swa,mag",
        mixer_options={m: SMALL_OPTIONS[m] for m in ("lmm", "swa", "mag")},
        heads=HEADS,
        bidirectional=bidirectional,
    ).double()
    total = sum(LENGTHS)
    x = torch.randn(1, total, DIM, dtype=torch.float64, requires_grad=True)
    ramp = torch.linspace(-1, 1, total * DIM, dtype=torch.float64).view(1, total, DIM)
    y_packed, states = backbone(x, cu_seqlens=cu_seqlens_from_lengths(LENGTHS))
    assert states is None
    y_alone = separately(lambda d: backbone(d)[0], x, LENGTHS)
    torch.testing.assert_close(y_packed, y_alone, rtol=1e-10, atol=1e-12)
    assert_same_gradients(
        grads_of(backbone, x, y_packed, ramp),
        grads_of(backbone, x, y_alone, ramp),
        rtol=1e-9,
        atol=1e-11,
    )


def test_lm_packed_equals_separate_and_refuses_a_state():
    from titans_seq.domains.lm import TitansLM

    torch.manual_seed(0)
    model = TitansLM(50, dim=DIM, depth=2, heads=HEADS, mixer="lmm,mac").double()
    tokens = torch.randint(0, 50, (1, sum(LENGTHS)))
    logits, state = model(tokens, cu_seqlens=cu_seqlens_from_lengths(LENGTHS))
    assert state is None
    alone = separately(lambda d: model(d)[0], tokens, LENGTHS)
    torch.testing.assert_close(logits, alone, rtol=1e-10, atol=1e-10)
    _, state = model(tokens)
    with pytest.raises(ValueError, match="states=None"):
        model(tokens, state, cu_seqlens=cu_seqlens_from_lengths(LENGTHS))
