"""`TitansForecaster`: a scikit-learn estimator around the Simba-style Titans forecaster.

    f = TitansForecaster(lookback=96, horizon=24).fit(df)  # DatetimeIndex, a column per variable
    future = f.predict()     # DataFrame [horizon, C] with the future timestamps
    f.score(df_test)         # -MSE (z-scored) over rolling windows

    # many series, covariates (neuralforecast's names and long layout)
    f = TitansForecaster(horizon=24, hist_exog_list=["load"], futr_exog_list=["price"],
                         calendar="auto").fit(long_df)          # unique_id, ds, y, load, price
    f.predict(futr_df=future_prices)                            # unique_id, ds, TitansForecaster

scikit-learn rules: `__init__` only stores parameters, `fit` returns self, fitted attributes
end in `_`, so `clone`, `get_params`/`set_params` and `cross_validate(f, y, cv=TimeSeriesSplit())`
work. Training goes through the shared loop (`titans_seq.training`) with the `forecasting`
task on in-memory windows.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from titans_seq.checks import check_int, check_number
from titans_seq.data import DataError, StandardScaler
from titans_seq.data.tables import check_long_layout
from titans_seq.errors import ConfigError
from titans_seq.training.distributed import DistContext, all_gather_objects, process_group
from titans_seq.training.in_memory import (
    EstimatorTraining,
    estimator_device,
    fit_in_memory,
)

from . import fit_plan
from .baseline import WeightLosses, choose_weight, mix, seasonal_naive
from .calendar import calendar_names
from .covariate_tokens import CovariateShape
from .data_defaults import (
    AUTO,
    BATCH,
    LEARNING_RATE,
    MANY_WINDOWS,
    MIXERS_COMPARED,
    choose_center,
    choose_mixer,
    season_length,
    validation_subset,
)
from .ensemble import one_model
from .fit_plan import plan_fit, plan_lookback
from .fitted_series import FittedSeries
from .horizon_inputs import future_index, long_future_covariates, wide_future_covariates
from .panel_windows import PanelWindows, SeriesScaler, WindowList, encode, window_starts
from .persistence import CHOSEN_NUMBERS, load_forecaster, save_forecaster
from .series_input import (
    ID,
    TARGET,
    TIME,
    ExogLists,
    Series,
    checked_frame,
    is_long_frame,
    long_series,
    wide_series,
)
from .task import (
    ForecastModelConfig,
    InMemoryForecastTask,
    build_forecaster,
    point_forecast,
    run_forecaster,
)

FORECAST_COLUMN = "TitansForecaster"  # a long frame's forecast column, named as neuralforecast does


class TrainedMembers(NamedTuple):
    """An ensemble's networks as `_train_members` trains them: the networks with their best
    weights, the validation history (tagged by "member" when there are several), and each
    network's best epoch and best validation loss (the early stopping's metric)."""

    networks: list
    history: list[dict]
    best_epochs: list[int]
    best_losses: list[float]


class TitansForecaster(BaseEstimator):
    """Forecaster of one multivariate series or a panel of many series, with covariates:
    RevIN, channel-independent patches, [mixer, EinFFT] blocks, covariates as tokens.

    Parameters:
        lookback, horizon: input window and forecast length (rows); lookback "auto" chooses
            it from the training rows, the horizon and the frequency's season
            (`data_defaults`): two horizons or a season, a week of hourly or half-hourly
            data with three weeks of rows, and with 500+ training windows up to a quarter
            of the rows, at most 96 unless the horizon or the week asks for more.
        mixer, mixer_options: any registered sequence mixer ("lmm" = Titans memory alone,
            "attention", "mag", ...) and its options; "auto": with a hold-out of 100 or
            more windows and a schedule of at most 150,000 windows, networks with the
            memory ("lmm") and with full attention are both trained and compared on the
            hold-out, attention kept only if its validation loss is lower by more than 1%;
            else (and where mixer_options are given: they are the memory's) "lmm".
        dim, depth, heads, patch_len, stride: model size and patching; dim and heads
            "auto": 16 wide with 2 heads below 500 training windows, else 64 with 4 (a
            given one is kept and the other fitted to it).
        ensemble_size: how many networks the forecast averages, the first trained from
            seed random_state and each other one from a seed of its own drawn from
            (random_state, its index), so that two random states share no network;
            "auto": 5 below 500 training windows (where a narrow model's forecast swings
            with its seed, and a fit takes seconds), else 1.
        quantiles: e.g. (0.1, 0.5, 0.9) for a probabilistic head (pinball loss); None = point.
        loss: the point head's training loss: "mse" (forecasts the mean) or "mae" (the
            median, as NHITS and PatchTST train by default); "auto": "mae" below 500
            training windows or for 100+ series, where a few large errors dominate a squared
            loss, else "mse".
        center: the level each window is normalised from and forecast around (RevIN):
            "mean" (the window's mean), "last" (its last value: the network starts from
            a persistence forecast, as NLinear does) or "trend" (the window's
            least-squares line at its last step); "auto": below 500 training windows,
            with a hold-out, the networks are trained from "mean" and "last", and from
            "trend" too where the lookback holds two or more seasons of a known season;
            the other center with the lowest validation loss is kept if that loss is
            lower than the mean's by more than 1% (a drifting series takes "last", a
            trending seasonal one "trend", one that returns to its mean "mean"), else
            "mean".
        baseline: the seasonal naive forecast (the last season repeated; the last value
            where the frequency has no season) weighed into the point forecast, `w * naive
            + (1 - w) * network`: "auto" chooses w among 0, 0.25, 0.5, 0.75 and 1 by the
            validation loss of each mix on the hold-out's windows, a w above 0 only where
            it lowers the network's own loss by more than 1% (0 without a hold-out or with
            quantiles); a number in [0, 1] fixes w; None is the network alone.
        hist_exog_list: columns known up to the forecast origin only (historical exogenous).
        futr_exog_list: columns known over the horizon too (planned values); predict then
            needs their future values in `futr_df`.
        stat_exog_list: per-series features of a long frame, given in `static_df`.
        calendar: None, "auto" (Time-Series-Library's features for the data's frequency,
            those whose cycle the training rows repeat 4+ times) or names from
            `calendar.FEATURES`: future covariates made from the timestamps.
        history_windows: K earlier lookback windows streamed through the model before each
            forecast window, every mixer's state (the Titans memory) carried from one to the
            next: a forecast conditions on (K + 1) x lookback rows at a cost linear in K
            (training windows start after K x lookback rows). 0: the window alone.
        max_epochs, batch_size, learning_rate: optimisation (AdamW, warmup + cosine);
            max_epochs "auto": enough epochs to see about 100,000 training windows (2 to
            200: a short series is seen many times, a long panel's windows a few times);
            batch_size "auto": 32 windows a step, 128 where the schedule shows more than
            150,000 windows (a panel of hundreds of series); learning_rate "auto": 1e-3
            times the batch's multiple of 32 (1 to 3).
        ema_decay: keep (and validate) the moving average of the trained weights over
            about 1 / (1 - ema_decay) steps instead of the weights themselves; None: off;
            "auto": 0.99 where the schedule shows more than 150,000 windows, else off.
        target_transform: "log": the networks learn the logarithm of every series' target
            (positive values only; forecasts are its exponential, quantiles included);
            None: the values; "auto": "log" for a panel of 100+ positive series trained on
            absolute error (whose median the logarithm keeps), else None.
        epoch_windows: training windows per epoch (between validations), drawn at random
            from all of them, the next epoch continuing the same shuffled order; "auto":
            every window up to 25,000 (a long panel's epochs are 25,000 windows each).
        validation_fraction: last fraction of each series' rows held out for early stopping
            (their windows start `lookback` rows earlier); 0 trains on everything. Where a
            refit follows, a series whose fraction is shorter than the horizon holds out
            one horizon instead (if a training window remains).
        patience: epochs without validation improvement before stopping (0 = never;
            "auto": a tenth of the epochs, at least 3).
        refit: after the hold-out has chosen the epochs, train the networks again on every
            row, the hold-out's latest rows included, for that many epochs (the median of
            the networks' best epochs): True, False, or "auto": below 500 training
            windows, where the hold-out is a large share of the data.
        missing: NaN/inf policy, "error" | "ffill" | "interpolate".
        device: "auto" (CUDA when available), "cpu", "cuda", ...
        random_state: seed of initialisation and batch order (None = 0).
        verbose: show the progress bar and log lines.

    Fitted attributes: model_, target_names_, feature_names_in_, n_features_in_, freq_,
    ids_ (the series' unique_id values; ["series"] for a wide frame), calendar_,
    series_ (per series: scaling and last rows), scaler_ (the target scaling of a wide
    frame's series), history_ (validation metrics per epoch; an ensemble's tagged with
    "member"), n_epochs_ (the first member's), device_, and the settings used: lookback_,
    max_epochs_, epoch_windows_ (None in folders saved before it was recorded: every window),
    patience_, dim_, heads_, ensemble_size_, loss_, center_, mixer_, batch_size_,
    learning_rate_, ema_decay_, target_transform_ (the "auto" choices resolved),
    center_losses_ (each center's validation loss, the mean over the networks of their best
    epoch's, where "auto" compared them; else None; with two mixers, the chosen one's),
    mixer_losses_ (each compared mixer's validation loss at its chosen center; else None),
    baseline_weight_ (the seasonal naive forecast's weight w), baseline_season_ (its season,
    in rows), baseline_losses_ ({w: validation loss} where "auto" compared the mixes; else
    None),
    refit_epochs_ (the epochs of the refit on every row; None: the hold-out's networks),
    plan_ (a `FitPlan`: every setting decided before training, in one place, with the
    training windows it was decided for; `plan_.describe()` says it in a line).
    """

    def __init__(
        self,
        lookback: int | str = "auto",
        horizon: int = 96,
        mixer: str = "auto",
        mixer_options: dict | None = None,
        dim: int | str = "auto",
        depth: int = 2,
        heads: int | str = "auto",
        patch_len: int = 16,
        stride: int = 8,
        ensemble_size: int | str = "auto",
        quantiles: tuple[float, ...] | None = None,
        loss: str = "auto",
        center: str = "auto",
        baseline: str | float | None = "auto",
        hist_exog_list: list[str] | None = None,
        futr_exog_list: list[str] | None = None,
        stat_exog_list: list[str] | None = None,
        calendar: str | list[str] | None = None,
        history_windows: int = 0,
        max_epochs: int | str = "auto",
        epoch_windows: int | str = "auto",
        batch_size: int | str = "auto",
        learning_rate: float | str = "auto",
        ema_decay: float | str | None = "auto",
        target_transform: str | None = "auto",
        validation_fraction: float = 0.1,
        patience: int | str = "auto",
        refit: bool | str = "auto",
        missing: str = "error",
        device: str = "auto",
        random_state: int | None = None,
        verbose: bool = False,
    ):
        self.lookback = lookback
        self.horizon = horizon
        self.mixer = mixer
        self.mixer_options = mixer_options
        self.dim = dim
        self.depth = depth
        self.heads = heads
        self.patch_len = patch_len
        self.stride = stride
        self.ensemble_size = ensemble_size
        self.quantiles = quantiles
        self.loss = loss
        self.center = center
        self.baseline = baseline
        self.hist_exog_list = hist_exog_list
        self.futr_exog_list = futr_exog_list
        self.stat_exog_list = stat_exog_list
        self.calendar = calendar
        self.history_windows = history_windows
        self.max_epochs = max_epochs
        self.epoch_windows = epoch_windows
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.ema_decay = ema_decay
        self.target_transform = target_transform
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.refit = refit
        self.missing = missing
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        # the input is one series [T, C] (or a long frame of series) whose rows are time
        # steps, not independent samples: scikit-learn's tabular checks (row order and subset
        # invariance, 1-sample fits) do not apply, so it skips them;
        # tests/domains/test_sklearn_conformance.py runs the rest
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.allow_nan = self.missing != "error"
        tags.target_tags.required = False
        return tags

    # ------------------------------------------------------------------------ parameters
    def _model_config(
        self, dim: int, heads: int, loss: str, center: str, mixer: str
    ) -> ForecastModelConfig:
        return ForecastModelConfig(
            dim=dim,
            depth=self.depth,
            heads=heads,
            mixer=mixer,
            mixer_options=dict(self.mixer_options or {}),
            patch_len=self.patch_len,
            stride=self.stride,
            quantiles=list(self.quantiles or []),
            loss=loss,
            center=center,
        )

    def _training_settings(
        self, max_epochs: int, patience: int, member: int = 0
    ) -> EstimatorTraining:
        """The optimisation settings of the ensemble's `member`-th network (`member_seed`),
        at the batch size and learning rate the plan chose."""
        return EstimatorTraining(
            max_epochs,
            self.batch_size_,
            self.learning_rate_,
            patience,
            member_seed(self.random_state, member),
            self.device,
            self.verbose,
            weight_decay=0.05,
            ema_decay=self.ema_decay_,
        )

    def _lists(self) -> ExogLists:
        return ExogLists.of(self.hist_exog_list, self.futr_exog_list, self.stat_exog_list)

    def _check_params(self) -> None:
        """Every parameter checked before any data is read (the message names it)."""
        for name in CHOSEN_NUMBERS:
            if getattr(self, name) != AUTO:
                check_int(name, getattr(self, name), 0 if name == "patience" else 1)
        check_int("horizon", self.horizon, 1)
        check_int("history_windows", self.history_windows, 0)
        if self.refit != AUTO and not isinstance(self.refit, (bool, np.bool_)):
            raise ConfigError(f"refit must be True, False or 'auto', got {self.refit!r}")
        check_number("validation_fraction", self.validation_fraction, low=0.0)
        if self.target_transform not in (AUTO, None, "log"):
            raise ConfigError(
                f"target_transform must be 'auto', 'log' or None, got {self.target_transform!r}"
            )
        if self.baseline is not None and self.baseline != AUTO:
            check_number("baseline", self.baseline, low=0.0, high=1.0, high_open=False)
        if self.validation_fraction >= 1.0:
            raise ConfigError(
                f"validation_fraction must be a number in [0, 1), got {self.validation_fraction}"
            )
        # batch_size, learning_rate, ema_decay (an "auto" one is chosen at fit),
        # random_state, device
        EstimatorTraining(
            1,
            BATCH if self.batch_size == AUTO else self.batch_size,
            LEARNING_RATE if self.learning_rate == AUTO else self.learning_rate,
            0,
            self.random_state,
            self.device,
            self.verbose,
            ema_decay=None if self.ema_decay == AUTO else self.ema_decay,
        )
        # dim, depth, heads, patch_len, stride, quantiles, mixer (an "auto" dim or heads
        # is fitted to the other, see choose_width)
        center = "mean" if self.center == AUTO else self.center
        mixer = MIXERS_COMPARED[0] if self.mixer == AUTO else self.mixer
        self._model_config(
            *fit_plan.width(self, MANY_WINDOWS), fit_plan.loss(self, 0), center, mixer
        )
        self._lists()
        calendar_names(self.calendar, "h")  # the names; "auto" is resolved at fit
        if self.lookback != AUTO and self.patch_len > self.lookback + self.stride:
            raise ConfigError(
                f"patch_len={self.patch_len} is longer than lookback + stride = "
                f"{self.lookback + self.stride}"
            )

    @property
    def context_rows(self) -> int:
        """Rows of history a forecast reads: the lookback and the history windows."""
        check_is_fitted(self, "lookback_")
        return self.lookback_ * (int(self.history_windows) + 1)

    # -------------------------------------------------------------------------- reading
    def _read(self, y, X, static_df, what: str, static_required: bool = True):
        """(series list, layout "wide" | "long", input column names)."""
        lists = self._lists()
        check_long_layout(y, what)
        if is_long_frame(y):
            if X is not None:
                raise DataError(
                    f"{what}: a long frame carries its covariates as columns; X is for a wide frame"
                )
            series = long_series(y, lists, self.missing, what, static_df, static_required)
            return series, "long", [TARGET, *lists.temporal]
        if static_df is not None:
            raise DataError(f"{what}: static_df describes the series of a long frame")
        if X is not None:
            y = self._joined(y, X, lists, what)
        one, columns = wide_series(y, lists, self.missing, what)
        return [one], "wide", columns

    def _joined(self, y, X, lists: ExogLists, what: str) -> pd.DataFrame:
        """A wide frame with the covariate columns of `X` (same rows as `y`) added."""
        frame = checked_frame(y, self.missing, f"{what}: y")
        extra = checked_frame(X, self.missing, f"{what}: X")
        if not frame.index.equals(extra.index):
            raise DataError(f"{what}: X must have the same rows (index) as y")
        stray = [c for c in extra.columns if c not in lists.temporal]
        if stray:
            raise DataError(
                f"{what}: X column(s) {stray} are not named in hist_exog_list or futr_exog_list"
            )
        both = [c for c in extra.columns if c in frame.columns]
        if both:
            raise DataError(f"{what}: column(s) {both} are both in y and in X")
        return pd.concat([frame, extra], axis=1)

    def _resolve_calendar(self, series: list[Series]) -> list[str]:
        if self.calendar is None:
            return []
        if any(not isinstance(s.index, pd.DatetimeIndex) for s in series):
            raise DataError("fit: calendar features need timestamps (a DatetimeIndex or ds dates)")
        span = max((s.index[-1] - s.index[0]) / pd.Timedelta(days=1) for s in series)
        return calendar_names(self.calendar, _panel_freq(series), span)

    def _covariate_shape(self, series: Series, layout: str) -> CovariateShape:
        return CovariateShape(
            hist=series.hist.shape[1],
            futr=series.futr.shape[1],
            calendar=len(self.calendar_),
            static=series.static.shape[0],
            observed_mask=layout == "long",
        )

    # ----------------------------------------------------------------------------- fit
    def fit(self, y, X=None, static_df=None):
        """Fit on a wide frame (DatetimeIndex or a "date" column; covariates are the
        columns the exog lists name, the rest targets), an array [T, C], or a long frame
        (`unique_id`, `ds`, `y`, covariate columns) of many series for one global model.

        X: covariate columns of a wide `y` with the same rows (None when they are in `y`).
        static_df: the stat_exog_list features, one row per unique_id of a long frame.

        Under torchrun every process calls fit with the same data and trains its share of
        every batch; all end with the same fitted forecaster.
        """
        with process_group(self.device) as ctx:  # one group for all the networks trained
            return self._fit(y, X, static_df, ctx)

    def _fit(self, y, X, static_df, ctx: DistContext):
        self._check_params()
        series, layout, columns = self._read(y, X, static_df, "fit")
        check_same_panel(series, ctx)
        freq = _panel_freq(series)
        L, H = plan_lookback(self, series, freq), int(self.horizon)
        self._check_lengths(series, layout, L, H)
        self.plan_, train_rows = plan_fit(self, series, L, freq)
        plan = self.plan_
        self.lookback_, self.loss_, self.ensemble_size_ = L, plan.loss, plan.ensemble_size
        self.max_epochs_, self.epoch_windows_, self.patience_ = (
            plan.max_epochs, plan.epoch_windows, plan.patience
        )  # fmt: skip
        self.dim_, self.heads_ = plan.dim, plan.heads
        self.batch_size_, self.learning_rate_ = plan.batch_size, plan.learning_rate
        self.ema_decay_, self.target_transform_ = plan.ema_decay, plan.target_transform
        if self.target_transform == "log":  # "auto" chose it only for positive series
            self._check_positive({s.uid: s.target for s in series}, "fit")
        self.layout_ = layout
        self.feature_names_in_ = np.asarray(columns, dtype=object)
        self.n_features_in_ = len(columns)
        self.target_names_ = (
            [TARGET]
            if layout == "long"
            else [c for c in columns if c not in self._lists().temporal]
        )
        self.ids_ = [s.uid for s in series]
        freqs = {s.freq for s in series}
        self.freq_ = freqs.pop() if len(freqs) == 1 else None
        self.calendar_ = self._resolve_calendar(series)
        self._input_is_frame = isinstance(y, pd.DataFrame)

        # chronological hold-out per series: validation windows forecast only its last rows
        statics = np.stack([s.static for s in series])
        self.static_scaler_ = StandardScaler().fit(statics) if statics.shape[1] else None
        self.covariate_shape_ = self._covariate_shape(series[0], layout)
        scalers, train_set, val_set = self._windows(series, train_rows)
        trained = {
            (mixer, center): self._train_members(
                train_set, val_set, self.max_epochs_, self.epoch_windows_, self.patience_,
                center, mixer,
            )
            for mixer in plan.mixers
            for center in plan.centers
        }  # fmt: skip
        chosen = self._choose_mixer_and_center(trained, plan)
        members, self.history_ = trained[chosen].networks, trained[chosen].history
        self.n_epochs_ = len([e for e in self.history_ if e.get("member", 0) == 0])
        self._choose_baseline(series, members, val_set)
        self.refit_epochs_ = None
        if val_set is not None and plan.refit:
            # the epochs the hold-out chose, on every row: the median over the networks
            self.refit_epochs_ = int(np.median(trained[chosen].best_epochs))
            scalers, train_set, _ = self._windows(series, [len(s) for s in series])
            epoch_windows = fit_plan.schedule(self, len(train_set))[1]
            members = self._train_members(
                train_set, None, self.refit_epochs_, epoch_windows, 0, self.center_, self.mixer_
            ).networks
        self.model_ = one_model(members)
        self.device_ = estimator_device(self.device)
        self.series_ = {
            s.uid: FittedSeries.of(s, scaler, self.context_rows)
            for s, scaler in zip(series, scalers, strict=True)
        }
        self.scaler_ = scalers[0].target if layout == "wide" else None
        return self

    def _choose_mixer_and_center(self, trained: dict, plan) -> tuple[str, str]:
        """Set center_, center_losses_, mixer_ and mixer_losses_ from the networks of each
        (mixer, center) compared on the hold-out (`trained`), and return the chosen pair:
        each mixer's center first, then the mixer at its center."""

        def loss(pair) -> float:  # the mean of the networks' best validation losses
            return float(np.mean(trained[pair].best_losses))

        several = len(plan.centers) > 1
        centers, center_losses = {}, {}
        for mixer in plan.mixers:
            center_losses[mixer] = {c: loss((mixer, c)) for c in plan.centers}
            centers[mixer] = choose_center(center_losses[mixer]) if several else plan.centers[0]
        self.mixer_, self.mixer_losses_ = plan.mixers[0], None
        if len(plan.mixers) > 1:
            self.mixer_losses_ = {m: loss((m, centers[m])) for m in plan.mixers}
            self.mixer_ = choose_mixer(self.mixer_losses_)
        self.center_ = centers[self.mixer_]
        self.center_losses_ = center_losses[self.mixer_] if several else None
        return self.mixer_, self.center_

    def _choose_baseline(self, series: list[Series], members, val_set) -> None:
        """baseline_season_, baseline_weight_ and baseline_losses_: the seasonal naive
        forecast's season and weight, compared on the hold-out where "auto" asks."""
        self.baseline_season_ = min(season_length(_panel_freq(series)), self.lookback_)
        self.baseline_losses_ = None
        if self.baseline != AUTO:
            self.baseline_weight_ = 0.0 if self.baseline is None else float(self.baseline)
            return
        self.baseline_weight_ = 0.0
        if val_set is None or self.quantiles:
            return
        device = estimator_device(self.device)
        model = one_model(members).to(device).eval()
        losses = WeightLosses(self.loss_)
        for out, inputs, target in _run_model(model, val_set, 256, device):
            naive = seasonal_naive(inputs["x"], int(self.horizon), self.baseline_season_)
            losses.add(out, naive, target)
        self.baseline_losses_ = losses.losses()
        self.baseline_weight_ = choose_weight(self.baseline_losses_)

    def _windows(self, series: list[Series], train_rows: list[int]):
        """(scalers, training windows, validation windows or None) of `series`, training
        on the first `train_rows[i]` rows of each (scaled by what those rows show) and
        validating on an evenly spaced subset of the windows that forecast the rest."""
        L, H, K = self.lookback_, int(self.horizon), int(self.history_windows)
        log = self.target_transform_ == "log"
        scalers = [
            SeriesScaler.fit(s, rows, log) for s, rows in zip(series, train_rows, strict=True)
        ]
        encoded = [
            encode(s, scaler, self.calendar_, self.static_scaler_)
            for s, scaler in zip(series, scalers, strict=True)
        ]
        train_starts, val_starts = window_starts(
            [len(s) for s in series], train_rows, L, H, fit_plan.min_context(self, L), K * L
        )
        shape = self.covariate_shape_
        train_set = PanelWindows(encoded, train_starts, L, H, shape, K)
        val_windows = val_starts.subset(validation_subset(len(val_starts)))
        val_set = PanelWindows(encoded, val_windows, L, H, shape, K) if len(val_windows) else None
        return scalers, train_set, val_set

    def _train_members(
        self,
        train_set: PanelWindows,
        val_set: PanelWindows | None,
        max_epochs: int,
        epoch_windows: int,
        patience: int,
        center: str,
        mixer: str,
    ) -> TrainedMembers:
        """Train the ensemble's networks (member m from `member_seed`) of `mixer`,
        normalising windows from `center`."""
        L, H, shape = self.lookback_, int(self.horizon), self.covariate_shape_
        model_cfg = self._model_config(self.dim_, self.heads_, self.loss_, center, mixer)
        channels = len(self.target_names_)
        members, history, best_epochs, best_losses = [], [], [], []
        for member in range(self.ensemble_size_):
            network, result, steps_per_epoch = fit_in_memory(
                InMemoryForecastTask(train_set, val_set, channels, shape),
                "forecasting",
                model=dataclasses.asdict(model_cfg),
                data={"dataset": "<in-memory>", "lookback": L, "horizon": H},
                num_train=len(train_set),
                has_validation=val_set is not None,
                settings=self._training_settings(max_epochs, patience, member),
                build_model=lambda: build_forecaster(model_cfg, channels, L, H, shape),
                epoch_examples=epoch_windows,
            )
            members.append(network)
            tag = {"member": member} if self.ensemble_size_ > 1 else {}
            history += [{**entry, **tag} for entry in result.history]
            best_epochs.append(result.best_step // steps_per_epoch)
            best_losses.append(result.best_metric)
        return TrainedMembers(members, history, best_epochs, best_losses)

    def _check_lengths(self, series: list[Series], layout: str, lookback: int, horizon: int):
        if layout == "wide":
            if len(series[0]) < lookback + horizon:
                raise DataError(
                    f"fit: the series has {len(series[0])} rows but lookback + horizon = "
                    f"{lookback} + {horizon} = {lookback + horizon} rows are needed for a "
                    "single training window"
                )
            return
        min_context = fit_plan.min_context(self, lookback)
        need = min_context + horizon
        short = [s.uid for s in series if len(s) < need]
        if short:
            raise DataError(
                f"fit: {len(short)} series have fewer than {need} rows (horizon {horizon} + "
                f"{min_context} observed rows before it), e.g. {short[:5]}; drop them "
                "or lower the horizon"
            )

    # --------------------------------------------------------------------------- predict
    def _contexts(self, y_context, static_df, ids, what: str) -> list[Series]:
        """The histories to forecast from: the fitted series' last rows, or `y_context`."""
        if y_context is None:
            if static_df is not None:
                raise DataError(f"{what}: static_df is read with y_context (new series)")
            chosen = self.ids_ if ids is None else self._known_ids(ids, what)
            return [self.series_[uid].tail for uid in chosen]
        series, layout, columns = self._read(y_context, None, static_df, what, False)
        if layout != self.layout_:
            raise DataError(
                f"{what}: the model was fitted on a {self.layout_} frame, y_context is {layout}"
            )
        if layout == "wide":
            self._check_wide_columns(y_context, columns, what)
            if len(series[0]) < self.lookback_:
                raise DataError(
                    f"{what}: {len(series[0])} rows given, lookback = {self.lookback_} needed"
                )
        else:
            series = self._with_statics(series, static_df, what)
            min_context = fit_plan.min_context(self, self.lookback_)
            short = [s.uid for s in series if len(s) < min_context]
            if short:
                raise DataError(
                    f"{what}: series {short[:5]} have fewer than {min_context} rows of history"
                )
        if ids is not None:
            wanted = set(str(i) for i in ids)
            series = [s for s in series if s.uid in wanted]
            absent = sorted(wanted - {s.uid for s in series})
            if absent:
                raise DataError(f"{what}: y_context has no series {absent[:5]}")
        return series

    def _known_ids(self, ids, what: str) -> list[str]:
        chosen = [str(i) for i in ([ids] if isinstance(ids, str) else ids)]
        unknown = [i for i in chosen if i not in self.series_]
        if unknown:
            raise DataError(
                f"{what}: unknown series {unknown[:5]}; fitted: {self.ids_[:5]}"
                f"{' ...' if len(self.ids_) > 5 else ''} (pass y_context for new series)"
            )
        return chosen

    def _with_statics(self, series: list[Series], static_df, what: str) -> list[Series]:
        """New series take static features from static_df; fitted ones keep theirs."""
        if not self.covariate_shape_.static or static_df is not None:
            return series
        missing = [s.uid for s in series if s.uid not in self.series_]
        if missing:
            raise DataError(f"{what}: series {missing[:5]} were not fitted: pass static_df")
        return [dataclasses.replace(s, static=self.series_[s.uid].tail.static) for s in series]

    def _check_wide_columns(self, data, columns: list[str], what: str) -> None:
        expected = list(self.feature_names_in_)
        if isinstance(data, pd.DataFrame) and columns != expected:
            missing = sorted(set(expected) - set(columns))
            extra = sorted(set(columns) - set(expected))
            raise DataError(
                f"{what}: the columns differ from fit: missing {missing}, unexpected {extra}"
                + ("" if missing or extra else f" (order {columns} instead of {expected})")
            )
        if len(columns) != self.n_features_in_:
            raise DataError(f"{what}: {len(columns)} columns given, {self.n_features_in_} fitted")

    def _scaler_for(self, series: Series) -> SeriesScaler:
        """The fitted scaling of a known series; a new series is scaled by its history."""
        fitted = self.series_.get(series.uid)
        if fitted is not None:
            return fitted.scaler
        return SeriesScaler.fit(series, len(series), self.target_transform_ == "log")

    def _check_positive(self, targets: dict, what: str) -> None:
        """A DataError naming the series whose target rows ({uid: [T, C]}) hold a value a
        log scale cannot take."""
        bad = [uid for uid, values in targets.items() if not (values > 0).all()]
        if bad:
            raise DataError(
                f"{what}: series {bad[:5]} hold zero, negative or missing target values, which "
                "target_transform='log' cannot take; use target_transform=None"
            )

    def horizon_indexes(self, series: list[Series]) -> list[pd.Index]:
        """Per series, the `horizon` time steps after its last one."""
        return [future_index(s.index, s.freq or self.freq_, int(self.horizon)) for s in series]

    def _horizons(self, series: list[Series], futr_df) -> tuple[list[pd.Index], list[np.ndarray]]:
        """Per series: the horizon's index and its future covariates [H, Kf] (raw)."""
        H = int(self.horizon)
        horizons = self.horizon_indexes(series)
        names = list(self._lists().futr)
        if not names:
            if futr_df is not None:
                raise DataError("predict: futr_df given, but futr_exog_list names no columns")
            return horizons, [np.zeros((H, 0)) for _ in series]
        if self.layout_ == "wide":
            return horizons, [wide_future_covariates(futr_df, names, horizons[0])]
        return horizons, long_future_covariates(futr_df, names, series, horizons)

    def _raw_forecast(self, series: list[Series], futr_df) -> tuple[np.ndarray, list[pd.Index]]:
        """Forecasts in original units [S, H, C] (or [S, H, C, Q]), and the horizons."""
        horizons, futures = self._horizons(series, futr_df)
        return self.forecast_series(series, horizons, futures), horizons

    @torch.no_grad()
    def forecast_series(
        self, series: list[Series], horizons: list[pd.Index], futures: list[np.ndarray]
    ) -> np.ndarray:
        """The model's forecasts after each series, in original units: [S, H, C] (or
        [S, H, C, Q] with quantiles). `horizons[i]` is the horizon's index of series i,
        `futures[i]` its future covariates over the horizon [H, Kf] (raw values)."""
        check_is_fitted(self, "model_")
        self._check_series_widths(series)
        L, H = self.lookback_, int(self.horizon)
        need = L if self.layout_ == "wide" else fit_plan.min_context(self, L)
        short = [s.uid for s in series if len(s) < need]
        if short:
            raise DataError(f"{short[:5]}: fewer than {need} rows of history to forecast from")
        tails = [slice(max(0, len(s) - self.context_rows), None) for s in series]
        if self.target_transform_ == "log":
            self._check_positive({s.uid: s.target[t] for s, t in zip(series, tails)}, "predict")
        scalers = [self._scaler_for(s) for s in series]
        encoded = []
        for s, scaler, horizon, futr, tail in zip(
            series, scalers, horizons, futures, tails, strict=True
        ):
            # the horizon's target rows are never read: the last value stands in for them,
            # which any target scale (a log one too) can take
            unknown = np.repeat(s.target[-1:], H, axis=0)
            ahead = Series(
                uid=s.uid,
                index=s.index[tail].append(horizon),
                target=np.concatenate([s.target[tail], unknown]),
                hist=np.concatenate([s.hist[tail], np.zeros((H, s.hist.shape[1]))]),
                futr=np.concatenate([s.futr[tail], futr]),
                static=s.static,
                freq=s.freq,
            )
            encoded.append(encode(ahead, scaler, self.calendar_, self.static_scaler_))
        last = WindowList(np.asarray([(i, len(e) - H - L) for i, e in enumerate(encoded)]))
        windows = PanelWindows(encoded, last, L, H, self.covariate_shape_, self.history_windows)
        outputs = [out.numpy() for out, _ in self._run(windows, 256)]
        # [S, H, C] or [S, H, C, Q], z-scored per series; un-scaled in float64, since a series
        # far from zero (1e8 +- 10) has a float32 resolution coarser than its variation
        out = np.concatenate(outputs).astype(np.float64)
        if self.baseline_weight_ and out.ndim == 3:
            # weighed in where the hold-out weighed it: in each series' scaled units
            m = self.baseline_season_
            lasts = [torch.tensor(sc.target.transform(s.target[-m:]))[None]
                     for s, sc in zip(series, scalers, strict=True)]  # fmt: skip
            naive = torch.cat([seasonal_naive(last, H, m) for last in lasts])
            out = mix(torch.from_numpy(out), naive, self.baseline_weight_).numpy()
        for i, scaler in enumerate(scalers):
            if out.ndim == 4:  # quantiles: un-scale each level
                out[i] = np.stack(
                    [scaler.target.inverse_transform(out[i, ..., q]) for q in range(out.shape[-1])],
                    -1,
                )
            else:
                out[i] = scaler.target.inverse_transform(out[i])
        return out

    def _check_series_widths(self, series: list[Series]) -> None:
        """DataError for a series to forecast whose targets or covariates are not those the
        model was fitted on (every entry point, the adapters' included, comes here)."""
        shape, lists = self.covariate_shape_, self._lists()
        # (what, its width in a series, the width fitted, the fitted names)
        parts = [
            ("target column(s)", lambda s: s.target.shape[1], len(self.target_names_),
             list(self.target_names_)),
            ("historical covariate(s)", lambda s: s.hist.shape[1], shape.hist, list(lists.hist)),
            ("future covariate(s)", lambda s: s.futr.shape[1], shape.futr, list(lists.futr)),
            ("static covariate(s)", lambda s: s.static.shape[0], shape.static,
             list(lists.static)),
        ]  # fmt: skip
        for s in series:
            for part, width, count, names in parts:
                if width(s) != count:
                    named = f" {names}" if names else ""
                    raise DataError(
                        f"predict: series {s.uid!r} has {width(s)} {part}; the model was "
                        f"fitted with {count}{named}"
                    )

    def _as_output(self, values: np.ndarray, series, horizons, as_frame: bool):
        """[S, H, C] -> a wide frame / array (one series) or a long frame."""
        if self.layout_ == "wide":
            if not as_frame:
                return values[0]
            return pd.DataFrame(values[0], index=horizons[0], columns=list(self.target_names_))
        return pd.DataFrame(
            {
                ID: np.repeat([s.uid for s in series], self.horizon),
                TIME: np.concatenate([np.asarray(h) for h in horizons]),
                FORECAST_COLUMN: values[..., 0].reshape(-1),
            }
        )

    def predict(self, y_context=None, futr_df=None, static_df=None, ids=None):
        """Forecast the `horizon` steps after the fitted data, or after `y_context`.

        Wide frame: a DataFrame [horizon, targets] with the future timestamps (an array
        when fitted on an array). Long frame: a long DataFrame (`unique_id`, `ds`,
        "TitansForecaster") for every series, or those in `ids`; `y_context` may hold new
        series (scaled by their own history; a history shorter than the lookback is
        left-padded and masked). `futr_df` gives the future covariates over the horizon
        (wide: indexed by the future timestamps; long: `unique_id`, `ds`, columns).
        With quantiles, the median level is the point forecast (without a 0.5 level, the
        linear interpolation between the levels around it).
        """
        out, as_output = self._forecast(y_context, futr_df, static_df, ids)
        if out.ndim == 4:
            out = point_forecast(torch.as_tensor(out), list(self.quantiles)).numpy()
        return as_output(out)

    def predict_quantiles(
        self, y_context=None, futr_df=None, static_df=None, ids=None
    ) -> dict[float, pd.DataFrame | np.ndarray]:
        """{level: forecast} for every fitted quantile level, each shaped as `predict`'s."""
        check_is_fitted(self, "model_")
        if not self.quantiles:
            raise ValueError("this forecaster was fitted without quantiles; set quantiles=(...)")
        out, as_output = self._forecast(y_context, futr_df, static_df, ids)
        return {level: as_output(out[..., i]) for i, level in enumerate(self.quantiles)}

    def _forecast(self, y_context, futr_df, static_df, ids):
        """(the raw forecast [S, H, C(, Q)] after the fitted data or `y_context`, and the
        function that shapes one [S, H, C] slice of it as predict returns it)."""
        check_is_fitted(self, "model_")
        series = self._contexts(y_context, static_df, ids, "predict")
        out, horizons = self._raw_forecast(series, futr_df)
        as_frame = (
            self._input_is_frame if y_context is None else isinstance(y_context, pd.DataFrame)
        )
        return out, lambda values: self._as_output(values, series, horizons, as_frame)

    # ----------------------------------------------------------------------------- score
    @torch.no_grad()
    def score(self, y, X=None, static_df=None, batch_size: int = 256) -> float:
        """-MSE of the point forecasts over every stride-1 window of every series of `y`,
        on values z-scored by each series' fitted scaling (a new series by its own; their
        logarithm under target_transform "log"), the unit the forecasting benchmarks
        report. Higher is better."""
        check_is_fitted(self, "model_")
        series, layout, columns = self._read(y, X, static_df, "score", False)
        if layout != self.layout_:
            raise DataError(f"score: the model was fitted on a {self.layout_} frame, y is {layout}")
        L, H = self.lookback_, int(self.horizon)
        if layout == "wide":
            self._check_wide_columns(y if X is None else None, columns, "score")
        else:
            series = self._with_statics(series, static_df, "score")
        short = [s.uid for s in series if len(s) < L + H]
        if short and layout == "wide":
            raise DataError(
                f"score: {len(series[0])} rows given, lookback + horizon = {L + H} needed "
                "for one window"
            )
        if short:
            raise DataError(
                f"score: series {short[:5]} are shorter than lookback + horizon = {L + H} "
                "rows (one full window); score the others"
            )
        if self.target_transform_ == "log":
            self._check_positive({s.uid: s.target for s in series}, "score")
        encoded = [
            encode(s, self._scaler_for(s), self.calendar_, self.static_scaler_) for s in series
        ]
        starts, _ = window_starts([len(s) for s in series], [len(s) for s in series], L, H, L)
        windows = PanelWindows(encoded, starts, L, H, self.covariate_shape_, self.history_windows)
        total, count = 0.0, 0
        levels = list(self.quantiles or [])
        for out, inputs, target in _run_model(self.model_, windows, batch_size, self.device_):
            pred = point_forecast(out, levels)
            if self.baseline_weight_:
                naive = seasonal_naive(inputs["x"], H, self.baseline_season_)
                pred = mix(pred, naive, self.baseline_weight_)
            total += float(((pred - target) ** 2).sum())
            count += target.numel()
        return -total / count

    def _run(self, windows: PanelWindows, batch_size: int):
        """(model output as float32 on the CPU, target) per batch of `windows`, in order."""
        for out, _, target in _run_model(self.model_, windows, batch_size, self.device_):
            yield out, target

    # ------------------------------------------------------------------------ save/load
    def save(self, path):
        """Write `path/` with model.safetensors + forecaster.json (no pickle)."""
        check_is_fitted(self, "model_")
        return save_forecaster(self, path)

    @classmethod
    def load(
        cls, path, device: str | None = None, allow_unverified: bool = False
    ) -> TitansForecaster:
        """Rebuild a saved forecaster (weights via safetensors; never unpickles).

        allow_unverified: load a folder that has no manifest (saved before manifests, or
        whose manifest was removed), trusting that its files were not edited."""
        return load_forecaster(cls, path, device, allow_unverified)


def check_same_panel(series: list[Series], ctx: DistContext) -> None:
    """DataError unless every process of a torchrun fit read the same series (compared by
    their ids, lengths and the sum of their values): each trains its share of every batch
    of one panel, so different panels would mix silently."""
    if not ctx.distributed:
        return
    values = float(sum(np.nansum(s.target) for s in series))
    mine = (len(series), sum(len(s) for s in series), values, [s.uid for s in series[:3]])
    every = all_gather_objects(mine, ctx)
    if any(other != every[0] for other in every):
        seen = "; ".join(
            f"process {rank}: {n} series, {rows} rows, sum {total:.6g}, first ids {ids}"
            for rank, (n, rows, total, ids) in enumerate(every)
        )
        raise DataError(
            f"fit: under torchrun every process fits the same panel (each trains its share "
            f"of every batch), but they read different data: {seen}"
        )


def _panel_freq(series: list[Series]) -> str | None:
    """The most common frequency among the series (None when none has one)."""
    freqs = pd.Series([s.freq for s in series if s.freq is not None])
    return freqs.mode().iloc[0] if len(freqs) else None


@torch.no_grad()
def _run_model(model, windows: PanelWindows, batch_size: int, device: str):
    """(output as float32 on the CPU, the batch's inputs on the CPU, target) per batch of
    `windows`, in order."""
    for first in range(0, len(windows), batch_size):
        inputs, target = windows.get_batch(range(first, min(first + batch_size, len(windows))))
        on_device = {k: v.to(device) for k, v in inputs.items()}
        yield run_forecaster(model, on_device).float().cpu(), inputs, target


def member_seed(random_state: int | None, member: int) -> int | None:
    """The seed of an ensemble's `member`-th network: random_state itself for the first
    (a one-network forecaster is seeded as any estimator), for the others a seed drawn from
    (random_state, member). Consecutive seeds (random_state + member) would make the
    ensembles of random_state 0 and 1 share all but one network, so that comparing seeds
    would understate how much the forecast varies with them."""
    if member == 0:
        return random_state
    sequence = np.random.SeedSequence([int(random_state or 0), member])
    return int(sequence.generate_state(1)[0])
