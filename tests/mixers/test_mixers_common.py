"""Properties every registered mixer must have: causality, streaming, validation."""

import pytest
import torch
from mixer_checks import VARIANTS, build_small, library_mixers

import titans_seq as ts

DIM, HEADS = 16, 2


def build(name):
    return build_small(name, DIM, HEADS)


@pytest.fixture(params=[*library_mixers(), *VARIANTS])
def name(request):
    return request.param


def test_core_mixers_are_registered():
    assert {"lmm", "attention", "swa"} <= set(ts.list_mixers())


def test_shape_and_dtype(name):
    mixer = build(name)
    y, state = mixer(torch.randn(2, 13, DIM, dtype=torch.float64))
    assert y.shape == (2, 13, DIM) and y.dtype == torch.float64
    assert state.position == 13 and state.batch_size == 2


@pytest.mark.parametrize("t", [0, 6, 11, 19])
def test_causality(name, t):
    """Perturbing x[:, t+1:] leaves y[:, :t+1] unchanged and changes later outputs."""
    mixer = build(name)
    x = torch.randn(2, 20, DIM, dtype=torch.float64)
    y, _ = mixer(x)
    x2 = x.clone()
    x2[:, t + 1 :] += torch.randn_like(x2[:, t + 1 :])
    y2, _ = mixer(x2)
    torch.testing.assert_close(y2[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-12)
    if t + 1 < 20:
        assert not torch.allclose(y2[:, t + 1 :], y[:, t + 1 :])


def test_streaming_equals_one_shot_for_random_splits(name):
    mixer = build(name)
    T = 29
    x = torch.randn(2, T, DIM, dtype=torch.float64)
    y_full, _ = mixer(x)
    g = torch.Generator().manual_seed(1)
    for _ in range(4):
        cuts = sorted(set(torch.randint(1, T, (4,), generator=g).tolist()))
        state, pieces = None, []
        for a, b in zip([0, *cuts], [*cuts, T]):
            y, state = mixer(x[:, a:b], state)
            pieces.append(y)
        torch.testing.assert_close(torch.cat(pieces, 1), y_full, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_streaming_under_autocast_and_across_its_edge(name, dtype):
    """Under 16-bit autocast, pieces + state == one shot (to 16-bit rounding) for every
    split, and a state made outside autocast continues inside it and the other way."""
    mixer = build(name).float()
    T = 29
    x = torch.randn(2, T, DIM)
    autocast = torch.autocast("cpu", dtype=dtype)
    with autocast:
        y_full, _ = mixer(x)
    for cut in (1, 8, 23, 28):
        with autocast:
            y1, state = mixer(x[:, :cut])
            y2, _ = mixer(x[:, cut:], state)
        streamed = torch.cat([y1, y2], 1).float()
        torch.testing.assert_close(streamed, y_full.float(), rtol=0.05, atol=0.05)
        _, outside = mixer(x[:, :cut])  # float32 state, continued under autocast
        with autocast:
            y2, inside = mixer(x[:, cut:], outside)
        assert torch.isfinite(y2).all()
        y3, _ = mixer(x[:, :1], inside)  # a 16-bit state continued in float32
        assert torch.isfinite(y3).all()


def test_gradients_are_finite(name):
    mixer = build(name).float()
    x = torch.randn(2, 17, DIM, requires_grad=True)
    y, _ = mixer(x)
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all()
    for n, p in mixer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


def test_bad_input(name):
    mixer = build(name)
    with pytest.raises(ValueError, match="rank 3"):
        mixer(torch.randn(5, DIM, dtype=torch.float64))
    with pytest.raises(ValueError, match="D=16"):
        mixer(torch.randn(1, 5, DIM + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="empty sequence"):
        mixer(torch.randn(1, 0, DIM, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        mixer(torch.ones(1, 5, DIM, dtype=torch.long))
    with pytest.raises(TypeError, match="MixerState"):
        mixer(torch.randn(1, 5, DIM, dtype=torch.float64), state=("not", "a", "state"))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_input_is_refused_with_its_position(name, bad):
    mixer = build(name)
    x = torch.randn(2, 20, DIM, dtype=torch.float64)
    x[1, 13, 4] = bad
    with pytest.raises(ValueError, match="non-finite value .* batch 1, position 13, feature 4"):
        mixer(x)
    mixer.check_finite = False  # the opt-out: no check, no error
    y, _ = mixer(x)
    assert y.shape == x.shape


def test_unknown_mixer_lists_the_available_ones():
    with pytest.raises(ValueError, match="available: .*lmm"):
        ts.build_mixer("transformer-xl", dim=DIM)
