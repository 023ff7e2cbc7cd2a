"""TitansDartsModel: darts forecasting, backtesting with and without retraining, bad input."""

import numpy as np
import pandas as pd
import pytest
from forecaster_helpers import TINY_FORECASTER, hourly_frame

pytest.importorskip("darts")

from darts import TimeSeries  # noqa: E402
from darts.metrics import mse  # noqa: E402

from titans_seq.domains.forecasting import TitansForecaster  # noqa: E402
from titans_seq.domains.forecasting.darts_model import TitansDartsModel  # noqa: E402
from titans_seq.domains.forecasting.rollout import roll_forward  # noqa: E402

TINY = TINY_FORECASTER


def series(n=150, channels=2, offset=0.0) -> TimeSeries:
    return TimeSeries.from_dataframe(hourly_frame(n, channels, offset))


@pytest.fixture(scope="module")
def fitted():
    return TitansDartsModel(TitansForecaster(**TINY)).fit(series()[:100])


def test_predict_continues_the_training_series_past_the_horizon(fitted):
    forecast = fitted.predict(10)
    train = series()[:100]
    assert forecast.start_time() == train.end_time() + pd.Timedelta("1h")
    assert forecast.values().shape == (10, 2)
    assert list(forecast.components) == ["c0", "c1"]
    net = fitted.forecaster_
    first = net.predict(train.values()[-12:])
    np.testing.assert_allclose(forecast.values()[:4], first, rtol=1e-6)


def test_backtest_without_retraining_uses_each_point_history(fitted):
    full = series()
    forecasts = fitted.historical_forecasts(
        full, start=100, forecast_horizon=4, retrain=False, last_points_only=False
    )
    assert len(forecasts) == 47
    values = full.values()
    for k in (0, 20, 46):
        expected = fitted.forecaster_.predict(values[100 + k - 12 : 100 + k])
        np.testing.assert_allclose(forecasts[k].values(), expected, rtol=1e-6)
    assert np.isfinite(fitted.backtest(full, start=100, forecast_horizon=4, metric=mse))


def test_backtest_with_retraining_fits_fresh_models():
    model = TitansDartsModel(TitansForecaster(**TINY))
    error = model.backtest(
        series(), start=120, forecast_horizon=4, stride=15, retrain=True, metric=mse
    )
    assert np.isfinite(error)
    assert not hasattr(model.untrained_model(), "forecaster_")


def test_predicts_other_series_one_by_one(fitted):
    others = [series(60, offset=1.0), series(80, offset=-1.0)]
    forecasts = fitted.predict(3, series=others)
    starts = [s.end_time() + pd.Timedelta("1h") for s in others]
    assert [f.start_time() for f in forecasts] == starts


def test_bad_input_is_refused_with_a_reason(fitted):
    model = TitansDartsModel(TitansForecaster(**TINY))
    with pytest.raises(ValueError, match="one series"):
        model.fit([series(), series()])
    with pytest.raises(ValueError, match="covariates"):
        model.fit(series(), past_covariates=series())
    with pytest.raises(ValueError, match="rows, 16 are needed"):
        model.fit(series(15))
    with pytest.raises(ValueError, match="rows, 12 are needed"):
        fitted.predict(2, series=series(8))
    with pytest.raises(ValueError, match="components"):
        fitted.predict(2, series=series(40, channels=3))


def test_save_and_load_without_pickle(fitted, tmp_path):
    fitted.save(tmp_path / "model")
    assert not list((tmp_path / "model").rglob("*.pkl"))
    loaded = TitansDartsModel.load(tmp_path / "model")  # no trusted=True needed
    np.testing.assert_array_equal(loaded.predict(6).values(), fitted.predict(6).values())
    assert loaded.training_series == fitted.training_series
    # an edited training series is refused, like every saved model's files
    path = tmp_path / "model" / "training_series.json"
    path.write_text(path.read_text().replace("0.", "1.", 1))
    from titans_seq.training.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="training_series.json does not match"):
        TitansDartsModel.load(tmp_path / "model")
    # clean=True leaves the training series out: predict then needs a series
    fitted.save(tmp_path / "clean", clean=True)
    clean = TitansDartsModel.load(tmp_path / "clean")
    np.testing.assert_array_equal(
        clean.predict(6, series=series()[:100]).values(), fitted.predict(6).values()
    )
    with pytest.raises(ValueError, match="holds no training series"):
        clean.predict(6)
    with pytest.raises(TypeError, match="writes a folder"):
        fitted.save(open(tmp_path / "handle", "wb"))


@pytest.fixture(scope="module")
def probabilistic():
    forecaster = TitansForecaster(**TINY, quantiles=(0.1, 0.5, 0.9))
    return TitansDartsModel(forecaster).fit(series()[:100])


def test_samples_come_from_the_quantile_head(probabilistic):
    assert probabilistic.supports_probabilistic_prediction
    forecast = probabilistic.predict(6, num_samples=400, random_state=0)
    assert forecast.is_stochastic and forecast.all_values().shape == (6, 2, 400)
    _, levels = roll_forward(probabilistic.forecaster_, series()[:100].values(), 6)
    values = forecast.all_values()
    # between the outermost fitted levels, and their 10 / 50 / 90 % points near the head's
    assert np.all(values >= levels[0.1][:, :, None] - 1e-9)
    assert np.all(values <= levels[0.9][:, :, None] + 1e-9)
    spread = levels[0.9] - levels[0.1]
    for q in (0.1, 0.5, 0.9):
        empirical = np.quantile(values, q, axis=-1)
        assert np.all(np.abs(empirical - levels[q]) <= 0.15 * spread + 1e-6)
    again = probabilistic.predict(6, num_samples=400, random_state=0)
    np.testing.assert_array_equal(again.all_values(), values)  # random_state fixes the draws


def test_likelihood_parameters_are_the_quantiles(probabilistic):
    forecast = probabilistic.predict(4, predict_likelihood_parameters=True)
    expected = [f"c{c}_q{q:.2f}" for c in range(2) for q in (0.1, 0.5, 0.9)]
    assert list(forecast.components) == expected
    # the sorted (non-crossing) levels that sampling uses too
    _, levels = roll_forward(probabilistic.forecaster_, series()[:100].values(), 4)
    np.testing.assert_allclose(forecast["c1_q0.90"].values()[:, 0], levels[0.9][:, 1], rtol=1e-5)
    with pytest.raises(ValueError, match="output_chunk_length"):
        probabilistic.predict(8, predict_likelihood_parameters=True)


def test_a_point_forecaster_refuses_samples(fitted):
    assert not fitted.supports_probabilistic_prediction
    with pytest.raises(ValueError, match="probabilistic"):
        fitted.predict(4, num_samples=10)
