"""Simba-style forecaster components: RevIN, EinFFT, patching, the full model with any mixer."""

import numpy as np
import pytest
import torch

from titans_seq.domains.forecasting.einfft import EinFFT
from titans_seq.domains.forecasting.model import SimbaForecaster, num_patches, patchify
from titans_seq.domains.forecasting.revin import CENTERS, RevIN, window_trend_level


@pytest.mark.parametrize("center", CENTERS)
def test_revin_round_trip_and_constant_series(center):
    revin = RevIN(3, center=center)
    with torch.no_grad():
        revin.weight.uniform_(0.5, 2.0)
        revin.bias.normal_()
    x = torch.randn(4, 50, 3) * 5 + 2
    x[:, :, 1] = 7.0  # a constant channel: std 0 must not produce inf/NaN
    z, stats = revin.normalize(x)
    assert torch.isfinite(z).all()
    torch.testing.assert_close(revin.denormalize(z, stats), x, rtol=1e-4, atol=1e-4)
    # quantile forecasts [B, H, C, Q] are denormalised per channel too
    q = z[:, :10, :, None].expand(-1, -1, -1, 3)
    torch.testing.assert_close(revin.denormalize(q, stats)[..., 2], x[:, :10], rtol=1e-4, atol=1e-4)


def test_revin_centered_on_the_last_value_forecasts_persistence_from_zero():
    """With center "last" a zero output is the window's last value; the scale is still the
    window's std, and a left-padded window (mask) takes its std from the observed steps."""
    revin = RevIN(2, center="last")
    x = torch.randn(3, 20, 2) * 4 + 10
    z, (level, std) = revin.normalize(x)
    torch.testing.assert_close(level, x[:, -1:, :])
    torch.testing.assert_close(z[:, -1], torch.zeros(3, 2))
    torch.testing.assert_close(
        std, x.std(dim=1, unbiased=False, keepdim=True), rtol=1e-4, atol=1e-4
    )
    persistence = revin.denormalize(torch.zeros(3, 5, 2), (level, std))
    torch.testing.assert_close(persistence, x[:, -1:, :].expand(-1, 5, -1))
    mask = torch.ones(3, 20)
    mask[:, :8] = 0
    padded = x.clone()
    padded[:, :8] = 0.0
    _, (level_masked, std_masked) = revin.normalize(padded, mask)
    _, (_, std_observed) = revin.normalize(x[:, 8:])
    torch.testing.assert_close(level_masked, x[:, -1:, :])
    torch.testing.assert_close(std_masked, std_observed)
    with pytest.raises(ValueError, match="center must be one of"):
        RevIN(2, center="median")


def _line_at_last_step(values: np.ndarray, steps: np.ndarray, last: int) -> float:
    slope, intercept = np.polyfit(steps, values, 1)
    return slope * last + intercept


def test_revin_trend_center_is_the_least_squares_line_at_the_last_step():
    """The "trend" level against numpy's line fit per window and channel; on an exact line
    it is the last value, and a left-padded window fits its observed steps only."""
    revin = RevIN(2, center="trend")
    t = torch.arange(24, dtype=torch.float64)
    line = (3.0 + 0.5 * t).view(1, -1, 1).expand(2, -1, 2)
    _, (level, _) = revin.normalize(line)
    torch.testing.assert_close(level, line[:, -1:, :])

    x = torch.randn(3, 17, 2, dtype=torch.float64).cumsum(1) + 5
    _, (level, std) = revin.normalize(x)
    steps = np.arange(17)
    expected = [
        [_line_at_last_step(x[b, :, c].numpy(), steps, 16) for c in range(2)] for b in range(3)
    ]
    np.testing.assert_allclose(level[:, 0].numpy(), expected, rtol=1e-10)
    torch.testing.assert_close(
        std, x.std(dim=1, unbiased=False, keepdim=True), rtol=1e-4, atol=1e-4
    )

    mask = torch.ones(3, 17, dtype=torch.float64)
    mask[0, :10], mask[1, :16] = 0, 0  # row 1: one observed step, no slope
    padded = x * mask.unsqueeze(-1)
    _, (level_masked, _) = revin.normalize(padded, mask)
    observed = [_line_at_last_step(x[0, 10:, c].numpy(), steps[10:], 16) for c in range(2)]
    np.testing.assert_allclose(level_masked[0, 0].numpy(), observed, rtol=1e-10)
    torch.testing.assert_close(level_masked[1, 0], x[1, -1])
    torch.testing.assert_close(level_masked[2], level[2])
    mean = x.mean(dim=1, keepdim=True)
    torch.testing.assert_close(window_trend_level(x, mean), level)


def test_einfft_shapes_mixing_and_gradients():
    layer = EinFFT(16, num_blocks=4)
    x = torch.randn(2, 11, 16, requires_grad=True)
    y = layer(x)
    assert y.shape == x.shape
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all() and all(p.grad is not None for p in layer.parameters())
    # spectral mixing: a change in one token reaches the others
    x2 = x.detach().clone()
    x2[:, 0] += 1.0
    assert not torch.allclose(layer(x2)[:, -1], y.detach()[:, -1])
    with pytest.raises(ValueError, match="divisible"):
        EinFFT(10, num_blocks=4)


def _einfft_outputs(layer, form, x, g):
    y = form(x)
    return [y, *torch.autograd.grad((y.float() * g).sum(), [x, *layer.parameters()])]


@pytest.mark.parametrize("tokens", [1, 2, 5, 12, 16, 17, 64])
def test_einfft_dft_form_is_the_fft_form(tokens):
    """The DFT-matrix form against the FFT form in float64, forward and every gradient, on
    odd and even token counts (the Nyquist frequency's imaginary part is ignored)."""
    torch.manual_seed(tokens)
    layer = EinFFT(16, num_blocks=4, init_scale=0.3).double()
    x = torch.randn(3, tokens, 16, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, tokens, 16, dtype=torch.float64)
    dft = _einfft_outputs(layer, layer.forward_dft, x, g)
    fft = _einfft_outputs(layer, layer.forward_fft, x, g)
    for a, b in zip(dft, fft):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_einfft_dft_form_in_float32_and_bf16_autocast(autocast):
    """In float32 (and under CPU bf16 autocast, which rounds the MLP's products alike in
    both forms) the two forms agree to the rounding of their precision."""
    torch.manual_seed(0)
    layer = EinFFT(32, num_blocks=4, init_scale=0.3)
    x = torch.randn(4, 12, 32, requires_grad=True)
    g = torch.randn(4, 12, 32)
    enabled = autocast is not None
    with torch.autocast("cpu", dtype=autocast or torch.bfloat16, enabled=enabled):
        dft = _einfft_outputs(layer, layer.forward_dft, x, g)
        fft = _einfft_outputs(layer, layer.forward_fft, x, g)
    tol = 3e-2 if enabled else 1e-5
    for a, b in zip(dft, fft):
        assert a.dtype == b.dtype
        assert ((a - b).norm() / b.norm()).item() < tol


@pytest.mark.parametrize("form", ["forward_dft", "forward_fft"])
def test_einfft_takes_inputs_of_another_dtype_than_its_weights(form):
    """float64 inputs to a float32 layer (and the reverse) compute in the inputs' precision
    and return their dtype."""
    torch.manual_seed(0)
    layer = EinFFT(8, num_blocks=2, init_scale=0.3)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    y = getattr(layer, form)(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y.float(), getattr(layer, form)(x.float()), rtol=1e-5, atol=1e-6)
    y32 = getattr(layer.double(), form)(x.float())
    assert y32.dtype == torch.float32


def test_einfft_takes_the_fft_form_for_long_token_axes(monkeypatch):
    from titans_seq.domains.forecasting import einfft

    layer = EinFFT(8, num_blocks=2)
    calls = []
    monkeypatch.setattr(layer, "forward_dft", lambda x: calls.append("dft") or x)
    monkeypatch.setattr(layer, "forward_fft", lambda x: calls.append("fft") or x)
    layer(torch.randn(1, einfft.DFT_MAX_TOKENS, 8))
    layer(torch.randn(1, einfft.DFT_MAX_TOKENS + 1, 8))
    assert calls == ["dft", "fft"]


@pytest.mark.parametrize("lookback,patch_len,stride", [(96, 16, 8), (50, 12, 5), (16, 16, 16)])
def test_patch_count_matches_unfold(lookback, patch_len, stride):
    model = SimbaForecaster(
        2,
        lookback,
        8,
        dim=16,
        depth=1,
        mixer="attention",
        heads=2,
        patch_len=patch_len,
        stride=stride,
        einfft_blocks=2,
    )
    patches = patchify(torch.randn(3, lookback), model.patch_len, model.stride)
    assert patches.shape == (3, num_patches(lookback, patch_len, stride), patch_len)


@pytest.mark.parametrize("mixer", ["lmm", "attention", "swa"])
def test_forecaster_shapes_and_channel_independence(mixer):
    torch.manual_seed(0)
    model = SimbaForecaster(
        3,
        32,
        12,
        dim=16,
        depth=2,
        mixer=mixer,
        heads=2,
        mixer_options={"chunk_size": 4} if mixer == "lmm" else {},
        patch_len=8,
        stride=4,
        einfft_blocks=2,
        dropout=0.0,
    )
    model.eval()
    x = torch.randn(2, 32, 3)
    y = model(x)
    assert y.shape == (2, 12, 3)
    # channels are processed as independent series: perturbing channel 0 leaves 1 and 2
    x2 = x.clone()
    x2[:, :, 0] += torch.randn(2, 32)
    y2 = model(x2)
    torch.testing.assert_close(y2[:, :, 1:], y[:, :, 1:])
    assert not torch.allclose(y2[:, :, 0], y[:, :, 0])


def test_quantile_head_and_bad_shapes():
    model = SimbaForecaster(
        2,
        24,
        6,
        dim=16,
        depth=1,
        heads=2,
        patch_len=8,
        stride=4,
        einfft_blocks=2,
        quantiles=(0.1, 0.5, 0.9),
    )
    assert model(torch.randn(5, 24, 2)).shape == (5, 6, 2, 3)
    with pytest.raises(ValueError, match=r"\[B, 24, 2\]"):
        model(torch.randn(5, 23, 2))
