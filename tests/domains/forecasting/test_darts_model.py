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
    np.testing.assert_allclose(forecast.values()[:4], first, rtol=1e-5)


def test_backtest_without_retraining_uses_each_point_history(fitted):
    full = series()
    forecasts = fitted.historical_forecasts(
        full, start=100, forecast_horizon=4, retrain=False, last_points_only=False
    )
    assert len(forecasts) == 47
    values = full.values()
    for k in (0, 20, 46):
        expected = fitted.forecaster_.predict(values[100 + k - 12 : 100 + k])
        np.testing.assert_allclose(forecasts[k].values(), expected, rtol=1e-5)
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
    with pytest.raises(ValueError, match="several series needs univariate ones"):
        model.fit([series(), series()])
    with pytest.raises(ValueError, match="past_covariates: 1 series given for 2"):
        model.fit([series(channels=1), series(channels=1)], past_covariates=series())
    with pytest.raises(ValueError, match="past_covariates has no values at 50 of the 150"):
        model.fit(series(), past_covariates=series(100))
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
    assert np.all(values >= levels[0.1][:, :, None] - 1e-5)
    assert np.all(values <= levels[0.9][:, :, None] + 1e-5)
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


def covariate_panel():
    """Three univariate series of different lengths, y = 2 * plan + a daily cycle, with the
    plan as a future covariate, a load as a past covariate and a numeric static covariate."""
    rng = np.random.default_rng(0)
    targets, pasts, futures = [], [], []
    for i, n in enumerate((160, 120, 30)):
        index = pd.date_range("2024-01-01", periods=n + 20, freq="h")
        plan = rng.standard_normal(n + 20)
        load = np.sin(np.arange(n + 20) / 3 + i)
        y = 2.0 * plan + np.sin(2 * np.pi * np.arange(n + 20) / 24) + i
        target = TimeSeries.from_series(pd.Series(y[:n], index[:n], name="y"))
        targets.append(target.with_static_covariates(pd.DataFrame({"size": [float(i)]})))
        pasts.append(TimeSeries.from_series(pd.Series(load, index, name="load")))
        futures.append(TimeSeries.from_series(pd.Series(plan, index, name="plan")))
    return targets, pasts, futures


def test_several_series_with_past_future_and_static_covariates():
    targets, pasts, futures = covariate_panel()
    model = TitansDartsModel(TitansForecaster(**{**TINY, "max_epochs": 4}))
    model.fit(targets, past_covariates=pasts, future_covariates=futures)
    net = model.forecaster_
    assert net.layout_ == "long" and net.ids_ == ["0", "1", "2"]
    assert net.hist_exog_list == ["past:load"] and net.futr_exog_list == ["future:plan"]
    assert net.stat_exog_list == ["size"]
    assert model.uses_past_covariates and model.uses_future_covariates
    assert model.extreme_lags == (-12, 3, -12, -1, -12, 3, 0)
    with pytest.raises(ValueError, match="pass the series to forecast"):
        model.predict(4)
    forecasts = model.predict(10, series=targets, past_covariates=pasts, future_covariates=futures)
    for forecast, target in zip(forecasts, targets, strict=True):
        assert forecast.start_time() == target.end_time() + pd.Timedelta("1h")
        assert len(forecast) == 10 and np.isfinite(forecast.values()).all()
    # the future covariate moves the forecast; past covariates must reach past the first block
    shifted = [
        f.with_values(f.values() + 3.0 * (np.arange(len(f)) >= len(t))[:, None])
        for f, t in zip(futures, targets, strict=True)
    ]  # the plan changed over the horizon only
    moved = model.predict(4, series=targets, past_covariates=pasts, future_covariates=shifted)
    assert not np.allclose(moved[0].values(), forecasts[0].values()[:4])
    short = [p[: len(t)] for p, t in zip(pasts, targets, strict=True)]
    model.predict(4, series=targets, past_covariates=short, future_covariates=futures)
    with pytest.raises(ValueError, match="past_covariates \\(over the first 4 forecast steps"):
        model.predict(6, series=targets, past_covariates=short, future_covariates=futures)
    with pytest.raises(ValueError, match="future_covariates \\(over the 30 forecast steps\\)"):
        model.predict(30, series=targets, past_covariates=pasts, future_covariates=futures)


def test_a_future_covariate_helps_one_series_and_survives_save_and_load(tmp_path):
    targets, pasts, futures = covariate_panel()
    train, plan = targets[0], futures[0]
    with_plan = TitansDartsModel(TitansForecaster(**{**TINY, "max_epochs": 6}))
    with_plan.fit(train[:130], future_covariates=plan)
    without = TitansDartsModel(TitansForecaster(**{**TINY, "max_epochs": 6})).fit(train[:130])
    err_with = with_plan.backtest(
        train, future_covariates=plan, start=130, forecast_horizon=4, retrain=False, metric=mse
    )
    err_without = without.backtest(train, start=130, forecast_horizon=4, retrain=False, metric=mse)
    assert err_with < err_without
    with_plan.save(tmp_path / "m")
    loaded = TitansDartsModel.load(tmp_path / "m")
    np.testing.assert_array_equal(loaded.predict(8).values(), with_plan.predict(8).values())


def darts_named(params: dict) -> dict:
    """TINY's parameters with darts' names for lookback, horizon and max_epochs."""
    rest = {k: v for k, v in params.items() if k not in ("lookback", "horizon", "max_epochs")}
    return dict(
        input_chunk_length=params["lookback"],
        output_chunk_length=params["horizon"],
        n_epochs=params["max_epochs"],
        **rest,
    )


def test_darts_parameter_names_build_the_same_model(fitted):
    model = TitansDartsModel(**darts_named(TINY)).fit(series()[:100])
    assert model.forecaster_.get_params() == fitted.forecaster_.get_params()
    assert (model.input_chunk_length, model.output_chunk_length) == (
        TINY["lookback"],
        TINY["horizon"],
    )
    np.testing.assert_allclose(model.predict(6).values(), fitted.predict(6).values(), rtol=1e-6)
    fresh = model.untrained_model()
    assert not hasattr(fresh, "forecaster_")
    assert fresh._template.get_params() == model._template.get_params()


def test_forecaster_and_parameters_are_not_mixed():
    with pytest.raises(TypeError, match="either a forecaster or its parameters"):
        TitansDartsModel(TitansForecaster(**TINY), input_chunk_length=24)
    with pytest.raises(TypeError, match=r"\['lookback'\] given twice"):
        TitansDartsModel(input_chunk_length=24, lookback=24)
    with pytest.raises(TypeError, match=r"\['n_layers'\] are not TitansForecaster parameters"):
        TitansDartsModel(input_chunk_length=24, n_layers=2)
    with pytest.raises(TypeError, match="wraps a TitansForecaster, got dict"):
        TitansDartsModel(TINY)
