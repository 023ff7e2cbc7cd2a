"""TitansForecaster: scikit-learn rules, DataFrame/array I/O, save/load, bad input."""

import json

import numpy as np
import pandas as pd
import pytest
from damage_helpers import flip_byte
from sklearn.base import clone
from sklearn.model_selection import TimeSeriesSplit, cross_validate

from titans_seq.data import DataError
from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.training import CheckpointError

SMALL = dict(
    lookback=24,
    horizon=8,
    dim=16,
    depth=1,
    heads=2,
    patch_len=8,
    stride=4,
    ensemble_size=1,
    max_epochs=2,
    batch_size=32,
    mixer_options={"chunk_size": 4},
    random_state=0,
)


def seasonal_frame(n=360, channels=("load", "temp", "OT"), seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    data = {
        c: np.sin(2 * np.pi * t / 24 + i) * (i + 1) + 0.1 * rng.standard_normal(n)
        for i, c in enumerate(channels)
    }
    return pd.DataFrame(data, index=pd.date_range("2024-01-01", periods=n, freq="h", name="date"))


@pytest.fixture(scope="module")
def fitted():
    return TitansForecaster(**SMALL).fit(seasonal_frame())


def test_init_only_stores_parameters_and_clone_works():
    f = TitansForecaster(**SMALL)
    assert f.get_params()["lookback"] == 24 and not hasattr(f, "model_")
    g = clone(f).set_params(horizon=4)
    assert g.horizon == 4 and f.horizon == 8


def test_fit_returns_self_and_sets_fitted_attributes(fitted):
    assert fitted.n_features_in_ == 3
    assert list(fitted.feature_names_in_) == ["load", "temp", "OT"]
    assert fitted.freq_ == "h" and fitted.n_epochs_ >= 1 and fitted.history_


def test_predict_continues_the_timestamps(fitted):
    future = fitted.predict()
    assert isinstance(future, pd.DataFrame) and future.shape == (8, 3)
    assert future.index[0] == pd.Timestamp("2024-01-01") + pd.Timedelta(hours=360)
    assert (future.index.to_series().diff().dropna() == pd.Timedelta(hours=1)).all()
    assert np.isfinite(future.to_numpy()).all()


def test_predict_after_a_given_context(fitted):
    frame = seasonal_frame(500, seed=1)
    out = fitted.predict(frame.iloc[:100])
    assert out.index[0] == frame.index[100]
    array_out = fitted.predict(frame.iloc[:100].to_numpy())
    assert isinstance(array_out, np.ndarray) and array_out.shape == (8, 3)
    np.testing.assert_allclose(array_out, out.to_numpy(), rtol=1e-5, atol=1e-5)


def test_learns_better_than_predicting_the_mean(fitted):
    test = seasonal_frame(200, seed=2)
    # -MSE in z-scored units: predicting the mean scores about -1
    assert fitted.score(test) > -0.5


def test_numpy_in_numpy_out():
    values = seasonal_frame().to_numpy()
    f = TitansForecaster(**{**SMALL, "max_epochs": 1}).fit(values)
    out = f.predict()
    assert isinstance(out, np.ndarray) and out.shape == (8, 3)


def test_cross_validate_with_time_series_split():
    frame = seasonal_frame(480)
    scores = cross_validate(
        TitansForecaster(**{**SMALL, "max_epochs": 1}), frame, cv=TimeSeriesSplit(3)
    )
    assert np.isfinite(scores["test_score"]).all() and len(scores["test_score"]) == 3


def test_save_load_round_trip(fitted, tmp_path):
    fitted.save(tmp_path / "model")
    loaded = TitansForecaster.load(tmp_path / "model")
    pd.testing.assert_frame_equal(loaded.predict(), fitted.predict())
    assert loaded.get_params() == fitted.get_params()
    config = tmp_path / "model" / "forecaster.json"
    meta = json.loads(config.read_text())  # a scaler edited by hand is refused
    meta["series"][0]["scaler"]["target"]["mean"][0] += 1.0
    config.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="forecaster.json does not match the checksum"):
        TitansForecaster.load(tmp_path / "model")
    fitted.save(tmp_path / "model")
    flip_byte(tmp_path / "model" / "model.safetensors")  # one byte of the weights
    with pytest.raises(CheckpointError, match="model.safetensors does not match the checksum"):
        TitansForecaster.load(tmp_path / "model")
    (tmp_path / "model" / "model_manifest.json").unlink()  # as saved by an older version
    config.write_text("{not json")
    with pytest.raises(CheckpointError, match="has no model_manifest.json"):
        TitansForecaster.load(tmp_path / "model")  # refused unless the user trusts it
    with pytest.warns(UserWarning, match="loaded unverified"):
        with pytest.raises(DataError, match="corrupt"):
            TitansForecaster.load(tmp_path / "model", allow_unverified=True)
    with pytest.raises(FileNotFoundError, match="not a saved"):
        TitansForecaster.load(tmp_path / "nothing")


def test_quantile_head_brackets_the_median():
    params = {**SMALL, "quantiles": (0.1, 0.5, 0.9), "max_epochs": 8, "learning_rate": 3e-3}
    f = TitansForecaster(**params).fit(seasonal_frame(600))
    q = f.predict_quantiles()
    assert set(q) == {0.1, 0.5, 0.9}
    pd.testing.assert_frame_equal(q[0.5], f.predict())
    spread = q[0.9].to_numpy() - q[0.1].to_numpy()
    assert spread.mean() > 0 and (spread >= 0).mean() > 0.9


def test_bad_input_gives_clear_errors(fitted):
    frame = seasonal_frame()
    with_nan = frame.copy()
    with_nan.iloc[10, 1] = np.nan
    with pytest.raises(DataError, match="missing or infinite value.*temp"):
        TitansForecaster(**SMALL).fit(with_nan)
    filled = TitansForecaster(**{**SMALL, "max_epochs": 1, "missing": "interpolate"}).fit(with_nan)
    assert np.isfinite(filled.predict().to_numpy()).all()
    with pytest.raises(DataError, match="32 rows are needed"):
        TitansForecaster(**SMALL).fit(frame.iloc[:20])
    with pytest.raises(DataError, match="not increasing"):
        TitansForecaster(**SMALL).fit(frame.iloc[::-1])
    with pytest.raises(DataError, match="[Dd]uplicate"):
        TitansForecaster(**SMALL).fit(pd.concat([frame.iloc[:50], frame.iloc[49:]]))
    gappy = frame.drop(frame.index[[5, 6, 50]])
    with pytest.raises(DataError, match="3 time step.* missing from the series' h grid.*05:00"):
        TitansForecaster(**SMALL).fit(gappy)
    jittered = frame.index + pd.to_timedelta(np.arange(len(frame)) % 7, unit="min")
    with pytest.raises(DataError, match="regular frequency"):
        TitansForecaster(**SMALL).fit(frame.set_axis(jittered))
    with pytest.raises(DataError, match=r"missing \['OT'\]"):
        fitted.predict(frame.drop(columns="OT"))
    with pytest.raises(DataError, match="lookback = 24"):
        fitted.predict(frame.iloc[:10])
    with pytest.raises(ValueError, match="lookback must be a positive integer"):
        TitansForecaster(**{**SMALL, "lookback": 0}).fit(frame)


def test_missing_time_steps_are_inserted_and_filled_when_asked():
    frame = seasonal_frame()
    gappy = frame.drop(frame.index[[5, 6, 50, 300]])
    with pytest.warns(UserWarning, match="4 time step.* missing from the h grid"):
        f = TitansForecaster(**{**SMALL, "max_epochs": 1, "missing": "interpolate"}).fit(gappy)
    assert f.freq_ == "h"
    future = f.predict()
    assert future.index[0] == frame.index[-1] + pd.Timedelta(hours=1)
    assert np.isfinite(future.to_numpy()).all()
    with pytest.warns(UserWarning, match="inserted"):
        after_gap = f.predict(gappy.iloc[:60])  # rows 0-62 with three steps absent
    assert after_gap.index[0] == frame.index[63]


def test_constant_channel_is_not_a_division_by_zero():
    frame = seasonal_frame()
    frame["flat"] = 3.0
    f = TitansForecaster(**{**SMALL, "max_epochs": 1}).fit(frame)
    out = f.predict()
    assert np.isfinite(out.to_numpy()).all()


def test_a_series_far_from_zero_keeps_its_resolution():
    """Forecasts are un-scaled in float64: a series of 1e8 +- 10 is not rounded to float32's
    steps of 8 there."""
    y = 1e8 + 10 * np.sin(np.arange(300) / 4)
    f = TitansForecaster(**{**SMALL, "horizon": 6, "max_epochs": 1}).fit(y)
    forecast = f.predict()
    assert forecast.dtype == np.float64
    offsets = forecast[:, 0] - 1e8
    assert np.abs(offsets).max() < 50 and not np.allclose(offsets / 8, np.round(offsets / 8))
