"""What the forecaster's "auto" settings choose for short, seasonal, long and panel data."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from format_helpers import as_older_format, edited_config, load_refused

from titans_seq.data import DataError, LogStandardScaler
from titans_seq.domains.forecasting import TitansForecaster, data_defaults
from titans_seq.domains.forecasting import estimator as estimator_module
from titans_seq.domains.forecasting.data_defaults import (
    EPOCH_WINDOWS,
    MAX_EPOCHS,
    MIN_EPOCHS,
    PREDICTABLE_INCREMENTS,
    VALIDATION_WINDOWS,
    DataShape,
    choose_center,
    choose_centers,
    choose_ensemble_size,
    choose_epoch_windows,
    choose_epochs,
    choose_lookback,
    choose_loss,
    choose_mixer,
    choose_mixers,
    choose_patience,
    choose_width,
    increment_autocorrelation,
    season_length,
    validation_subset,
    week_length,
)
from titans_seq.domains.forecasting.task import point_loss
from titans_seq.errors import ConfigError
from titans_seq.training import CheckpointError

# the memory alone: the mixers' comparison has tests of its own
SMALL_MODEL = dict(
    dim=8, depth=1, heads=1, ensemble_size=1, random_state=0, device="cpu", mixer="lmm"
)


@pytest.mark.parametrize(
    "freq, season",
    [("h", 24), ("15min", 96), ("10min", 144), ("D", 7), ("B", 5), ("W-SAT", 52),
     ("MS", 12), ("ME", 12), ("QS-DEC", 4), ("3MS", 4), ("YS", 1), (None, 1), ("2D", 1)],
)  # fmt: skip
def test_season_length_follows_the_frequency(freq, season):
    assert season_length(freq) == season


@pytest.mark.parametrize(
    "freq, week", [("h", 168), ("15min", 672), ("30min", 336), ("D", None), ("W-MON", None),
                   ("MS", None), (None, None)],
)  # fmt: skip
def test_intraday_data_has_a_week(freq, week):
    assert week_length(freq) == week


@pytest.mark.parametrize(
    "shape, lookback",
    [
        # a monthly series of 144 points forecast a year ahead: few windows, two horizons
        (DataShape(rows=97, series=1, horizon=12, freq="MS"), 24),
        # a yearly series with a few hundred windows: two horizons, not longer
        (DataShape(rows=242, series=1, horizon=10, freq="YS"), 20),
        # a monthly series with more windows: a quarter of the rows, up to 96
        (DataShape(rows=615, series=1, horizon=12, freq="MS"), 96),
        # a weekly series: at least one season
        (DataShape(rows=200, series=1, horizon=4, freq="W-SAT"), 52),
        # a weekly panel with many windows: 96 weeks would add less than a season
        (DataShape(rows=870, series=7, horizon=24, freq="W-TUE"), 52),
        # ... so would a daily lookback of 96 days beyond 90 (48 + 7 <= 96 is kept)
        (DataShape(rows=870, series=7, horizon=45, freq="D"), 90),
        (DataShape(rows=6_800, series=8, horizon=24, freq="D"), 96),
        # ... unless the increments are unpredictable (a random walk): two horizons
        (DataShape(6_800, 8, 24, "D", increment_autocorrelation=0.01), 48),
        (DataShape(6_800, 8, 24, "D", increment_autocorrelation=-0.4), 48),
        (DataShape(6_800, 8, 24, "D", increment_autocorrelation=0.3), 96),
        # a quarterly panel of 12 series: enough windows for a quarter of the rows
        (DataShape(rows=165, series=12, horizon=8, freq="QS-DEC"), 41),
        # years of hourly rows: a week, the weekly cycle in view
        (DataShape(rows=15_000, series=7, horizon=24, freq="h"), 168),
        # M4's hourly panel: 414 series of 630-864 training hours, a week
        (DataShape(rows=630, series=414, horizon=48, freq="h"), 168),
        # ... not before three weeks of rows, nor for a random walk
        (DataShape(rows=500, series=414, horizon=48, freq="h"), 96),
        (DataShape(15_000, 7, 24, "h", increment_autocorrelation=0.01), 48),
        # a week of 15-minute rows (672) is longer than a window may be: a day
        (DataShape(rows=50_000, series=7, horizon=24, freq="15min"), 96),
        (DataShape(rows=5_000, series=1, horizon=24, freq="30min"), 336),
        # a horizon beyond 48 steps: two horizons
        (DataShape(rows=15_000, series=1, horizon=96, freq="h"), 192),
        # too short for two horizons: half of what the horizon leaves
        (DataShape(rows=30, series=1, horizon=12, freq="MS"), 9),
    ],
)
def test_the_lookback_rule(shape, lookback):
    assert choose_lookback(shape) == lookback


def test_the_lookback_is_never_below_one_patch():
    assert choose_lookback(DataShape(rows=12, series=1, horizon=6, freq=None), 8) == 8


def test_epochs_and_patience_scale_with_the_windows():
    assert choose_epochs(60) == MAX_EPOCHS
    assert choose_epochs(5_000) == 20
    assert choose_epochs(110_000) == MIN_EPOCHS
    # a panel of 414 series: 500 windows of each, 207,000 in all
    assert choose_epochs(25_000, series=414) == 9
    assert choose_epochs(25_000, series=7) == 4
    assert choose_patience(MAX_EPOCHS) == 20
    assert choose_patience(MIN_EPOCHS) == 3


def test_a_long_panel_draws_a_share_of_its_windows_an_epoch():
    assert choose_epoch_windows(900) == 900  # every window
    assert choose_epoch_windows(376_000) == EPOCH_WINDOWS
    assert choose_epoch_windows(376_000, 1_000) == 1_000
    assert choose_epoch_windows(900, 5_000) == 900
    # four epochs of EPOCH_WINDOWS show a long panel about WINDOWS_SEEN windows
    assert choose_epochs(choose_epoch_windows(376_000)) == 4


def test_validation_reads_evenly_spaced_windows_of_a_long_hold_out():
    np.testing.assert_array_equal(validation_subset(7), np.arange(7))
    picked = validation_subset(3 * VALIDATION_WINDOWS + 1)
    assert len(picked) == VALIDATION_WINDOWS == len(np.unique(picked))
    assert (picked[0], picked[-1]) == (0, 3 * VALIDATION_WINDOWS)
    assert set(np.diff(picked).tolist()) <= {3, 4}  # evenly spaced


def test_an_epoch_of_fewer_windows_validates_more_often(monkeypatch):
    """600 training windows, 64 an epoch: 2 steps of 32 between validations; the
    validation hold-out is read through its evenly spaced subset."""
    read = []
    subset = data_defaults.validation_subset

    def recording_subset(count):
        read.append(count)
        return subset(count)

    monkeypatch.setattr(estimator_module, "validation_subset", recording_subset)
    f = TitansForecaster(horizon=12, max_epochs=3, patience=0, epoch_windows=64, **SMALL_MODEL)
    f.fit(monthly(700))
    assert f.epoch_windows_ == 64 and f.n_epochs_ == 3
    assert [e["step"] for e in f.history_] == [2, 4, 6]
    assert read == [70 - 12 + 1]  # the last 70 rows' windows
    every = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly(700))
    assert every.epoch_windows_ == 700 - 70 - every.lookback_ - 12 + 1  # all of them


def test_few_windows_get_an_ensemble_of_narrow_models():
    assert (choose_width(108), choose_ensemble_size(108)) == ((16, 2), 5)
    assert (choose_width(499), choose_ensemble_size(499)) == ((16, 2), 5)
    assert (choose_width(500), choose_ensemble_size(500)) == ((64, 4), 1)
    assert choose_width(100, heads=3) == (18, 3)  # a multiple of the given heads
    assert choose_width(100, dim=15) == (15, 1)  # heads that divide the given width
    assert choose_width(1000, dim=48) == (48, 4)
    assert choose_width(1000, dim=8, heads=8) == (8, 8)


def test_an_ensemble_averages_networks_of_seeds_drawn_from_the_random_state(tmp_path):
    """Member 0 trains from random_state, member m from `member_seed(random_state, m)`: the
    forecast is the mean of the single networks so seeded, and the ensembles of two random
    states share no network (consecutive seeds would share all but one)."""
    from titans_seq.domains.forecasting.estimator import member_seed

    # the networks alone: each single fit would weigh the seasonal naive forecast in by its
    # own hold-out
    shape = dict(depth=1, max_epochs=1, device="cpu", baseline=None, mixer="lmm")
    f = TitansForecaster(horizon=12, random_state=3, **shape).fit(monthly())
    assert (f.dim_, f.heads_, f.ensemble_size_) == (16, 2, 5)  # 108 training windows
    assert [e["member"] for e in f.history_] == [0, 1, 2, 3, 4]
    seeds = [member_seed(3, i) for i in range(5)]
    assert seeds[0] == 3 and len(set(seeds)) == 5
    assert not set(seeds) & {member_seed(4, i) for i in range(5)}
    members = [
        TitansForecaster(horizon=12, random_state=seed, dim=16, heads=2, ensemble_size=1, **shape)
        .fit(monthly())
        .predict()
        for seed in seeds
    ]
    mean = sum(p.to_numpy() for p in members) / 5
    np.testing.assert_allclose(f.predict().to_numpy(), mean, rtol=1e-5, atol=1e-6)
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert (loaded.dim_, loaded.heads_, loaded.ensemble_size_) == (16, 2, 5)
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_an_ensemble_s_weights_of_another_size_are_named(tmp_path):
    f = TitansForecaster(horizon=12, depth=1, max_epochs=1, ensemble_size=2, device="cpu")
    f.fit(monthly()).save(tmp_path / "m")
    edited_config(tmp_path / "m", "forecaster.json", lambda m: m["chosen"].update(ensemble_size=3))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="ensemble_size"):
        TitansForecaster.load(tmp_path / "m", allow_unverified=True)


def walks(columns: int, rows: int, seed: int = 0, noise: float = 0.0) -> list[np.ndarray]:
    """Random walks, each observed with white `noise` (which makes the increments'
    lag-1 autocorrelation negative)."""
    rng = np.random.default_rng(seed)
    steps = rng.standard_normal((columns, rows))
    return list(steps.cumsum(1) + noise * rng.standard_normal((columns, rows)))


def weekly_cycles(columns: int, rows: int, seed: int = 0) -> list[np.ndarray]:
    """Walks plus a 7-step cycle: increments that repeat at lag 7."""
    t = np.arange(rows)
    return [w + 3 * np.sin(2 * np.pi * t / 7) for w in walks(columns, rows, seed)]


def test_increments_of_random_walks_are_not_predictable():
    assert abs(increment_autocorrelation(walks(8, 2_000), 7)) < 0.05
    # measurement noise around the walk: negative at lag 1, so no larger
    noisy = walks(8, 2_000, noise=1.0)
    assert increment_autocorrelation(noisy, 7) < 0.05
    assert increment_autocorrelation(noisy, 7) < PREDICTABLE_INCREMENTS


def test_increments_that_repeat_are_predictable():
    assert increment_autocorrelation(weekly_cycles(8, 2_000), 7) > 0.3
    rng = np.random.default_rng(0)
    steps = np.zeros(5_000)
    for t in range(1, len(steps)):  # increments following AR(1) with 0.5
        steps[t] = 0.5 * steps[t - 1] + rng.standard_normal()
    assert increment_autocorrelation([steps.cumsum()], 3) == pytest.approx(0.5, abs=0.05)


def test_increment_autocorrelation_equals_the_direct_sums():
    """Pooled over columns of unequal lengths, as sum z[t] z[t-k] / sum z[t]^2 directly."""
    columns = [walks(1, n, seed)[0] for seed, n in enumerate((50, 300, 123))]
    columns = [c + np.sin(np.arange(len(c))) for c in columns]
    top, bottom = np.zeros(5), 0.0
    for c in columns:
        d = np.diff(c)
        z = (d - d.mean()) / d.std()
        bottom += z @ z
        top += [z[k:] @ z[:-k] for k in range(1, 6)]
    assert increment_autocorrelation(columns, 5) == pytest.approx((top / bottom).max())


def test_increment_autocorrelation_leaves_out_gaps_constants_and_short_columns():
    column = weekly_cycles(1, 500)[0]
    gapped = column.copy()
    gapped[[40, 41, 200]] = np.nan
    value = increment_autocorrelation([gapped], 7)
    assert np.isfinite(value)
    assert value == pytest.approx(increment_autocorrelation([column], 7), abs=0.05)
    assert increment_autocorrelation([np.ones(100)], 7) is None
    assert increment_autocorrelation([np.arange(5.0)], 7) is None
    assert increment_autocorrelation([np.full(100, np.nan)], 7) is None
    # a constant or short column does not change a panel's value
    assert increment_autocorrelation([column, np.ones(100), np.arange(3.0)], 7) == (
        increment_autocorrelation([column], 7)
    )


def daily_panel(columns: list[np.ndarray]) -> pd.DataFrame:
    index = pd.date_range("2001-01-01", periods=len(columns[0]), freq="D")
    return pd.concat(
        pd.DataFrame({"unique_id": f"s{i}", "ds": index, "y": c}) for i, c in enumerate(columns)
    )


def test_a_daily_random_walk_panel_keeps_two_horizons_of_lookback():
    """8 series of 400 days: enough windows for a quarter of the 360 training rows (90
    days), which the weekly cycle gets and the random walks do not."""
    fit = dict(horizon=24, max_epochs=1, **SMALL_MODEL)
    assert TitansForecaster(**fit).fit(daily_panel(weekly_cycles(8, 400))).lookback_ == 90
    assert TitansForecaster(**fit).fit(daily_panel(walks(8, 400))).lookback_ == 48


def monthly(n=144, seed=0) -> pd.DataFrame:
    t = np.arange(n)
    rng = np.random.default_rng(seed)
    values = 10 + 0.05 * t + np.sin(2 * np.pi * t / 12) + 0.1 * rng.standard_normal(n)
    index = pd.date_range("2000-01-01", periods=n, freq="MS", name="date")
    return pd.DataFrame({"y": values}, index=index)


def test_a_short_monthly_series_gets_two_horizons_and_many_epochs():
    f = TitansForecaster(horizon=12, patience=1, **SMALL_MODEL).fit(monthly())
    assert f.lookback_ == 24
    assert f.max_epochs_ == MAX_EPOCHS  # 108 windows: each seen many times
    assert f.patience_ == 1  # given, so kept
    assert (f.dim_, f.heads_) == (8, 1)
    assert f.get_params()["lookback"] == "auto"  # the parameter is left as given
    assert f.predict().shape == (12, 1)


def test_a_panel_with_many_windows_gets_a_longer_lookback():
    frames = [
        monthly(160, seed).rename_axis("ds").reset_index().assign(unique_id=f"s{seed}")
        for seed in range(8)
    ]
    panel = pd.concat(frames).rename(columns={"date": "ds"})
    f = TitansForecaster(horizon=6, max_epochs=1, **SMALL_MODEL).fit(panel)
    assert f.lookback_ == 36  # a quarter of the 144 training rows
    assert f.max_epochs_ == 1 and f.patience_ == 3


def test_given_settings_are_used_as_they_are():
    f = TitansForecaster(horizon=12, lookback=30, max_epochs=1, patience=0, **SMALL_MODEL)
    f.fit(monthly())
    assert (f.lookback_, f.max_epochs_, f.patience_) == (30, 1, 0)


def test_what_auto_chose_is_saved_and_loaded(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "forecaster.json").read_text())
    assert meta["params"]["lookback"] == "auto"
    assert f.center_ in ("mean", "last", "trend")
    assert meta["chosen"] == {
        "lookback": 24, "max_epochs": 1, "epoch_windows": 95, "patience": 3, "dim": 8,
        "heads": 1, "ensemble_size": 1, "loss": "mae", "center": f.center_,
        "batch_size": 32, "learning_rate": 1e-3, "mixer": "lmm", "ema_decay": None,
        "target_transform": None,
    }  # fmt: skip
    assert meta["center_losses"] == f.center_losses_
    loaded = TitansForecaster.load(tmp_path / "m")
    assert loaded.lookback_ == 24
    assert (loaded.center_, loaded.center_losses_) == (f.center_, f.center_losses_)
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_a_forecaster_saved_before_auto_widths_loads_with_its_width(tmp_path):
    """A format-6 folder (dim and heads numbers in params, not in chosen) is read as it
    was trained."""
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    as_older_format(
        tmp_path / "m", "forecaster.json", 6,
        params=("ensemble_size", "loss", "epoch_windows", "refit"),
        chosen=("dim", "heads", "ensemble_size", "loss", "epoch_windows"),
    )  # fmt: skip
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert (loaded.dim_, loaded.heads_, loaded.ensemble_size_) == (8, 1, 1)
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_few_windows_train_on_absolute_error():
    assert choose_loss(108, None) == choose_loss(499, ()) == "mae"
    assert choose_loss(500, None) == "mse"
    # hundreds of series: absolute error however many windows
    assert choose_loss(100_000, None, series=414) == "mae"
    assert choose_loss(100_000, None, series=21) == "mse"
    assert choose_loss(100_000, (0.5,), series=414) == "mse"
    assert choose_loss(108, (0.1, 0.5, 0.9)) == "mse"  # a quantile head: the pinball loss
    short = TitansForecaster(horizon=12, max_epochs=2, **SMALL_MODEL).fit(monthly())
    assert short.loss_ == "mae" and short.get_params()["loss"] == "auto"
    # the validation loss that stops the fit is the training loss: absolute error
    assert all(entry["loss"] == entry["mae"] for entry in short.history_)
    banded = TitansForecaster(horizon=12, max_epochs=1, quantiles=(0.1, 0.5, 0.9), **SMALL_MODEL)
    assert banded.fit(monthly()).loss_ == "mse"
    given = TitansForecaster(horizon=12, max_epochs=1, loss="mse", **SMALL_MODEL).fit(monthly())
    assert given.loss_ == "mse" and all(e["loss"] == e["mse"] for e in given.history_)
    with pytest.raises(ConfigError, match="loss='mae' is for point forecasts"):
        TitansForecaster(horizon=12, loss="mae", quantiles=(0.5,)).fit(monthly())


def test_the_point_losses_are_the_mean_squared_and_absolute_errors():
    prediction, target = torch.tensor([[1.0, -2.0], [0.5, 3.0]]), torch.zeros(2, 2)
    assert float(point_loss(prediction, target, "mse")) == pytest.approx((1 + 4 + 0.25 + 9) / 4)
    assert float(point_loss(prediction, target, "mae")) == pytest.approx((1 + 2 + 0.5 + 3) / 4)


def test_a_forecaster_saved_before_epoch_windows_loads_without_them(tmp_path):
    """A format-8 folder trained on every window an epoch, a number it did not record."""
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    as_older_format(
        tmp_path / "m", "forecaster.json", 8, ["epoch_windows", "refit"], ["epoch_windows"]
    )
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert loaded.epoch_windows_ is None and loaded.get_params()["epoch_windows"] == "auto"
    assert (loaded.lookback_, loaded.max_epochs_, loaded.loss_) == (24, 1, "mae")
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_a_forecaster_saved_before_the_point_loss_loads_as_trained(tmp_path):
    """A format-7 folder (no loss) trained on squared error; a params loss that disagrees
    with what the folder chose is named."""
    f = TitansForecaster(horizon=12, max_epochs=1, loss="mse", **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    older = ["loss", "epoch_windows"]
    meta = as_older_format(tmp_path / "m", "forecaster.json", 7, [*older, "refit"], older)
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert loaded.loss_ == "mse" and loaded.model_.point_loss == "mse"
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())
    meta.update(format_version=8, chosen={**meta["chosen"], "loss": "mse"})
    meta["params"]["loss"] = "mae"
    (tmp_path / "m" / "forecaster.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="params loss = 'mae'"):
        TitansForecaster.load(tmp_path / "m", allow_unverified=True)


@pytest.mark.parametrize(
    "name, value",
    [("lookback", "long"), ("lookback", 0), ("max_epochs", "AUTO"), ("patience", -1),
     ("dim", "wide"), ("heads", 0), ("ensemble_size", 0), ("loss", "huber"),
     ("epoch_windows", 0), ("epoch_windows", "all"), ("refit", "yes"), ("refit", 1),
     ("center", "median"), ("center", None)],
)  # fmt: skip
def test_a_bad_setting_is_named(name, value):
    with pytest.raises(Exception, match=name):
        TitansForecaster(horizon=12, **{name: value}).fit(monthly())


def test_few_windows_refit_on_every_row_for_the_epochs_the_hold_out_chose():
    """Below 500 training windows the networks train again on all rows for the median of
    their best epochs: the same as a fit without a hold-out for that many epochs."""
    f = TitansForecaster(horizon=12, max_epochs=6, **SMALL_MODEL).fit(monthly())
    per_epoch = f.history_[0]["step"]
    best = min(f.history_, key=lambda entry: entry["loss"])["step"] // per_epoch
    assert f.refit_epochs_ == best and f.n_epochs_ == 6
    direct = TitansForecaster(
        horizon=12, lookback=f.lookback_, max_epochs=best, patience=0, validation_fraction=0.0,
        refit=False, center=f.center_, baseline=f.baseline_weight_, **SMALL_MODEL,
    ).fit(monthly())  # fmt: skip
    assert direct.refit_epochs_ is None
    pd.testing.assert_frame_equal(f.predict(), direct.predict())
    kept = TitansForecaster(horizon=12, max_epochs=6, refit=False, **SMALL_MODEL).fit(monthly())
    assert kept.refit_epochs_ is None
    assert not np.allclose(kept.predict().to_numpy(), f.predict().to_numpy())


def test_the_refit_takes_the_median_of_an_ensemble_s_best_epochs(monkeypatch):
    chosen = []
    train_members = estimator_module.TitansForecaster._train_members

    def recording(self, train_set, val_set, max_epochs, epoch_windows, patience, center, mixer):
        trained = train_members(
            self, train_set, val_set, max_epochs, epoch_windows, patience, center, mixer
        )
        chosen.append((val_set is None, max_epochs, trained.best_epochs, center))
        return trained

    monkeypatch.setattr(estimator_module.TitansForecaster, "_train_members", recording)
    shape = dict(
        dim=8, depth=1, heads=1, ensemble_size=3, random_state=0, device="cpu", mixer="lmm"
    )
    f = TitansForecaster(horizon=12, max_epochs=5, **shape).fit(monthly())
    # "auto" trains the hold-out's networks from each center, then refits the chosen one
    *held_out, (refit, refit_epochs, _, center) = chosen
    assert [entry[3] for entry in held_out] == ["mean", "last", "trend"]
    assert all(not held and epochs == 5 for held, epochs, _, _ in held_out) and refit
    assert center == f.center_ and set(f.center_losses_) == {"mean", "last", "trend"}
    best = next(best for _, _, best, c in held_out if c == f.center_)
    assert refit_epochs == f.refit_epochs_ == int(np.median(best))


def test_a_series_too_short_for_its_fraction_holds_out_a_horizon_before_a_refit(monkeypatch):
    """108 monthly rows forecast 12 ahead: a tenth (10 rows) holds no forecast window, so
    with a refit to follow the last 12 rows choose the epochs; without one, no hold-out."""
    windows = []
    train_members = estimator_module.TitansForecaster._train_members

    def recording(self, train_set, val_set, max_epochs, epoch_windows, patience, center, mixer):
        windows.append((len(train_set), None if val_set is None else len(val_set)))
        return train_members(
            self, train_set, val_set, max_epochs, epoch_windows, patience, center, mixer
        )

    monkeypatch.setattr(estimator_module.TitansForecaster, "_train_members", recording)
    f = TitansForecaster(horizon=12, max_epochs=4, center="mean", **SMALL_MODEL)
    f.fit(monthly(108))
    # lookback 24: 96 - 24 - 12 + 1 windows train, one forecasts the last 12 rows; then all 73
    assert windows == [(61, 1), (73, None)]
    assert f.refit_epochs_ is not None and len(f.history_) == 4
    windows.clear()
    kept = TitansForecaster(horizon=12, max_epochs=4, refit=False, **SMALL_MODEL)
    kept.fit(monthly(108))
    assert windows == [(73, None)] and kept.refit_epochs_ is None
    windows.clear()
    TitansForecaster(horizon=12, max_epochs=4, validation_fraction=0.0, **SMALL_MODEL).fit(
        monthly(108)
    )
    assert windows == [(73, None)]


def test_a_refit_is_saved_and_a_folder_from_before_it_loads_without_one(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=3, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert loaded.refit_epochs_ == f.refit_epochs_ is not None
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())
    as_older_format(tmp_path / "m", "forecaster.json", 9, ["refit"])
    with pytest.warns(UserWarning, match="loaded unverified"):
        older = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert older.refit_epochs_ is None and older.get_params()["refit"] is False


def test_a_long_series_gets_one_wide_model():
    long = TitansForecaster(horizon=12, max_epochs=1, depth=1, device="cpu").fit(monthly(700))
    assert (long.dim_, long.heads_, long.ensemble_size_) == (64, 4, 1)
    assert long.refit_epochs_ is None  # 600 training windows: the hold-out's network
    assert long.get_params()["dim"] == "auto"


def test_few_windows_with_a_hold_out_compare_the_centers():
    assert choose_centers(499, has_holdout=True) == ("mean", "last")
    assert choose_centers(499, has_holdout=False) == ("mean",)
    assert choose_centers(500, has_holdout=True) == ("mean",)
    # the trend where the lookback holds two whole seasons of a known season
    assert choose_centers(499, True, lookback=24, season=12) == ("mean", "last", "trend")
    assert choose_centers(499, True, lookback=23, season=12) == ("mean", "last")
    assert choose_centers(499, True, lookback=40, season=1) == ("mean", "last")  # yearly
    assert choose_centers(500, True, lookback=24, season=12) == ("mean",)
    assert choose_centers(499, False, lookback=24, season=12) == ("mean",)


def test_another_center_needs_a_clearly_lower_validation_loss():
    assert choose_center({"mean": 1.0, "last": 0.95}) == "last"
    assert choose_center({"mean": 1.0, "last": 0.995}) == "mean"  # within the margin
    assert choose_center({"mean": 1.0, "last": 1.2}) == "mean"
    assert choose_center({"mean": 1.0}) == "mean"
    # of three, the lowest of the others, if it clears the margin
    assert choose_center({"mean": 1.0, "last": 0.98, "trend": 0.9}) == "trend"
    assert choose_center({"mean": 1.0, "last": 0.95, "trend": 0.995}) == "last"
    assert choose_center({"mean": 1.0, "last": 1.1, "trend": 0.995}) == "mean"


def test_auto_keeps_the_center_the_validation_losses_choose():
    f = TitansForecaster(horizon=12, max_epochs=3, **SMALL_MODEL).fit(monthly())
    losses = f.center_losses_
    # 24 months of lookback: two seasons, so the trend competes too
    assert f.lookback_ == 24
    assert set(losses) == {"mean", "last", "trend"} and all(np.isfinite(list(losses.values())))
    assert f.center_ == choose_center(losses)
    assert f.model_.revin.center == f.center_
    # a center's loss is the mean over its networks of their lowest validation loss
    lowest = {}
    for entry in f.history_:
        if "loss" in entry:
            member = entry.get("member", 0)
            lowest[member] = min(lowest.get(member, np.inf), entry["loss"])
    assert np.mean(list(lowest.values())) == pytest.approx(losses[f.center_], rel=1e-12)


def test_a_panel_of_short_monthly_series_with_gaps_compares_the_trend_too():
    """Monthly series of 50, 90 and 144 rows in one long frame, one given in reverse order,
    one with missing months (interpolated): the trend is compared, and a forecast from each
    center is finite."""
    frames = []
    for uid, rows in (("a", 50), ("b", 90), ("c", 144)):
        frame = monthly(rows, seed=rows).rename_axis("ds").reset_index().assign(unique_id=uid)
        frames.append(frame.iloc[::-1].reset_index(drop=True) if uid == "b" else frame)
    panel = pd.concat(frames, ignore_index=True)
    panel.loc[(panel["unique_id"] == "c") & (panel.index % 17 == 3), "y"] = np.nan
    f = TitansForecaster(horizon=12, max_epochs=2, missing="interpolate", **SMALL_MODEL)
    f.fit(panel)
    assert f.lookback_ == 24 and set(f.center_losses_) == {"mean", "last", "trend"}
    forecast = f.predict()
    assert set(forecast["unique_id"]) == {"a", "b", "c"}
    assert np.isfinite(forecast.select_dtypes("number").to_numpy()).all()
    for center in ("trend", "last"):
        given = TitansForecaster(
            horizon=12, max_epochs=1, missing="interpolate", center=center, **SMALL_MODEL
        ).fit(panel)
        assert np.isfinite(given.predict().select_dtypes("number").to_numpy()).all()


def test_yearly_data_compares_the_mean_and_the_last_value_only():
    years = monthly(120).set_axis(pd.date_range("1900", periods=120, freq="YS", name="date"))
    f = TitansForecaster(horizon=8, max_epochs=2, **SMALL_MODEL).fit(years)
    assert set(f.center_losses_) == {"mean", "last"}


@pytest.mark.parametrize("center", ["mean", "last", "trend"])
def test_a_given_center_is_used_without_comparing(center):
    f = TitansForecaster(horizon=12, max_epochs=2, center=center, **SMALL_MODEL)
    f.fit(monthly())
    assert (f.center_, f.center_losses_) == (center, None)
    assert f.model_.revin.center == center
    assert np.isfinite(f.predict().select_dtypes("number").to_numpy()).all()


def test_many_windows_keep_the_mean_center():
    f = TitansForecaster(horizon=4, max_epochs=1, **SMALL_MODEL).fit(monthly(700))
    assert (f.center_, f.center_losses_) == ("mean", None)


def test_a_forecaster_saved_before_the_center_loads_with_the_mean(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=2, center="mean", **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    meta = as_older_format(tmp_path / "m", "forecaster.json", 10, ["center"], ["center"])
    del meta["center_losses"]
    (tmp_path / "m" / "forecaster.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert (loaded.center, loaded.center_, loaded.center_losses_) == ("mean", "mean", None)
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_a_saved_center_that_is_not_one_is_named(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=1, center="last", **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    meta = as_older_format(tmp_path / "m", "forecaster.json", 11)
    meta["params"]["center"] = "auto"
    meta["chosen"]["center"] = "median"
    (tmp_path / "m" / "forecaster.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="center 'median' is not one of"):
        TitansForecaster.load(tmp_path / "m", allow_unverified=True)


def test_the_mixers_compared_and_the_margin_attention_must_clear():
    assert choose_mixers(150_000, validation_windows=100) == ("lmm", "attention")
    assert choose_mixers(150_001, validation_windows=100) == ("lmm",)
    assert choose_mixers(150_000, validation_windows=99) == ("lmm",)
    assert choose_mixers(1_000, validation_windows=0) == ("lmm",)
    assert choose_mixer({"lmm": 1.0, "attention": 0.95}) == "attention"
    assert choose_mixer({"lmm": 1.0, "attention": 0.995}) == "lmm"  # within the margin
    assert choose_mixer({"lmm": 1.0, "attention": 1.2}) == "lmm"
    assert choose_mixer({"lmm": 1.0}) == "lmm"


def _mixer_of(network) -> str:
    return type(network.blocks[0].mixer).__name__


def test_a_short_series_keeps_the_memory_its_few_validation_windows_cannot_judge():
    shape = {k: v for k, v in SMALL_MODEL.items() if k != "mixer"}
    f = TitansForecaster(horizon=12, max_epochs=1, **shape).fit(monthly())
    assert (f.mixer_, f.mixer_losses_, f.plan_.mixers) == ("lmm", None, ("lmm",))


@pytest.fixture
def one_validation_window_judges(monkeypatch):
    """The monthly series' hold-out is enough to compare the mixers (fast tests)."""
    monkeypatch.setattr(data_defaults, "MIXER_VALIDATION_WINDOWS", 1)


@pytest.mark.usefixtures("one_validation_window_judges")
def test_auto_trains_the_memory_and_attention_and_keeps_what_the_hold_out_chooses(tmp_path):
    shape = {k: v for k, v in SMALL_MODEL.items() if k != "mixer"}
    f = TitansForecaster(horizon=12, max_epochs=2, center="mean", **shape).fit(monthly())
    assert f.get_params()["mixer"] == "auto" and f.plan_.mixers == ("lmm", "attention")
    losses = f.mixer_losses_
    assert set(losses) == {"lmm", "attention"} and all(np.isfinite(list(losses.values())))
    assert f.mixer_ == choose_mixer(losses)
    # the kept networks are the chosen mixer's; their history is theirs
    assert f.history_ and f.predict().shape == (12, 1)
    f.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "forecaster.json").read_text())
    assert meta["chosen"]["mixer"] == f.mixer_ and meta["mixer_losses"] == losses
    assert meta["plan"]["mixers"] == ["lmm", "attention"]
    loaded = TitansForecaster.load(tmp_path / "m")
    assert (loaded.mixer_, loaded.mixer_losses_) == (f.mixer_, losses)
    assert loaded.plan_.mixers == ("lmm", "attention")
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


@pytest.mark.usefixtures("one_validation_window_judges")
def test_attention_chosen_on_the_hold_out_is_the_network_trained_and_saved(monkeypatch, tmp_path):
    """Whichever mixer the losses choose, the forecaster's networks (hold-out, refit and
    saved) are that mixer's, each center compared for it."""
    monkeypatch.setattr(estimator_module, "choose_mixer", lambda losses: "attention")
    shape = {k: v for k, v in SMALL_MODEL.items() if k != "mixer"}
    f = TitansForecaster(horizon=12, max_epochs=2, **shape).fit(monthly())
    assert f.mixer_ == "attention" and f.refit_epochs_ is not None
    assert _mixer_of(f.model_) == _mixer_of(
        TitansForecaster(horizon=12, max_epochs=1, mixer="attention", **shape).fit(monthly()).model_
    )
    assert _mixer_of(f.model_) != _mixer_of(
        TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly()).model_
    )
    assert set(f.center_losses_) == {"mean", "last", "trend"}
    assert f.mixer_losses_["attention"] == pytest.approx(f.center_losses_[f.center_])
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert loaded.mixer_ == "attention"
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())


def test_the_memory_s_options_keep_the_memory_alone():
    shape = {k: v for k, v in SMALL_MODEL.items() if k != "mixer"}
    f = TitansForecaster(horizon=12, max_epochs=1, mixer_options={"chunk_size": 4}, **shape)
    f.fit(monthly())
    assert (f.mixer_, f.mixer_losses_, f.plan_.mixers) == ("lmm", None, ("lmm",))


def test_a_folder_saved_before_the_mixer_could_be_auto_loads_with_its_mixer(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    as_older_format(tmp_path / "m", "forecaster.json", 14, chosen=["mixer"])
    with pytest.warns(UserWarning, match="loaded unverified"):
        older = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert (older.mixer_, older.mixer_losses_, older.plan_.mixers) == ("lmm", None, ("lmm",))
    pd.testing.assert_frame_equal(older.predict(), f.predict())


def test_a_saved_mixer_that_is_not_registered_is_named(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")

    def renamed(meta):
        meta["params"]["mixer"] = "auto"
        meta["chosen"]["mixer"] = "hyena"

    load_refused(TitansForecaster, tmp_path / "m", "forecaster.json", renamed, "mixer 'hyena'")


def test_a_folder_of_an_earlier_format_with_an_auto_mixer_is_refused(tmp_path):
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")

    def older_with_auto(meta):
        meta["format_version"] = 14
        meta["params"]["mixer"] = "auto"
        del meta["chosen"]["mixer"]

    edited_config(tmp_path / "m", "forecaster.json", older_with_auto)
    with pytest.raises(CheckpointError, match="mixer 'auto'"):
        with pytest.warns(UserWarning, match="loaded unverified"):
            TitansForecaster.load(tmp_path / "m", allow_unverified=True)


def test_the_weights_average_is_kept_saved_and_read_back(tmp_path):
    # the network alone (no seasonal naive forecast weighed in): its weights tell
    f = TitansForecaster(horizon=12, max_epochs=2, ema_decay=0.5, baseline=None, **SMALL_MODEL)
    f.fit(monthly())
    plain = TitansForecaster(horizon=12, max_epochs=2, ema_decay=None, baseline=None, **SMALL_MODEL)
    plain.fit(monthly())
    assert (f.ema_decay_, f.plan_.ema_decay, plain.ema_decay_) == (0.5, 0.5, None)
    assert not np.allclose(f.predict()["y"], plain.predict()["y"])  # other weights kept
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert (loaded.ema_decay, loaded.ema_decay_, loaded.plan_.ema_decay) == (0.5, 0.5, 0.5)
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())
    # a folder of the format before it: the trained weights, whatever the default says now
    as_older_format(
        tmp_path / "m", "forecaster.json", 15, params=["ema_decay"], chosen=["ema_decay"]
    )
    with pytest.warns(UserWarning, match="loaded unverified"):
        older = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    assert (older.ema_decay, older.ema_decay_, older.plan_.ema_decay) == (None, None, None)
    pd.testing.assert_frame_equal(older.predict(), f.predict())


def test_a_bad_weights_average_is_refused_by_name(tmp_path):
    for bad in (1.0, 0.0, "fast", -0.5):
        with pytest.raises(ConfigError, match="ema_decay"):
            TitansForecaster(horizon=12, ema_decay=bad).fit(monthly())
    f = TitansForecaster(horizon=12, max_epochs=1, **SMALL_MODEL).fit(monthly())
    f.save(tmp_path / "m")
    load_refused(
        TitansForecaster, tmp_path / "m", "forecaster.json",
        lambda m: m["chosen"].update(ema_decay=2), "ema_decay 2 is neither null",
    )  # fmt: skip


def test_the_logarithm_is_learnt_saved_and_inverted(tmp_path):
    y = monthly()
    assert (y["y"] > 0).all()
    options = dict(horizon=12, max_epochs=2, baseline=None, **SMALL_MODEL)
    f = TitansForecaster(target_transform="log", quantiles=[0.1, 0.5, 0.9], **options).fit(y)
    assert f.target_transform_ == f.plan_.target_transform == "log"
    assert isinstance(f.series_[f.ids_[0]].scaler.target, LogStandardScaler)
    point, levels = f.predict(), f.predict_quantiles()
    assert (point["y"] > 0).all() and np.isfinite(point["y"]).all()
    values = np.stack([levels[q]["y"].to_numpy() for q in (0.1, 0.5, 0.9)], axis=1)
    assert (values > 0).all()
    np.testing.assert_allclose(values[:, 1], point["y"].to_numpy())  # the median's exponential
    other = TitansForecaster(target_transform=None, quantiles=[0.1, 0.5, 0.9], **options).fit(y)
    assert not np.allclose(other.predict()["y"], point["y"])
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert loaded.target_transform_ == "log"
    pd.testing.assert_frame_equal(loaded.predict(), point)


def test_values_a_log_scale_cannot_take_are_named(tmp_path):
    y = monthly()
    f = TitansForecaster(horizon=12, max_epochs=1, target_transform="log", **SMALL_MODEL)
    zero = y.copy()
    zero.iloc[40, 0] = 0.0
    with pytest.raises(DataError, match=r"fit: series \['series'\].*target_transform='log'"):
        f.fit(zero)
    f.fit(y)
    late = y.copy()
    late.iloc[-1, 0] = -3.0
    with pytest.raises(DataError, match=r"predict: series \['series'\]"):
        f.predict(late)
    with pytest.raises(ConfigError, match="target_transform must be"):
        TitansForecaster(horizon=12, target_transform="sqrt").fit(y)
    f.save(tmp_path / "m")

    def unknown(meta):
        meta["params"]["target_transform"] = "auto"
        meta["chosen"]["target_transform"] = "exp"

    load_refused(
        TitansForecaster, tmp_path / "m", "forecaster.json", unknown,
        "target_transform 'exp' is neither",
    )  # fmt: skip
