"""The `forecasting` training task: recipes train end to end, DLinear baseline, metrics."""

import pytest
import torch

from titans_seq.domains.forecasting.dlinear import DLinear
from titans_seq.training import load_config, train


def test_dlinear_shapes_and_initial_mean_forecast():
    model = DLinear(lookback=30, horizon=7)
    x = torch.randn(4, 30, 3)
    assert model(x).shape == (4, 7, 3)
    constant = torch.full((2, 30, 3), 5.0)
    torch.testing.assert_close(model(constant), torch.full((2, 7, 3), 5.0))
    with pytest.raises(ValueError, match="odd"):
        DLinear(30, 7, kernel_size=4)


@pytest.mark.parametrize("architecture", ["simba", "dlinear", "patchtst"])
def test_tiny_recipe_trains_on_etth1_and_improves(tmp_path, architecture):
    cfg = load_config(
        "forecasting/tiny",
        [
            f"model.architecture={architecture}",
            f"train.out_dir={tmp_path}/run",
            "train.progress=false",
            "train.max_steps=40",
            "eval.every=20",
        ],
    )
    result = train(cfg)
    mses = [h["mse"] for h in result.history if "mse" in h]
    assert len(mses) == 2 and all(m == m for m in mses)
    assert mses[-1] < 1.2  # z-scored: well under the variance of the target
    assert (tmp_path / "run" / "best_model.safetensors").is_file()


def test_patchtst_shapes_sees_the_whole_window_and_restores_the_level():
    from titans_seq.domains.forecasting.patchtst import PatchTST

    torch.manual_seed(0)
    model = PatchTST(num_channels=3, lookback=40, horizon=7, dim=16, depth=2, heads=2).eval()
    x = torch.randn(4, 40, 3)
    assert model(x).shape == (4, 7, 3)
    # bidirectional: the first rows of the window change the whole forecast, through every
    # patch (not only the head); channel-independent: channel 1 does not move channel 0
    moved = x.clone()
    moved[:, :5, 1] += 1.0
    delta = (model(moved) - model(x)).abs()
    assert delta[..., 1].min() > 0 and delta[..., 0].max() == 0
    # RevIN: a shifted window gives the same forecast, shifted
    torch.testing.assert_close(model(x + 100.0), model(x) + 100.0, rtol=0, atol=1e-3)
    with pytest.raises(ValueError, match="expected x of shape"):
        model(torch.randn(4, 39, 3))
    with pytest.raises(ValueError, match="divisible"):
        PatchTST(num_channels=3, lookback=40, horizon=7, dim=15, heads=2)


def test_patchtst_gradients_are_finite_and_the_baseline_refuses_what_it_cannot_do():
    from titans_seq.domains.forecasting.covariate_tokens import CovariateShape
    from titans_seq.domains.forecasting.task import ForecastModelConfig, build_forecaster

    cfg = ForecastModelConfig(architecture="patchtst", dim=16, heads=2, depth=1)
    model = build_forecaster(cfg, num_channels=2, lookback=30, horizon=5)
    x = torch.randn(8, 30, 2) * 1e3
    model(x).square().mean().backward()
    assert all(p.grad is not None and p.grad.isfinite().all() for p in model.parameters())
    with pytest.raises(ValueError, match="quantile"):
        build_forecaster(ForecastModelConfig(architecture="patchtst", quantiles=[0.5]), 2, 30, 5)
    with pytest.raises(ValueError, match="covariates"):
        build_forecaster(cfg, 2, 30, 5, CovariateShape(futr=1))


def test_the_point_forecast_of_a_quantile_head():
    """The median level; without one, linear between the levels around 0.5."""
    from titans_seq.domains.forecasting.task import point_forecast

    out = torch.arange(24.0).reshape(1, 2, 3, 4)  # [B, H, C, Q]
    torch.testing.assert_close(point_forecast(out, [0.1, 0.5, 0.8, 0.9]), out[..., 1])
    torch.testing.assert_close(point_forecast(out, [0.1, 0.9, 0.95, 0.99]), out[..., :2].mean(-1))
    weighted = 0.75 * out[..., 0] + 0.25 * out[..., 1]  # 0.5: a quarter of the way 0.4 -> 0.8
    torch.testing.assert_close(point_forecast(out, [0.4, 0.8, 0.85, 0.9]), weighted)
    torch.testing.assert_close(point_forecast(out, [0.6, 0.7, 0.8, 0.9]), out[..., 0])
    torch.testing.assert_close(point_forecast(out[..., 0], None), out[..., 0])


@pytest.mark.parametrize("architecture", ["simba", "patchtst"])
def test_the_config_s_center_reaches_the_network_s_revin(architecture):
    from titans_seq.domains.forecasting.task import ForecastModelConfig, build_forecaster

    cfg = ForecastModelConfig(architecture=architecture, dim=8, depth=1, heads=1, center="last")
    network = build_forecaster(cfg, num_channels=2, lookback=24, horizon=4)
    assert network.revin.center == "last"
    assert network(torch.randn(3, 24, 2)).shape == (3, 4, 2)


def test_the_dlinear_baseline_refuses_a_last_value_center():
    from titans_seq.domains.forecasting.task import ForecastModelConfig, build_forecaster

    cfg = ForecastModelConfig(architecture="dlinear", center="last")
    with pytest.raises(ValueError, match="dlinear baseline reads the series unnormalised"):
        build_forecaster(cfg, num_channels=1, lookback=24, horizon=4)
