"""TitansSktimeForecaster: sktime's conformance suite, tuning, backtesting, long horizons."""

import numpy as np
import pandas as pd
import pytest
from forecaster_helpers import TINY_FORECASTER, hourly_frame

pytest.importorskip("sktime")

from sktime.forecasting.base import ForecastingHorizon  # noqa: E402
from sktime.forecasting.model_evaluation import evaluate  # noqa: E402
from sktime.forecasting.model_selection import ForecastingGridSearchCV  # noqa: E402
from sktime.split import ExpandingWindowSplitter  # noqa: E402
from sktime.utils.estimator_checks import check_estimator  # noqa: E402

from titans_seq.domains.forecasting import TitansForecaster  # noqa: E402
from titans_seq.domains.forecasting.rollout import (  # noqa: E402
    interpolate_quantile,
    roll_forward,
    roll_series,
)
from titans_seq.domains.forecasting.series_input import Series  # noqa: E402
from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster  # noqa: E402

TINY = TINY_FORECASTER


def test_sktime_conformance_suite_passes():
    check_estimator(TitansSktimeForecaster, raise_exceptions=True)


def test_forecast_beyond_the_network_horizon_rolls_the_point_forecast_forward():
    y = hourly_frame()
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y, fh=np.arange(1, 11))
    forecast = f.predict()
    assert forecast.shape == (10, 2) and forecast.index[0] == y.index[-1] + pd.Timedelta("1h")
    net = f.forecaster_
    first = net.predict(y.to_numpy()[-12:])
    second = net.predict(np.concatenate([y.to_numpy(), first])[-12:])
    third = net.predict(np.concatenate([y.to_numpy(), first, second])[-12:])
    expected = np.concatenate([first, second, third])[:10]
    np.testing.assert_allclose(forecast.to_numpy(), expected, rtol=1e-6)
    # a horizon chosen at predict time, with gaps
    gaps = f.predict(fh=[2, 7])
    np.testing.assert_allclose(gaps.to_numpy(), expected[[1, 6]], rtol=1e-6)


def test_update_without_refit_moves_the_context_only():
    y = hourly_frame(140)
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y.iloc[:120], fh=[1, 2])
    weights = {k: v.clone() for k, v in f.forecaster_.model_.state_dict().items()}
    f.update(y.iloc[120:], update_params=False)
    assert f.cutoff[0] == y.index[-1]
    for k, v in f.forecaster_.model_.state_dict().items():
        assert np.array_equal(v.numpy(), weights[k].numpy())
    expected = f.forecaster_.predict(y.to_numpy()[-12:])[:2]
    np.testing.assert_allclose(f.predict().to_numpy(), expected, rtol=1e-6)


def test_quantiles_and_intervals_are_ordered():
    net = TitansForecaster(**TINY, quantiles=(0.1, 0.5, 0.9))
    f = TitansSktimeForecaster(net).fit(hourly_frame(), fh=[1, 2, 3, 4, 5, 6])
    q = f.predict_quantiles(alpha=[0.1, 0.3, 0.5, 0.9])
    for col in ("c0", "c1"):
        values = q[col].to_numpy()
        assert (np.diff(values, axis=1) >= 0).all()
    interval = f.predict_interval(coverage=0.8)
    assert (
        interval.xs("upper", level=2, axis=1).to_numpy()
        >= interval.xs("lower", level=2, axis=1).to_numpy()
    ).all()
    with pytest.raises(ValueError, match="outside the fitted levels"):
        f.predict_quantiles(alpha=[0.01])


def test_interpolate_quantile_is_linear_between_levels():
    levels = {0.1: np.zeros((2, 1)), 0.5: np.ones((2, 1))}
    np.testing.assert_allclose(interpolate_quantile(levels, 0.3), 0.5)
    np.testing.assert_allclose(interpolate_quantile(levels, 1 - 0.9), 0.0)


def test_grid_search_and_expanding_window_backtest():
    y = hourly_frame(150)
    f = TitansSktimeForecaster(TitansForecaster(**TINY))
    splitter = ExpandingWindowSplitter(fh=[1, 2, 3], initial_window=100, step_length=20)
    search = ForecastingGridSearchCV(
        f, cv=splitter, param_grid={"forecaster__dim": [8, 16]}, update_behaviour="no_update"
    )
    search.fit(y)
    assert search.best_params_["forecaster__dim"] in (8, 16)
    assert len(search.predict(fh=[1, 2])) == 2
    results = evaluate(f, cv=splitter, y=y, return_data=False)
    assert len(results) == 3 and np.isfinite(results.iloc[:, 0]).all()


def test_roll_forward_refuses_zero_steps():
    net = TitansForecaster(**TINY).fit(hourly_frame())
    with pytest.raises(ValueError, match="steps"):
        roll_forward(net, hourly_frame().to_numpy(), 0)
    with pytest.raises(NotImplementedError, match="in-sample"):
        TitansSktimeForecaster(TitansForecaster(**TINY)).fit(hourly_frame()).predict(
            fh=ForecastingHorizon([0, 1])
        )


def test_roll_forward_point_with_quantiles_equals_predict():
    net = TitansForecaster(**TINY, quantiles=(0.1, 0.5, 0.9)).fit(hourly_frame())
    context = hourly_frame().to_numpy()
    point, levels = roll_forward(net, context, 4)
    np.testing.assert_allclose(point, net.predict(context[-12:]), rtol=1e-6)
    assert sorted(levels) == [0.1, 0.5, 0.9]


def test_constructing_and_cloning_raise_no_future_warning():
    import warnings

    from sklearn.base import clone

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        forecaster = TitansSktimeForecaster(TitansForecaster(**TINY))
        clone(forecaster)
        forecaster.clone()


def test_sktime_defaults_work_with_the_documented_quantiles():
    """predict_interval's default coverage (0.9) and PinballLoss in evaluate, for a network
    given quantiles (0.1, 0.5, 0.9): the adapter fits sktime's 0.05 / 0.95 beside them."""
    from sktime.performance_metrics.forecasting.probabilistic import PinballLoss

    y = hourly_frame(n=160)["c0"]
    net = TitansForecaster(**{**TINY, "quantiles": (0.1, 0.5, 0.9)})
    f = TitansSktimeForecaster(net).fit(y, fh=[1, 2, 3])
    assert f.forecaster_.quantiles == (0.05, 0.1, 0.5, 0.9, 0.95)
    assert net.quantiles == (0.1, 0.5, 0.9)  # the given forecaster is left as it was
    interval = f.predict_interval()
    lower, upper = interval.iloc[:, 0], interval.iloc[:, 1]
    assert (lower <= upper).all()
    cv = ExpandingWindowSplitter(fh=[1, 2, 3], initial_window=120, step_length=15)
    scores = evaluate(f, cv=cv, y=y, scoring=PinballLoss())
    assert np.isfinite(scores.iloc[:, 0]).all() and len(scores) == 3


def test_exogenous_x_is_a_future_covariate_unless_named_historical():
    rng = np.random.default_rng(0)
    index = pd.date_range("2024-01-01", periods=160, freq="h")
    X = pd.DataFrame({"plan": rng.standard_normal(160), "load": rng.standard_normal(160)}, index)
    y = pd.DataFrame({"y": 2.0 * X["plan"] + np.sin(np.arange(160) / 4)}, index)
    net = TitansForecaster(**TINY, hist_exog_list=["load"])
    f = TitansSktimeForecaster(net).fit(y.iloc[:150], X=X.iloc[:150], fh=[1, 2, 3, 4])
    assert f.forecaster_.futr_exog_list == ["plan"] and f.forecaster_.hist_exog_list == ["load"]
    forecast = f.predict(X=X.iloc[150:])
    # the same forecast from the estimator itself, given the plan over the horizon
    frame = pd.concat([y.iloc[138:150], X.iloc[138:150]], axis=1).reset_index(drop=True)
    frame.columns = ["__target_0", "plan", "load"]
    direct = f.forecaster_.predict(frame, futr_df=X.iloc[150:154][["plan"]].reset_index(drop=True))
    np.testing.assert_allclose(forecast.to_numpy()[:, 0], direct.to_numpy()[:, 0], rtol=1e-5)
    # a different plan changes the forecast
    changed = f.predict(X=X.iloc[150:].assign(plan=5.0))
    assert not np.allclose(changed.to_numpy(), forecast.to_numpy())
    with pytest.raises(ValueError, match="pass X over the forecast steps"):
        f.predict()
    # steps between those asked for are interpolated, with a warning
    with pytest.warns(UserWarning, match="not given at 5 of the forecast steps 1..7"):
        f.predict(fh=[2, 7], X=X.iloc[[151, 156]])


def panel(lengths=(60, 50, 40), end_together=True):
    """Panel data (instance, time) of sine series with different lengths."""
    frames = []
    for i, n in enumerate(lengths):
        stop = 100 if end_together else 100 - 3 * i
        index = pd.MultiIndex.from_product([[f"i{i}"], range(stop - n, stop)])
        values = np.sin(np.arange(n) / 4 + i) + i
        frames.append(pd.DataFrame({"y": values}, index=index))
    return pd.concat(frames)


def test_panel_data_trains_one_global_model():
    y = panel()
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y, fh=[1, 2, 3, 4, 5, 6])
    net = f.forecaster_
    assert net.layout_ == "long" and net.ids_ == ["i0", "i1", "i2"]
    forecast = f.predict()
    assert forecast.index.get_level_values(0).unique().tolist() == ["i0", "i1", "i2"]
    assert forecast.loc["i1"].index.tolist() == list(range(100, 106))
    # instance i1's first block is the global model's forecast from its last lookback rows
    history = y.loc["i1"]["y"].to_numpy()[-12:]
    long = pd.DataFrame({"unique_id": "i1", "ds": np.arange(-11, 1), "y": history})
    direct = net.predict(long)["TitansForecaster"].to_numpy()
    np.testing.assert_allclose(forecast.loc["i1"]["y"].to_numpy()[:4], direct, rtol=1e-5)


def test_panel_instances_that_end_before_the_cutoff_forecast_up_to_it():
    y = panel(end_together=False)  # ends at 99, 96, 93
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y, fh=[1, 2])
    forecast = f.predict()
    assert forecast.loc["i2"].index.tolist() == [100, 101]
    # i2 ends 6 steps before the cutoff: its forecast for 100, 101 is its steps 7 and 8
    net = f.forecaster_
    history = y.loc["i2"]["y"].to_numpy()[-12:]
    series = Series("i2", pd.RangeIndex(-11, 1), history[:, None], np.zeros((12, 0)),
                    np.zeros((12, 0)), np.zeros(0), None)  # fmt: skip
    point, _ = roll_series(net, [series], 8)
    np.testing.assert_allclose(forecast.loc["i2"]["y"].to_numpy(), point[0, 6:8, 0], rtol=1e-5)


def timed_panel(freqs=("h", "h", "h"), ends=(0, 80, 160)):
    """Panel data whose time level holds timestamps (a MultiIndex keeps no frequency);
    instance i ends `ends[i]` steps before the first one, at its own frequency. By default
    the instances' spans do not overlap, so their union has no regular frequency either."""
    frames = []
    for i, (freq, back) in enumerate(zip(freqs, ends, strict=True)):
        n = 60 - 5 * i
        times = pd.date_range(end=pd.Timestamp("2024-03-10") - back * pd.Timedelta(1, freq),
                              periods=n, freq=freq)  # fmt: skip
        index = pd.MultiIndex.from_product([[f"i{i}"], times], names=["instance", "time"])
        frames.append(pd.DataFrame({"y": np.sin(np.arange(n) / 4 + i) + i}, index=index))
    return pd.concat(frames)


def test_panel_data_with_timestamps_forecasts_at_their_frequency():
    y = timed_panel()
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y, fh=[1, 2, 3])
    forecast = f.predict()
    times = pd.date_range("2024-03-10 01:00", periods=3, freq="h")
    for instance in ["i0", "i1", "i2"]:
        assert forecast.loc[instance].index.tolist() == times.tolist()
    # an absolute horizon is read at the same frequency
    absolute = ForecastingHorizon(times[[1]], is_relative=False)
    second = forecast.loc["i2"]["y"].iloc[1]
    np.testing.assert_allclose(f.predict(fh=absolute).loc["i2"]["y"], second)
    # instance i2 ends 160 hours before the cutoff: its forecast is its steps 161 to 163
    net = f.forecaster_
    history = y.loc["i2"]["y"].to_numpy()[-12:]
    series = Series("i2", pd.RangeIndex(-11, 1), history[:, None], np.zeros((12, 0)),
                    np.zeros((12, 0)), np.zeros(0), None)  # fmt: skip
    point, _ = roll_series(net, [series], 163)
    np.testing.assert_allclose(forecast.loc["i2"]["y"].to_numpy(), point[0, 160:, 0], rtol=1e-5)
    # new rows move the cutoff at the same frequency
    new = pd.DataFrame({"y": [0.5]}, index=pd.MultiIndex.from_product([["i0"], times[:1]]))
    f.update(new, update_params=False)
    assert f.predict().loc["i1"].index[0] == times[1]


def test_panel_instances_at_different_frequencies_are_refused_at_predict():
    y = timed_panel(freqs=("h", "h", "D"), ends=(0, 0, 0))
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y, fh=[1, 2])
    with pytest.raises(ValueError, match="no single regular frequency"):
        f.predict()
