"""The fit's plan: every "auto" setting decided in one place from the data, tested for
what it chooses, kept as `plan_`, saved, printed, and the windows it counts are those the
fit trains on."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.forecasting import estimator as estimator_module
from titans_seq.domains.forecasting.commands import fit_summary
from titans_seq.domains.forecasting.fit_plan import FitPlan, plan_fit, plan_lookback
from titans_seq.domains.forecasting.series_input import Series


def _series(lengths, freq="h", seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(lengths):
        index = pd.date_range("2024-01-01", periods=n, freq=freq)
        day = np.sin(np.arange(n) * 2 * np.pi / 24)[:, None]
        out.append(Series.of(f"s{i}", index, day + rng.normal(size=(n, 1)) * 0.3))
    return out


def _plan(series, freq="h", **params):
    estimator = TitansForecaster(**{"horizon": 24, **params})
    lookback = plan_lookback(estimator, series, freq)
    return plan_fit(estimator, series, lookback, freq)


def test_a_short_series_gets_narrow_networks_an_ensemble_absolute_error_and_a_refit():
    plan, rows = _plan(_series([400]))
    assert plan.train_windows < 500
    assert (plan.dim, plan.heads, plan.ensemble_size, plan.loss) == (16, 2, 5, "mae")
    assert plan.refit and len(plan.centers) >= 2 and rows == [360]


def test_a_panel_of_many_long_hourly_series_sees_its_week_on_absolute_error():
    plan, rows = _plan(_series([900] * 120), horizon=48)
    assert plan.lookback == 168 and plan.loss == "mae"
    assert (plan.dim, plan.ensemble_size, plan.refit, plan.centers) == (64, 1, False, ("mean",))
    assert plan.max_epochs * plan.epoch_windows >= 500 * 120  # 500 windows of each series
    assert rows == [810] * 120
    # 60,000 windows seen: the batch stays 32
    assert (plan.batch_size, plan.learning_rate) == (32, 1e-3)


def test_the_batch_grows_only_on_long_schedules():
    small, _ = _plan(_series([400]))
    assert (small.batch_size, small.learning_rate) == (32, 1e-3)
    # hundreds of series, 500 windows of each: larger batches at a proportionally larger rate
    big = _series([900] * 400)
    plan, _ = _plan(big, horizon=48)
    assert plan.max_epochs * plan.epoch_windows > 150_000
    assert (plan.batch_size, plan.learning_rate) == (128, 3e-3)
    # fewer epochs given: a short schedule keeps 32
    assert _plan(big, horizon=48, max_epochs=2)[0].batch_size == 32
    # a given batch size scales the automatic rate (1x to 3x); given values are kept
    assert _plan(big, horizon=48, batch_size=64)[0].learning_rate == pytest.approx(2e-3)
    assert _plan(big, horizon=48, batch_size=16)[0].learning_rate == pytest.approx(1e-3)
    assert _plan(big, horizon=48, batch_size=512)[0].learning_rate == pytest.approx(3e-3)
    given = _plan(big, horizon=48, learning_rate=5e-4)[0]
    assert (given.batch_size, given.learning_rate) == (128, 5e-4)


def test_the_weights_are_averaged_only_on_long_schedules():
    assert _plan(_series([400]))[0].ema_decay is None
    assert _plan(_series([900] * 120), horizon=48)[0].ema_decay is None  # 60,000 windows
    big = _series([900] * 400)
    assert _plan(big, horizon=48)[0].ema_decay == 0.99
    assert _plan(big, horizon=48, max_epochs=2)[0].ema_decay is None
    # given values are kept, None included
    assert _plan(big, horizon=48, ema_decay=None)[0].ema_decay is None
    assert _plan(_series([400]), ema_decay=0.9)[0].ema_decay == 0.9
    assert "weights averaged at 0.99" in _plan(big, horizon=48)[0].describe()


def test_a_panel_of_many_positive_series_learns_the_logarithm():
    def lifted(series):  # the same series, every value positive
        return [dataclasses.replace(s, target=s.target + 5.0) for s in series]

    assert _plan(lifted(_series([900] * 120)), horizon=48)[0].target_transform == "log"
    assert "logarithm" in _plan(lifted(_series([900] * 120)), horizon=48)[0].describe()
    # values that are not all positive, a few series, or squared error: the values
    assert _plan(_series([900] * 120), horizon=48)[0].target_transform is None
    assert _plan(lifted(_series([900] * 20)), horizon=48)[0].target_transform is None
    assert _plan(lifted(_series([900] * 120)), horizon=48, loss="mse")[0].target_transform is None
    # given values are kept
    assert _plan(lifted(_series([400])), target_transform="log")[0].target_transform == "log"
    assert _plan(lifted(_series([900] * 120)), target_transform=None)[0].target_transform is None


def test_the_memory_and_attention_are_compared_on_a_large_hold_out_and_a_short_schedule():
    # one series of 400 hours: 17 validation windows, too few to judge two architectures
    assert _plan(_series([400]))[0].mixers == ("lmm",)
    assert _plan(_series([900] * 120), horizon=48)[0].mixers == ("lmm", "attention")
    # hundreds of series, 500 windows of each: the memory alone
    big = _series([900] * 400)
    assert _plan(big, horizon=48)[0].mixers == ("lmm",)
    assert _plan(big, horizon=48, max_epochs=2)[0].mixers == ("lmm", "attention")
    # no hold-out, a mixer given, or the memory's options given: nothing to compare
    panel = _series([900] * 20)
    assert _plan(panel)[0].mixers == ("lmm", "attention")
    assert _plan(panel, validation_fraction=0.0)[0].mixers == ("lmm",)
    assert _plan(panel, mixer="mag")[0].mixers == ("mag",)
    assert _plan(panel, mixer_options={"chunk_size": 4})[0].mixers == ("lmm",)


def test_given_settings_are_kept():
    plan, _ = _plan(_series([400]), lookback=48, dim=32, heads=4, ensemble_size=2, loss="mse",
                    refit=False, center="last", max_epochs=3, patience=1, batch_size=8,
                    learning_rate=0.01)  # fmt: skip
    assert (plan.batch_size, plan.learning_rate) == (8, 0.01)
    assert (plan.lookback, plan.dim, plan.heads, plan.ensemble_size) == (48, 32, 4, 2)
    assert (plan.loss, plan.refit, plan.centers, plan.max_epochs, plan.patience) == (
        "mse",
        False,
        ("last",),
        3,
        1,
    )


def test_the_plan_counts_the_windows_the_fit_trains_on(monkeypatch, tmp_path):
    seen = []
    original = estimator_module.TitansForecaster._windows

    def windows(self, series, train_rows):
        scalers, train_set, val_set = original(self, series, train_rows)
        seen.append(len(train_set))
        return scalers, train_set, val_set

    monkeypatch.setattr(estimator_module.TitansForecaster, "_windows", windows)
    frame = pd.concat(
        pd.DataFrame({"unique_id": s.uid, "ds": s.index, "y": s.target[:, 0]})
        for s in _series([300, 200, 260])
    )
    f = TitansForecaster(horizon=12, max_epochs=1, ensemble_size=1, center="mean",
                         random_state=0).fit(frame)  # fmt: skip
    assert isinstance(f.plan_, FitPlan) and seen[0] == f.plan_.train_windows
    assert (f.lookback_, f.loss_, f.dim_) == (f.plan_.lookback, f.plan_.loss, f.plan_.dim)
    assert f.plan_.describe() in fit_summary(f)
    f.save(tmp_path / "m")
    assert TitansForecaster.load(tmp_path / "m").plan_ == f.plan_


@pytest.mark.parametrize(
    "values, message",
    [({"train_windows": -3}, "train_windows -3"), ({"centers": ["median"]}, "centers")],
)
def test_a_damaged_saved_plan_is_named(tmp_path, values, message):
    from format_helpers import edited_config

    from titans_seq.training import CheckpointError

    frame = pd.DataFrame({"unique_id": "a", "ds": pd.date_range("2024", periods=200, freq="h"),
                          "y": np.sin(np.arange(200.0))})  # fmt: skip
    f = TitansForecaster(horizon=12, max_epochs=1, ensemble_size=1, random_state=0).fit(frame)
    f.save(tmp_path / "m")
    edited_config(tmp_path / "m", "forecaster.json", lambda m: m["plan"].update(values))
    with pytest.warns(UserWarning, match="loaded unverified"):
        with pytest.raises(CheckpointError, match=message):
            TitansForecaster.load(tmp_path / "m", allow_unverified=True)


def test_a_damaged_saved_learning_rate_is_named(tmp_path):
    from format_helpers import edited_config

    from titans_seq.training import CheckpointError

    frame = pd.DataFrame({"unique_id": "a", "ds": pd.date_range("2024", periods=200, freq="h"),
                          "y": np.sin(np.arange(200.0))})  # fmt: skip
    f = TitansForecaster(horizon=12, max_epochs=1, ensemble_size=1, random_state=0).fit(frame)
    assert (f.batch_size_, f.learning_rate_) == (32, 1e-3)
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    assert (loaded.batch_size_, loaded.learning_rate_) == (32, 1e-3)
    edited_config(
        tmp_path / "m", "forecaster.json", lambda m: m["chosen"].update(learning_rate="fast")
    )
    with pytest.warns(UserWarning, match="loaded unverified"):
        with pytest.raises(CheckpointError, match="learning_rate 'fast'"):
            TitansForecaster.load(tmp_path / "m", allow_unverified=True)
