"""The seasonal naive forecast weighed into the forecaster's point forecast."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from format_helpers import edited_config

from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.forecasting.baseline import (
    WEIGHTS,
    WeightLosses,
    choose_weight,
    mix,
    seasonal_naive,
)
from titans_seq.errors import ConfigError
from titans_seq.training import CheckpointError

SMALL = dict(
    dim=8,
    heads=1,
    depth=1,
    random_state=0,
    device="cpu",
    max_epochs=1,
    epoch_windows=64,
    mixer="lmm",
)


def daily_panel(series: int = 4, days: int = 40, noise: float = 0.05, seed: int = 0):
    """Hourly series that repeat one day (phase per series) plus a little noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(24 * days)
    hours = pd.date_range("2021-03-01", periods=len(t), freq="h")
    day = lambda k: 10 + 3 * np.sin(2 * np.pi * t / 24 + k)  # noqa: E731
    return pd.concat(
        pd.DataFrame({"unique_id": f"s{k}", "ds": hours,
                      "y": day(k) + noise * rng.normal(size=len(t))})
        for k in range(series)
    )  # fmt: skip


def test_seasonal_naive_repeats_the_last_season():
    context = torch.arange(10.0).view(1, 10, 1)
    assert seasonal_naive(context, 5, 3)[0, :, 0].tolist() == [7, 8, 9, 7, 8]
    assert seasonal_naive(context, 2, 1)[0, :, 0].tolist() == [9, 9]  # no season: the last value
    assert seasonal_naive(context, 3, 50)[0, :, 0].tolist() == [0, 1, 2]  # longer than the context
    channels = torch.arange(20.0).view(1, 10, 2)
    assert seasonal_naive(channels, 4, 3)[0].tolist() == [[14, 15], [16, 17], [18, 19], [14, 15]]


def test_a_weight_is_kept_only_where_it_lowers_the_loss_by_the_margin():
    assert choose_weight({0.0: 1.0, 0.25: 0.995, 0.5: 1.2, 0.75: 1.3, 1.0: 1.4}) == 0.0
    assert choose_weight({0.0: 1.0, 0.25: 0.9, 0.5: 0.8, 0.75: 0.85, 1.0: 0.95}) == 0.5
    network, naive = torch.zeros(2, 3, 1), torch.ones(2, 3, 1)
    assert torch.equal(mix(network, naive, 0.25), torch.full((2, 3, 1), 0.25))
    losses = WeightLosses("mae")
    losses.add(network, naive, torch.full((2, 3, 1), 0.5))
    assert losses.losses() == {w: abs(w - 0.5) for w in WEIGHTS}


def test_a_series_that_repeats_its_day_takes_the_seasonal_naive_forecast():
    frame = daily_panel()
    f = TitansForecaster(horizon=24, **SMALL).fit(frame)
    assert f.baseline_season_ == 24
    losses = f.baseline_losses_
    assert set(losses) == set(WEIGHTS) and losses[1.0] < 0.05 * losses[0.0]
    assert f.baseline_weight_ == 1.0
    forecast = f.predict()
    last_day = frame.groupby("unique_id").tail(24)
    np.testing.assert_allclose(forecast["TitansForecaster"], last_day["y"])
    # the network alone, and a fixed weight
    alone = TitansForecaster(horizon=24, baseline=None, **SMALL).fit(frame)
    assert alone.baseline_weight_ == 0.0 and alone.baseline_losses_ is None
    half = TitansForecaster(horizon=24, baseline=0.5, **SMALL).fit(frame)
    np.testing.assert_allclose(
        half.predict()["TitansForecaster"],
        0.5 * alone.predict()["TitansForecaster"].to_numpy() + 0.5 * last_day["y"].to_numpy(),
    )
    # score() forecasts as predict() does
    assert f.score(frame) > alone.score(frame)


def test_no_hold_out_or_quantiles_keep_the_network_alone():
    frame = daily_panel()
    held = TitansForecaster(horizon=24, validation_fraction=0.0, **SMALL).fit(frame)
    assert held.baseline_weight_ == 0.0 and held.baseline_losses_ is None
    quantiles = TitansForecaster(horizon=24, quantiles=(0.1, 0.5, 0.9), **SMALL).fit(frame)
    assert quantiles.baseline_weight_ == 0.0


@pytest.mark.parametrize("bad", [-0.1, 1.5, "seasonal", True])
def test_a_bad_baseline_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="baseline"):
        TitansForecaster(horizon=24, baseline=bad, **SMALL).fit(daily_panel(series=1, days=10))


def test_the_weight_is_saved_and_checked(tmp_path):
    f = TitansForecaster(horizon=24, **SMALL).fit(daily_panel())
    f.save(tmp_path / "m")
    g = TitansForecaster.load(tmp_path / "m")
    assert (g.baseline_weight_, g.baseline_season_, g.baseline_losses_) == (
        f.baseline_weight_, f.baseline_season_, f.baseline_losses_,
    )  # fmt: skip
    pd.testing.assert_frame_equal(g.predict(), f.predict())
    edited_config(tmp_path / "m", "forecaster.json", lambda m: m["baseline"].update(weight=2.0))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="baseline weight 2.0"):
        TitansForecaster.load(tmp_path / "m", allow_unverified=True)


def test_a_folder_saved_before_the_weight_loads_as_the_network_alone(tmp_path):
    frame = daily_panel()
    f = TitansForecaster(horizon=24, baseline=None, **SMALL).fit(frame)
    f.save(tmp_path / "m")

    def format_12(meta):
        meta["format_version"] = 12
        del meta["params"]["baseline"], meta["baseline"]

    edited_config(tmp_path / "m", "forecaster.json", format_12)
    with pytest.warns(UserWarning, match="loaded unverified"):
        g = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert (g.baseline, g.baseline_weight_, g.baseline_losses_) == (None, 0.0, None)
    pd.testing.assert_frame_equal(g.predict(), f.predict())
