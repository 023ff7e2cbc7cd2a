"""`TitansSktimeForecaster`: a Titans forecaster as an sktime `BaseForecaster`.

    from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster
    net = TitansForecaster(lookback=96, horizon=24, quantiles=(0.1, 0.5, 0.9))
    f = TitansSktimeForecaster(net)
    f.fit(y, fh=[1, 2, 3])           # y: pd.Series / pd.DataFrame, any sktime index
    f.predict(); f.predict_interval(coverage=0.8); f.update(y_new, update_params=False)
    f.fit(y, X=X, fh=[1, 2, 3]).predict(X=X_future)   # exogenous: future covariates
    f.fit(panel, fh=[1, 2, 3])       # pd-multiindex (instance, time): one global model

It composes a `TitansForecaster` (the `forecaster` parameter, cloned at fit) rather than
re-listing its options, so sktime's tuning reaches them as `forecaster__dim` etc. Steps beyond
the network's `horizon` are rolled forward (`rollout.roll_forward`). Needs the `sktime` extra.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from pandas.tseries.frequencies import to_offset
from sklearn.base import clone

try:
    from sktime.forecasting.base import BaseForecaster, ForecastingHorizon
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "TitansSktimeForecaster needs sktime: pip install 'titans-seq[sktime]'"
    ) from error

from titans_seq.data import DataError
from titans_seq.data.frames import infer_frequency

from .estimator import TitansForecaster
from .horizon_inputs import future_index
from .rollout import Ahead, interpolate_quantile, roll_series
from .series_input import ExogLists, Series, check_named_columns, wide_series

SKTIME_DEFAULT_LEVELS = (0.05, 0.5, 0.95)
TARGET_PREFIX = "__target_"  # the targets' internal column names, apart from X's


def _columns(frame: pd.DataFrame | None, names) -> np.ndarray:
    """[T, len(names)] values of the named columns (matched as strings)."""
    if frame is None:
        return None
    lookup = {str(c): c for c in frame.columns}
    return frame[[lookup[n] for n in names]].to_numpy(np.float64)


def _appended(seen: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """`seen` with `new`'s rows added (a repeated time step keeps the newer row)."""
    both = pd.concat([seen, new])
    both = both[~both.index.duplicated(keep="last")]
    return both.sort_index() if isinstance(both.index, pd.MultiIndex) else both


def _by_instance(values: np.ndarray, columns: int) -> np.ndarray:
    """[S, steps, 1] of S = instances x columns univariate series (instance-major) ->
    [instances, steps, columns]."""
    steps = values.shape[1]
    return values[..., 0].reshape(-1, columns, steps).transpose(0, 2, 1)


def _times_after(index: pd.Index, steps: int, cutoff: pd.Index) -> pd.Index:
    """The `steps` time steps after an instance's last time, in its index's kind."""
    if isinstance(index, pd.PeriodIndex):
        return pd.period_range(index[-1] + 1, periods=steps, freq=index.freq)
    return future_index(index, getattr(cutoff, "freq", None), steps)


def _timestamps(index: pd.Index) -> pd.DatetimeIndex:
    if isinstance(index, pd.PeriodIndex):
        return index.to_timestamp()
    if isinstance(index, pd.DatetimeIndex):
        return index
    raise ValueError("calendar features need y with a DatetimeIndex or PeriodIndex")


class TitansSktimeForecaster(BaseForecaster):
    """sktime forecaster around a `TitansForecaster` (univariate or multivariate y).

    Parameters:
        forecaster: an unfitted TitansForecaster holding the model and training options
            (None: TitansForecaster() with its defaults). Give it `quantiles` for
            `predict_quantiles` / `predict_interval`; the levels of sktime's defaults
            (0.05, 0.5, 0.95) are fitted beside them.

    Fitted attributes: forecaster_ (the fitted TitansForecaster).

    Exogenous `X`: its columns are future covariates (sktime passes X over the forecast
    horizon to `predict`), except those the forecaster's `hist_exog_list` names, which are
    historical (their values over the horizon are read only to roll a forecast past the
    first block). `predict` needs X at every step from 1 to the farthest one asked for.
    Calendar features (`calendar=`) need a DatetimeIndex or PeriodIndex.

    `update(y, update_params=False)` only extends the context the next forecast starts from;
    `update_params=True` refits a fresh network on all the data seen so far.

    Examples:
        >>> import numpy as np, pandas as pd
        >>> from titans_seq.domains.forecasting import TitansForecaster
        >>> from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster
        >>> months = pd.period_range("2024-01", periods=60, freq="M")
        >>> y = pd.Series(np.sin(np.arange(60) / 4.0), index=months)
        >>> net = TitansForecaster(lookback=12, horizon=4, dim=8, depth=1, heads=1, patch_len=4,
        ...                        stride=4, max_epochs=1, device="cpu", random_state=0)
        >>> forecast = TitansSktimeForecaster(net).fit(y, fh=[1, 2, 6]).predict()
        >>> [str(p) for p in forecast.index]
        ['2029-01', '2029-02', '2029-06']
    """

    _tags = {
        "authors": ["titans-seq"],
        "python_dependencies": ["torch"],
        "y_inner_mtype": ["pd.DataFrame", "pd-multiindex"],
        "X_inner_mtype": ["pd.DataFrame", "pd-multiindex"],
        "scitype:y": "both",
        "capability:multivariate": True,
        "capability:exogenous": True,
        "capability:insample": False,
        "capability:pred_int": True,
        "capability:pred_int:insample": False,
        "capability:missing_values": False,
        "requires-fh-in-fit": False,
        "capability:update": True,
    }
    # the context and the data a refit needs are kept here (_seen), not in sktime's _y; a
    # class default, so that no construction or clone meets sktime's warning about it
    _config = {"remember_data": False}

    def __init__(self, forecaster: TitansForecaster | None = None):
        self.forecaster = forecaster
        super().__init__()
        # what sktime's base keeps when a user turns remember_data on again
        self._y = self._X = None
        quantiles = getattr(forecaster, "quantiles", None)
        self.set_tags(**{"capability:pred_int": bool(quantiles)})

    def _fit(self, y: pd.DataFrame, X=None, fh=None):
        template = TitansForecaster() if self.forecaster is None else self.forecaster
        network = clone(template)
        if network.quantiles:
            # sktime's defaults (predict_interval's coverage 0.9, predict_quantiles' and
            # PinballLoss's 0.05 / 0.95) are fitted beside the levels the forecaster names
            levels = sorted({*map(float, network.quantiles), *SKTIME_DEFAULT_LEVELS})
            network.set_params(quantiles=tuple(levels))
        named = [str(c) for c in network.hist_exog_list or []]
        if X is None and named:
            raise DataError(
                f"fit: the forecaster's hist_exog_list names {named}, but no X was given"
            )
        if X is not None:
            check_named_columns(named, X.columns, "fit: X")
            columns = [str(c) for c in X.columns]
            hist = [c for c in columns if c in named]
            futr = [c for c in columns if c not in named]
            network.set_params(hist_exog_list=hist or None, futr_exog_list=futr or None)
        self._seen, self._seen_X = y, X
        self._keep_frequency()
        self.forecaster_ = network.fit(self._training_frame(y, X, network))
        return self

    # ------------------------------------------------------------------ sktime -> frames
    def _training_frame(self, y: pd.DataFrame, X, network: TitansForecaster) -> pd.DataFrame:
        """The estimator's input: a wide frame for one series; for panel data
        (pd-multiindex) a long frame with one series per instance and column, so that one
        global model learns from all of them."""
        if not isinstance(y.index, pd.MultiIndex):
            return self._wide(y, X, network)
        rows = []
        for _, uid, column, y_k, X_k in self._panel_parts(y, X):
            part = pd.DataFrame(
                {
                    "unique_id": uid,
                    "ds": self._time(y_k.index, network),
                    "y": y_k[column].to_numpy(),
                }
            )
            if X_k is not None:
                for name, values in zip(X_k.columns, X_k.to_numpy(np.float64).T, strict=True):
                    part[str(name)] = values
            rows.append(part)
        return pd.concat(rows, ignore_index=True)

    def _wide(self, y: pd.DataFrame, X, network: TitansForecaster) -> pd.DataFrame:
        """Targets, then X's columns. sktime owns the index (Period, Range, Datetime, ...):
        the rows are positions unless calendar features need timestamps."""
        targets = [f"{TARGET_PREFIX}{i}" for i in range(y.shape[1])]
        frame = pd.DataFrame(y.to_numpy(np.float64), columns=targets)
        if X is not None:
            if len(X) != len(y) or not X.index.equals(y.index):
                raise ValueError("X must have the same index as y")
            covariates = pd.DataFrame(X.to_numpy(np.float64), columns=[str(c) for c in X.columns])
            frame = pd.concat([frame, covariates], axis=1)
        if network.calendar is not None:
            frame.index = _timestamps(y.index)
        return frame

    @staticmethod
    def _time(index: pd.Index, network: TitansForecaster):
        """A series' ds: its timestamps when calendar features need them, else integer
        steps that end at 0."""
        if network.calendar is not None:
            return _timestamps(index)
        return np.arange(1 - len(index), 1)

    def _panel_parts(self, y: pd.DataFrame, X):
        """(instance, unique_id, column, y of the instance, X of the instance) per series."""
        if y.index.nlevels != 2:
            raise ValueError("panel data needs a two-level index (instance, time)")
        for k in y.index.get_level_values(0).unique():
            y_k = y.xs(k, level=0)
            X_k = None if X is None else X.xs(k, level=0)
            if X_k is not None and not X_k.index.equals(y_k.index):
                raise ValueError(f"X of instance {k!r} must have the same time index as y")
            for column in y.columns:
                uid = str(k) if y.shape[1] == 1 else f"{k}/{column}"
                yield k, uid, column, y_k, X_k

    def _update(self, y: pd.DataFrame, X=None, update_params=True):
        if (X is None) != (self._seen_X is None):
            raise ValueError("update: give X exactly when fit was given X")
        self._seen = _appended(self._seen, y)
        self._keep_frequency()
        if X is not None:
            self._seen_X = _appended(self._seen_X, X)
        if update_params:
            network = clone(self.forecaster_)
            self.forecaster_ = network.fit(self._training_frame(self._seen, self._seen_X, network))
        return self

    # -------------------------------------------------------------------------- forecasts
    def _keep_frequency(self) -> None:
        """Give the cutoff the data's frequency. sktime reads it from a single series'
        index, but the time level of a pd-multiindex frame carries none, and a forecasting
        horizon needs one to turn steps into times (and times into steps)."""
        cutoff = self.cutoff
        if isinstance(cutoff, pd.DatetimeIndex) and cutoff.freq is None:
            freqs = self._frequencies()
            if len(freqs) == 1:
                self._set_cutoff(pd.DatetimeIndex(cutoff, freq=next(iter(freqs))))

    def _frequencies(self) -> set:
        """The regular frequencies of the seen series' time indexes (one per instance)."""
        index = self._seen.index
        if isinstance(index, pd.MultiIndex):
            times = [self._seen.xs(k, level=0).index for k in index.get_level_values(0).unique()]
        else:
            times = [index]
        return {to_offset(f) for f in map(infer_frequency, times) if f is not None}

    def _clock(self) -> pd.Index:
        """The cutoff, with a frequency when its times are timestamps."""
        cutoff = self.cutoff
        if isinstance(cutoff, pd.DatetimeIndex) and cutoff.freq is None:
            found = sorted(f.freqstr for f in self._frequencies()) or "none"
            raise ValueError(
                f"the time index has no single regular frequency (found: {found}); a "
                "forecasting horizon needs one: fit one forecaster per frequency, or give "
                "the series a regular index"
            )
        return cutoff

    def _steps(self, fh) -> tuple[np.ndarray, int]:
        relative = np.asarray(fh.to_relative(self._clock()), dtype=int)
        if (relative < 1).any():
            raise ValueError(
                f"in-sample steps {relative[relative < 1].tolist()} cannot be forecast: "
                "TitansSktimeForecaster forecasts only after the data it has seen"
            )
        return relative, int(relative.max())

    def _roll(self, fh, X):
        """(steps asked for, relative to the cutoff; the rolled forecast of every step up
        to the farthest per series: point [S, steps, C], levels {q: [S, steps, C]} or None).
        S = 1 for a single series; one per (instance, column) for panel data."""
        relative, steps = self._steps(fh)
        net = self.forecaster_
        lists = ExogLists.of(net.hist_exog_list, net.futr_exog_list, None)
        has_x = self._seen_X is not None
        if has_x and X is not None:
            self._check_future_X(X, lists)
        if not isinstance(self._seen.index, pd.MultiIndex):
            seen_X = self._seen_X.iloc[-net.context_rows :] if has_x else None
            frame = self._wide(self._seen.iloc[-net.context_rows :], seen_X, net)
            series = [wide_series(frame, lists, "error", "predict")[0]]
            ahead = [self._ahead(X, self._seen_X, steps, lists)] if has_x else None
            return relative, *roll_series(net, series, steps, ahead)
        # an instance that ends before the cutoff forecasts its own steps up to it first
        parts = list(self._panel_parts(self._seen, self._seen_X))
        lags = {key: self._lag(y_k.index) for key, _, _, y_k, _ in parts}
        total = steps + max(lags.values())
        series, ahead, X_future = [], [], {}
        for key, uid, column, y_k, X_k in parts:
            tail = y_k.iloc[-net.context_rows :]
            x_tail = X_k.iloc[-len(tail) :] if has_x else None
            series.append(
                Series.of(
                    uid,
                    pd.Index(self._time(y_k.index, net)[-len(tail) :]),
                    tail[[column]].to_numpy(np.float64),
                    hist=_columns(x_tail, lists.hist) if lists.hist else None,
                    futr=_columns(x_tail, lists.futr) if lists.futr else None,
                )
            )
            if has_x:
                if key not in X_future:
                    given = None if X is None else X.xs(key, level=0)
                    times = _times_after(y_k.index, total, self._clock())
                    X_future[key] = self._ahead(given, X_k, total, lists, times)
                ahead.append(X_future[key])
        point, levels = roll_series(net, series, total, ahead if has_x else None)
        columns = self._seen.shape[1]
        offsets = [lags[key] for key, *_ in parts]  # one per series

        def aligned(values):  # [S, total, 1] -> [I, steps, C], each from its own lag
            shifted = np.stack([v[o : o + steps] for v, o in zip(values, offsets, strict=True)])
            return _by_instance(shifted, columns)

        if levels is not None:
            levels = {q: aligned(v) for q, v in levels.items()}
        return relative, aligned(point), levels

    def _check_future_X(self, X: pd.DataFrame, lists: ExogLists) -> None:
        """DataError for an X at predict that lacks a column or (panel data) an instance
        that fit was given."""
        check_named_columns(lists.temporal, X.columns, "predict: X")
        if isinstance(self._seen.index, pd.MultiIndex):
            if not isinstance(X.index, pd.MultiIndex):
                raise DataError("predict: X must have the (instance, time) index of the panel")
            fitted = list(self._seen.index.get_level_values(0).unique())
            given = set(X.index.get_level_values(0).unique())
            absent = [k for k in fitted if k not in given]
            if absent:
                raise DataError(
                    f"predict: X has no rows for instance(s) {absent[:5]}; give X for every "
                    f"instance the forecaster was fitted on ({len(fitted)})"
                )

    def _lag(self, index: pd.Index) -> int:
        """Steps from an instance's last time to the cutoff (0 when it ends there)."""
        clock = self._clock()
        last, cutoff = index[-1], clock[0]
        if last == cutoff:
            return 0
        if isinstance(index, pd.PeriodIndex):
            return int((cutoff - last).n)
        if isinstance(index, pd.DatetimeIndex):
            return len(pd.date_range(last, cutoff, freq=clock.freq)) - 1
        return int(cutoff - last)

    def _ahead(self, X, seen_X, steps: int, lists: ExogLists, index=None) -> Ahead:
        """The exogenous values over steps 1..steps after the cutoff. sktime passes X at
        the steps asked for; the steps between them (which a rolled forecast also reads)
        are interpolated linearly from the given ones and the last seen row, with a
        warning that counts them."""
        if X is None:
            raise ValueError(
                f"the forecaster was fitted with X: pass X over the forecast steps 1..{steps}"
            )
        if index is None:
            wanted = ForecastingHorizon(np.arange(1, steps + 1), is_relative=True)
            index = wanted.to_absolute_index(self._clock())
        rows = X.reindex(index)
        rows.columns = [str(c) for c in rows.columns]
        absent = rows.isna().any(axis=1).to_numpy()
        if absent.any():
            last = seen_X.iloc[-1:].set_axis([str(c) for c in seen_X.columns], axis=1)
            positions = pd.concat([last, rows]).reset_index(drop=True)
            rows = positions.interpolate(limit_direction="both").iloc[1:].set_axis(index)
            warnings.warn(
                f"X was not given at {int(absent.sum())} of the forecast steps 1..{steps} "
                "that a rolled forecast reads; they were interpolated from the steps around "
                "them",
                UserWarning,
                stacklevel=4,
            )
        return Ahead(_columns(rows, lists.hist), _columns(rows, lists.futr))

    def _output_index(self, fh) -> pd.Index:
        """The forecast's rows: fh's absolute steps, per instance for panel data."""
        times = fh.to_absolute_index(self._clock())
        if not isinstance(self._seen.index, pd.MultiIndex):
            return times
        instances = self._seen.index.get_level_values(0).unique()
        return pd.MultiIndex.from_product([instances, times], names=self._seen.index.names)

    def _predict(self, fh, X=None) -> pd.DataFrame:
        relative, point, _ = self._roll(fh, X)  # [I, steps, C]
        values = point[:, relative - 1].reshape(-1, point.shape[-1])
        return pd.DataFrame(values, index=self._output_index(fh), columns=self._seen.columns)

    def _predict_quantiles(self, fh, X, alpha) -> pd.DataFrame:
        relative, _, levels = self._roll(fh, X)
        if levels is None:
            raise ValueError("the forecaster was fitted without quantiles; set quantiles=(...)")
        columns, blocks = [], []
        for name_index, name in enumerate(self._seen.columns):
            for a in alpha:
                columns.append((name, a))
                values = interpolate_quantile(levels, a)[:, relative - 1, name_index]
                blocks.append(values.reshape(-1))
        return pd.DataFrame(
            np.stack(blocks, axis=1),
            index=self._output_index(fh),
            columns=pd.MultiIndex.from_tuples(columns),
        )

    @classmethod
    def get_test_params(cls, parameter_set="default"):
        """Small, fast settings for sktime's conformance suite (one epoch, a tiny network)."""
        tiny = dict(
            lookback=8,
            horizon=3,
            dim=8,
            depth=1,
            heads=1,
            patch_len=4,
            stride=4,
            ensemble_size=1,
            max_epochs=1,
            batch_size=16,
            mixer_options={"chunk_size": 4},
            device="cpu",
            random_state=0,
        )
        levels = (0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95)
        return [
            {"forecaster": TitansForecaster(**tiny)},
            {"forecaster": TitansForecaster(**tiny, quantiles=levels)},
        ]
