"""TitansForecaster with covariates and many series: the long frame, future/historical/static
covariates, calendar features, short series, and the errors users meet."""

import numpy as np
import pandas as pd
import pytest
import torch

from titans_seq.data import DataError
from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.forecasting.calendar import calendar_features, calendar_names
from titans_seq.domains.forecasting.covariate_tokens import CovariateShape
from titans_seq.domains.forecasting.model import SimbaForecaster, patchify
from titans_seq.domains.forecasting.panel_windows import (
    EncodedSeries,
    PanelWindows,
    window_starts,
)
from titans_seq.domains.forecasting.revin import RevIN
from titans_seq.errors import ConfigError

SMALL = dict(
    lookback=24,
    horizon=6,
    dim=16,
    depth=1,
    heads=2,
    patch_len=8,
    stride=4,
    ensemble_size=1,
    max_epochs=2,
    mixer_options={"chunk_size": 4},
    random_state=0,
    device="cpu",
)


def panel(seed=0):
    """Four hourly/2-hourly series of different lengths and starts (one shorter than
    lookback + horizon), rows shuffled; y follows `load` (historical) and `price` (future)."""
    rng = np.random.default_rng(seed)
    frames = []
    specs = [(260, "2024-01-01", "h"), (150, "2024-02-01", "h"), (20, "2024-03-01", "h"),
             (200, "2024-01-01", "2h")]  # fmt: skip
    for i, (n, start, freq) in enumerate(specs):
        t = np.arange(n)
        load = np.sin(2 * np.pi * t / 24 + i)
        price = rng.standard_normal(n)
        y = 5.0 * i + 2.0 * load + price + 0.05 * rng.standard_normal(n)
        frames.append(
            pd.DataFrame(
                {
                    "unique_id": f"s{i}",
                    "ds": pd.date_range(start, periods=n, freq=freq),
                    "y": y,
                    "load": load,
                    "price": price,
                }  # fmt: skip
            )
        )
    return pd.concat(frames).sample(frac=1.0, random_state=seed).reset_index(drop=True)


STATIC = pd.DataFrame({"unique_id": ["s0", "s1", "s2", "s3"], "size": [1.0, 2.0, 3.0, 4.0]})
LISTS = dict(hist_exog_list=["load"], futr_exog_list=["price"], stat_exog_list=["size"])


def future_prices(f, seed=1, drop_last_of=None):
    rng = np.random.default_rng(seed)
    rows = []
    for uid, fitted in f.series_.items():
        tail = fitted.tail
        stamps = pd.date_range(tail.index[-1], periods=f.horizon + 1, freq=tail.freq)[1:]
        if uid == drop_last_of:
            stamps = stamps[:-1]
        rows.append(
            pd.DataFrame(
                {"unique_id": uid, "ds": stamps, "price": rng.standard_normal(len(stamps))}
            )
        )
    return pd.concat(rows)


@pytest.fixture(scope="module")
def fitted_panel():
    return TitansForecaster(**SMALL, **LISTS, calendar="auto").fit(panel(), static_df=STATIC)


def test_a_long_frame_fits_one_global_model(fitted_panel):
    f = fitted_panel
    assert f.ids_ == ["s0", "s1", "s2", "s3"] and f.target_names_ == ["y"]
    assert f.calendar_ == ["hour"]  # the longest series spans 17 days: no weekly cycles
    # 469 training windows of series of 20-260 rows: trained again on every row
    assert f.refit_epochs_ is not None and f.refit_epochs_ <= f.n_epochs_
    assert f.covariate_shape_ == CovariateShape(
        hist=1, futr=1, calendar=1, static=1, observed_mask=True
    )
    out = f.predict(futr_df=future_prices(f))
    assert list(out.columns) == ["unique_id", "ds", "TitansForecaster"]
    assert len(out) == 4 * 6 and np.isfinite(out["TitansForecaster"]).all()
    # each series continues at its own frequency from its own last stamp
    s3 = out[out.unique_id == "s3"].ds
    assert s3.iloc[0] == pd.Timestamp("2024-01-01") + pd.Timedelta(hours=2 * 200)
    assert (s3.diff().dropna() == pd.Timedelta(hours=2)).all()
    # the forecasts are on each series' own scale (series i sits around 5 i)
    means = out.groupby("unique_id")["TitansForecaster"].mean()
    assert means.is_monotonic_increasing


def test_a_chosen_subset_and_new_series(fitted_panel):
    f = fitted_panel
    fut = future_prices(f)
    one = f.predict(futr_df=fut, ids=["s1"])
    full = f.predict(futr_df=fut)
    np.testing.assert_allclose(
        one["TitansForecaster"], full[full.unique_id == "s1"]["TitansForecaster"], rtol=1e-5
    )
    # a series the model never saw: its history (shorter than the lookback: left-padded)
    new = panel(seed=5)
    new = new[new.unique_id == "s1"].assign(unique_id="new").sort_values("ds").iloc[:15]
    stamps = pd.date_range(new.ds.iloc[-1], periods=7, freq="h")[1:]
    futr = pd.DataFrame({"unique_id": "new", "ds": stamps, "price": 0.0})
    static = pd.DataFrame({"unique_id": ["new"], "size": [2.0]})
    out = f.predict(new, futr_df=futr, static_df=static)
    assert list(out.unique_id.unique()) == ["new"] and np.isfinite(out.TitansForecaster).all()
    with pytest.raises(DataError, match="were not fitted: pass static_df"):
        f.predict(new, futr_df=futr)
    with pytest.raises(DataError, match=r"unknown series \['nope'\]"):
        f.predict(futr_df=fut, ids=["nope"])


def test_future_covariates_must_cover_the_horizon(fitted_panel):
    f = fitted_panel
    with pytest.raises(DataError, match="pass futr_df"):
        f.predict()
    with pytest.raises(DataError, match=r"series 's2'.*1 of the 6 forecast steps have no row"):
        f.predict(futr_df=future_prices(f, drop_last_of="s2"))
    bad = future_prices(f).assign(price=np.nan)
    with pytest.raises(DataError, match="NaN, infinite or not numbers"):
        f.predict(futr_df=bad)


def test_save_and_load_keep_every_series(fitted_panel, tmp_path):
    fitted_panel.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    fut = future_prices(fitted_panel)
    pd.testing.assert_frame_equal(loaded.predict(futr_df=fut), fitted_panel.predict(futr_df=fut))
    scored = panel()
    with pytest.raises(DataError, match=r"series \['s2'\] are shorter than"):
        loaded.score(scored, static_df=STATIC)
    scored = scored[scored.unique_id != "s2"]
    assert loaded.score(scored) == pytest.approx(fitted_panel.score(scored))


def test_a_future_covariate_is_used():
    """y is the future covariate plus a daily cycle: only a model that reads the covariate
    over the horizon can forecast it, so it scores far better than one without."""
    rng = np.random.default_rng(0)
    n = 600
    t = np.arange(n)
    price = rng.standard_normal(n)
    frame = pd.DataFrame(
        {"y": np.sin(2 * np.pi * t / 24) + 2.0 * price, "price": price},
        index=pd.date_range("2024-01-01", periods=n, freq="h"),
    )
    options = {**SMALL, "max_epochs": 6, "learning_rate": 3e-3}
    train, test = frame.iloc[:450], frame.iloc[450 - 24 :]
    with_cov = TitansForecaster(**options, futr_exog_list=["price"]).fit(train)
    without = TitansForecaster(**options).fit(train[["y"]])
    assert with_cov.target_names_ == ["y"]
    assert with_cov.score(test) > without.score(test[["y"]]) + 0.3
    future = frame.iloc[450:456][["price"]]
    out = with_cov.predict(train, futr_df=future)
    assert list(out.columns) == ["y"] and out.index.equals(future.index)


def test_a_wide_frame_with_covariates_and_X():
    frame = panel()
    one = frame[frame.unique_id == "s0"].sort_values("ds").set_index("ds")
    y, X = one[["y"]], one[["load", "price"]]
    f = TitansForecaster(**SMALL, hist_exog_list=["load", "price"]).fit(y, X=X)
    assert list(f.feature_names_in_) == ["y", "load", "price"] and f.target_names_ == ["y"]
    assert f.predict().shape == (6, 1)
    with pytest.raises(DataError, match=r"X column\(s\) \['load'\] are not named"):
        TitansForecaster(**SMALL).fit(y, X=X[["load"]])
    with pytest.raises(DataError, match="same rows"):
        f.fit(y, X=X.iloc[1:])
    with pytest.raises(DataError, match=r"the data lacks the covariate column\(s\) \['temp'\]"):
        TitansForecaster(**SMALL, hist_exog_list=["temp"]).fit(y)
    with pytest.raises(ConfigError, match="long frame"):
        TitansForecaster(**SMALL, stat_exog_list=["size"]).fit(y)


def test_without_timestamps_future_covariates_are_given_by_position():
    rng = np.random.default_rng(0)
    values = np.column_stack([np.sin(np.arange(200) / 4), rng.standard_normal(200)])
    frame = pd.DataFrame(values, columns=["y", "plan"])
    f = TitansForecaster(**{**SMALL, "max_epochs": 1}, futr_exog_list=["plan"]).fit(frame)
    out = f.predict(futr_df=pd.DataFrame({"plan": np.zeros(6)}))
    assert list(out.index) == list(range(200, 206))
    with pytest.raises(DataError, match="exactly 6 rows"):
        f.predict(futr_df=pd.DataFrame({"plan": np.zeros(5)}))
    with pytest.raises(DataError, match="calendar features need timestamps"):
        TitansForecaster(**SMALL, calendar="auto").fit(frame)


def test_long_frame_errors_name_the_series_and_columns():
    frame = panel()
    f = TitansForecaster(**SMALL, **LISTS)
    with pytest.raises(DataError, match=r"\['extra'\] are neither 'y' nor named"):
        f.fit(frame.assign(extra=1.0), static_df=STATIC)
    with pytest.raises(DataError, match="static_df has no row for series 's3'"):
        f.fit(frame, static_df=STATIC.iloc[:3])
    with pytest.raises(DataError, match="pass static_df"):
        f.fit(frame)
    tiny = pd.concat([frame, pd.DataFrame({"unique_id": "tiny", "ds": pd.date_range(
        "2024-01-01", periods=5, freq="h"), "y": 1.0, "load": 0.0, "price": 0.0})])  # fmt: skip
    with pytest.raises(DataError, match=r"1 series have fewer than 14 rows.*\['tiny'\]"):
        f.fit(tiny, static_df=pd.concat([STATIC, pd.DataFrame({"unique_id": ["tiny"],
                                                                 "size": [0.0]})]))  # fmt: skip
    doubled = pd.concat([frame, frame[frame.unique_id == "s1"].iloc[:1]])
    with pytest.raises(DataError, match="series 's1'.*duplicated timestamp"):
        f.fit(doubled, static_df=STATIC)
    gap = frame.drop(frame[frame.unique_id == "s0"].index[10])
    with pytest.raises(DataError, match="series 's0'.*missing from the series' h grid"):
        f.fit(gap, static_df=STATIC)


def test_integer_time_steps_and_the_missing_policy():
    rows = []
    for uid, n in (("a", 80), ("b", 60)):
        t = np.arange(n)
        rows.append(pd.DataFrame({"unique_id": uid, "ds": t + 100, "y": np.sin(t / 3)}))
    frame = pd.concat(rows)
    f = TitansForecaster(**{**SMALL, "max_epochs": 1}).fit(frame)
    out = f.predict()
    assert out[out.unique_id == "a"].ds.tolist() == list(range(180, 186))
    gappy = frame.drop(index=frame.index[5])
    with pytest.raises(DataError, match="misses 1 of the integer time steps on its grid of step 1"):
        f.fit(gappy)
    with pytest.warns(UserWarning, match="1 integer time step.*inserted"):
        filled = TitansForecaster(**{**SMALL, "max_epochs": 1}, missing="ffill").fit(gappy)
    assert filled.predict().shape == (12, 3)
    with pytest.raises(DataError, match="repeats the time step"):
        f.fit(pd.concat([frame, frame.iloc[:1]]))
    nan = frame.assign(y=frame.y.where(frame.ds != 110))
    with pytest.raises(DataError, match="missing or infinite"):
        f.fit(nan)
    assert np.isfinite(TitansForecaster(**{**SMALL, "max_epochs": 1}, missing="interpolate")
                       .fit(nan).predict().TitansForecaster).all()  # fmt: skip


def test_integer_time_steps_of_any_regular_stride():
    """ds every 5 (weeks numbered 0, 5, 10...): the grid's own step, gaps on it filled when
    `missing` says so, and forecasts continue at that step."""
    t = np.arange(90)
    frame = pd.DataFrame({"unique_id": "a", "ds": 5 * t, "y": np.sin(t / 3)})
    f = TitansForecaster(**{**SMALL, "max_epochs": 1}).fit(frame)
    assert f.predict().ds.tolist() == list(range(450, 480, 5))
    gappy = frame.drop(index=[20, 21])
    with pytest.raises(DataError, match="misses 2 .* grid of step 5 \\(the first at 100\\)"):
        TitansForecaster(**SMALL).fit(gappy)
    with pytest.warns(UserWarning, match="2 integer time step"):
        filled = TitansForecaster(**{**SMALL, "max_epochs": 1}, missing="interpolate").fit(gappy)
    assert filled.predict().ds.tolist() == list(range(450, 480, 5))


def test_windows_of_one_series_are_the_stride_one_windows():
    values = np.arange(40, dtype=np.float32).reshape(20, 2)
    encoded = EncodedSeries(values, np.zeros((20, 0), np.float32), np.zeros((20, 0), np.float32),
                            np.zeros(0, np.float32))  # fmt: skip
    starts, _ = window_starts([20], [20], 5, 3, 5)
    windows = PanelWindows([encoded], starts, 5, 3, CovariateShape())
    inputs, y = windows.get_batch(range(len(windows)))
    spans = torch.from_numpy(values).unfold(0, 8, 1).permute(0, 2, 1)
    torch.testing.assert_close(inputs["x"], spans[:, :5])
    torch.testing.assert_close(y, spans[:, 5:])


def _listed_windows(lengths, train_rows, lookback, horizon, min_context, history_rows):
    """Every (series, start) written out, one window at a time."""
    train, val = [], []
    for i, (length, rows) in enumerate(zip(lengths, train_rows)):
        first = 0 if rows >= lookback + horizon else min_context - lookback
        if history_rows and rows >= history_rows + lookback + horizon:
            first = history_rows
        train += [(i, s) for s in range(first, rows - lookback - horizon + 1)]
        if rows < length:
            val += [(i, s) for s in range(rows - lookback, length - lookback - horizon + 1)]
    return train, val


@pytest.mark.parametrize("history_rows", [0, 12])
def test_window_ranges_find_the_windows_a_listing_holds(history_rows):
    rng = np.random.default_rng(history_rows)
    lengths = rng.integers(10, 80, size=40).tolist()
    train_rows = [max(9, n - int(rng.integers(0, 15))) for n in lengths]
    train, val = window_starts(lengths, train_rows, 8, 4, 3, history_rows)
    listed_train, listed_val = _listed_windows(lengths, train_rows, 8, 4, 3, history_rows)
    assert len(train) == len(listed_train) and len(val) == len(listed_val)
    assert train.pairs(np.arange(len(train))).tolist() == [list(p) for p in listed_train]
    assert val.pairs(np.arange(len(val))).tolist() == [list(p) for p in listed_val]
    picked = rng.permutation(len(val))[:7]
    assert val.subset(picked).pairs(range(7)).tolist() == [list(listed_val[p]) for p in picked]


def test_short_series_windows_are_left_padded_and_masked():
    target = np.arange(10, dtype=np.float32)[:, None]
    hist = target * 10
    encoded = EncodedSeries(target, hist, np.zeros((10, 0), np.float32), np.zeros(0, np.float32))
    starts, val = window_starts([10], [10], 8, 4, 2)
    assert starts.pairs(range(len(starts)))[:, 1].tolist() == [-6, -5, -4, -3, -2]
    assert len(val) == 0
    windows = PanelWindows([encoded], starts, 8, 4, CovariateShape(hist=1, observed_mask=True))
    inputs, y = windows.get_batch([0])
    assert inputs["mask"][0].tolist() == [0] * 6 + [1] * 2
    assert inputs["x"][0, :, 0].tolist() == [0] * 7 + [1]  # padded with the first row
    assert inputs["past"][0, -1, 0] == 10 and y[0, :, 0].tolist() == [2, 3, 4, 5]


def test_masked_revin_uses_only_observed_steps():
    revin = RevIN(1, affine=False)
    observed = torch.randn(1, 5, 1) * 3 + 2
    padded = torch.cat([observed[:, :1].expand(-1, 7, -1), observed], dim=1)
    mask = torch.cat([torch.zeros(1, 7), torch.ones(1, 5)], dim=1)
    z_pad, (mean, std) = revin.normalize(padded, mask)
    z_obs, (mean_obs, std_obs) = revin.normalize(observed)
    torch.testing.assert_close(mean, mean_obs)
    torch.testing.assert_close(std, std_obs)
    torch.testing.assert_close(z_pad[:, 7:], z_obs)


def test_the_model_reads_future_but_not_later_past_covariates():
    torch.manual_seed(0)
    shape = CovariateShape(hist=1, futr=1, static=1, observed_mask=True)
    model = SimbaForecaster(1, 24, 6, dim=16, depth=1, heads=2, patch_len=8, stride=4,
                            mixer_options={"chunk_size": 4}, covariates=shape).eval()  # fmt: skip
    for p in model.covariates.parameters():  # past and static projections start at zero
        torch.nn.init.normal_(p, std=0.5)
    x, past = torch.randn(2, 24, 1), torch.randn(2, 24, 2)
    future, static, mask = torch.randn(2, 6, 1), torch.randn(2, 1), torch.ones(2, 24)
    out = model(x, past=past, future=future, static=static, mask=mask)
    # (a constant shift of past covariates is normalised away, as for the target)
    changes = [("future", future + 1), ("static", static + 1), ("past", torch.randn_like(past))]
    for name, changed in changes:
        kwargs = dict(past=past, future=future, static=static, mask=mask)
        kwargs[name] = changed
        assert not torch.allclose(model(x, **kwargs), out), name
    # window 1's forecast does not depend on window 0's covariates
    kwargs = dict(past=past.clone(), future=future.clone(), static=static, mask=mask)
    kwargs["future"][0] += 5
    torch.testing.assert_close(model(x, **kwargs)[1], out[1])
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="future covariates of shape"):
        model(x, past=past, future=future[:, :3], static=static, mask=mask)


def test_calendar_features():
    index = pd.DatetimeIndex(["2024-01-01 00:00", "2024-07-01 23:00"])
    feats = calendar_features(index, ["hour", "dayofweek", "month"])
    np.testing.assert_allclose(feats[0], [-0.5, -0.5, -0.5])
    np.testing.assert_allclose(feats[1], [0.5, -0.5, 6 / 11 - 0.5], rtol=1e-6)
    assert calendar_names("auto", "15min")[0] == "minute"
    assert calendar_names("auto", "D") == ["dayofweek", "dayofmonth", "dayofyear"]
    assert calendar_names("auto", "MS") == ["month"]
    # only cycles seen at least four times: one year of hourly data has no day of year
    assert calendar_names("auto", "h", span_days=360) == ["hour", "dayofweek", "dayofmonth"]
    assert calendar_names("auto", "h", span_days=20) == ["hour"]
    with pytest.raises(ConfigError, match="distinct names"):
        calendar_names(["hour", "fortnight"], "h")


def test_a_historical_covariate_that_leads_the_target_is_used():
    """y repeats a smooth load 6 steps later: the load over the lookback holds the first
    6 steps of the horizon, which y's own history cannot."""
    rng = np.random.default_rng(0)
    n = 700
    load = np.convolve(rng.standard_normal(n + 10), np.ones(5) / 5, mode="same")[:n]
    y = np.roll(load, 6) + 0.05 * rng.standard_normal(n)
    frame = pd.DataFrame(
        {"load": load, "y": y}, index=pd.date_range("2024-01-01", periods=n, freq="h")
    ).iloc[10:]
    options = {**SMALL, "max_epochs": 5, "learning_rate": 3e-3}
    train, test = frame.iloc[:500], frame.iloc[500 - 24 :]
    with_load = TitansForecaster(**options, hist_exog_list=["load"]).fit(train)
    without = TitansForecaster(**options).fit(train[["y"]])
    assert with_load.score(test) > without.score(test[["y"]]) + 0.2


def test_history_windows_carry_the_memory_into_the_forecast(tmp_path):
    frame = panel()
    one = frame[frame.unique_id == "s0"].sort_values("ds").set_index("ds")[["y", "load"]]
    f = TitansForecaster(**SMALL, hist_exog_list=["load"], history_windows=2).fit(one)
    assert f.context_rows == 72 and len(f.series_["series"].tail) == 72
    base = f.predict(one)
    # a change 30 rows before the lookback reaches the forecast through the memory ...
    changed = one.copy()
    changed.iloc[-24 - 30, 0] += 5.0
    assert not np.allclose(f.predict(changed).to_numpy(), base.to_numpy())
    # ... and not without history windows
    window_only = TitansForecaster(**SMALL, hist_exog_list=["load"]).fit(one)
    np.testing.assert_allclose(
        window_only.predict(changed).to_numpy(), window_only.predict(one).to_numpy()
    )
    f.save(tmp_path / "m")
    loaded = TitansForecaster.load(tmp_path / "m")
    pd.testing.assert_frame_equal(loaded.predict(), f.predict())
    assert np.isfinite(f.score(one))


def test_history_states_match_streaming_the_windows_one_by_one():
    torch.manual_seed(0)
    model = SimbaForecaster(1, 24, 6, dim=16, depth=2, heads=2, patch_len=8, stride=4,
                            mixer_options={"chunk_size": 4}).eval()  # fmt: skip
    history, x = torch.randn(3, 2, 24, 1), torch.randn(3, 24, 1)
    out = model(x, history=history)
    # by hand: each window's tokens through the blocks, the states passed on
    states = [None, None]
    for window in [history[:, 0], history[:, 1], x]:
        z, stats = model.revin.normalize(window)
        series = z.transpose(1, 2).reshape(3, 24)
        tokens = model.patch_embed(patchify(series, model.patch_len, model.stride))
        tokens = tokens + model.position
        for i, block in enumerate(model.blocks):
            tokens, states[i] = block(tokens, states[i])
    expected = model.revin.denormalize(
        model.head(model.norm(tokens).flatten(1)).view(3, 1, 6).transpose(1, 2), stats
    )
    torch.testing.assert_close(out, expected)
    assert not torch.allclose(out, model(x))
    with pytest.raises(ValueError, match="expected history of shape"):
        model(x, history=history[:, :, :12])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_covariates_under_autocast_match_float32_and_keep_gradients_finite(dtype):
    torch.manual_seed(0)
    shape = CovariateShape(hist=2, futr=1, calendar=1, static=1, observed_mask=True)
    model = SimbaForecaster(2, 24, 6, dim=16, depth=1, heads=2, patch_len=8, stride=4,
                            mixer_options={"chunk_size": 4}, covariates=shape).eval()  # fmt: skip
    for p in model.covariates.parameters():
        torch.nn.init.normal_(p, std=0.2)
    inputs = dict(
        x=torch.randn(3, 24, 2) * 50 + 1e3,  # a level far from 0, as raw data has
        past=torch.randn(3, 24, 4) * 1e3,
        future=torch.randn(3, 6, 2),
        static=torch.randn(3, 1),
        mask=torch.cat([torch.zeros(3, 5), torch.ones(3, 19)], dim=1),
        history=torch.randn(3, 2, 24, 2),
        history_past=torch.randn(3, 2, 24, 4),
    )
    reference = model(**inputs)
    with torch.autocast("cpu", dtype=dtype):
        out = model(**inputs)
    _, (_, std) = model.revin.normalize(inputs["x"], inputs["mask"])
    error = ((out.float() - reference) / std).abs().max()  # in units of each window's std
    assert torch.isfinite(out).all() and error < 0.05
    out.float().square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
