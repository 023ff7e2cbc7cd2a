"""`TitansSktimeForecaster`: a Titans forecaster as an sktime `BaseForecaster`.

    from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster
    net = TitansForecaster(lookback=96, horizon=24, quantiles=(0.1, 0.5, 0.9))
    f = TitansSktimeForecaster(net)
    f.fit(y, fh=[1, 2, 3])           # y: pd.Series / pd.DataFrame, any sktime index
    f.predict(); f.predict_interval(coverage=0.8); f.update(y_new, update_params=False)
    f.fit(y, X=X, fh=[1, 2, 3]).predict(X=X_future)   # exogenous: future covariates

It composes a `TitansForecaster` (the `forecaster` parameter, cloned at fit) rather than
re-listing its options, so sktime's tuning reaches them as `forecaster__dim` etc. Steps beyond
the network's `horizon` are rolled forward (`rollout.roll_forward`). Needs the `sktime` extra.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from sklearn.base import clone

try:
    from sktime.forecasting.base import BaseForecaster, ForecastingHorizon
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "TitansSktimeForecaster needs sktime: pip install 'titans-seq[sktime]'"
    ) from error

from .estimator import TitansForecaster
from .rollout import Ahead, interpolate_quantile, roll_series
from .series_input import ExogLists, wide_series

SKTIME_DEFAULT_LEVELS = (0.05, 0.5, 0.95)
TARGET_PREFIX = "__target_"  # the targets' internal column names, apart from X's


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
        "y_inner_mtype": "pd.DataFrame",
        "X_inner_mtype": "pd.DataFrame",
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
        if X is not None:
            named = {str(c) for c in network.hist_exog_list or []}
            columns = [str(c) for c in X.columns]
            hist = [c for c in columns if c in named]
            futr = [c for c in columns if c not in named]
            network.set_params(hist_exog_list=hist or None, futr_exog_list=futr or None)
        self._seen, self._seen_X = y, X
        self.forecaster_ = network.fit(self._frame(y, X, network))
        return self

    def _frame(self, y: pd.DataFrame, X, network: TitansForecaster) -> pd.DataFrame:
        """The estimator's wide frame: targets, then X's columns. sktime owns the index
        (Period, Range, Datetime, ...): the rows are positions unless calendar features
        need timestamps."""
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

    def _update(self, y: pd.DataFrame, X=None, update_params=True):
        if (X is None) != (self._seen_X is None):
            raise ValueError("update: give X exactly when fit was given X")
        self._seen = pd.concat([self._seen, y])
        keep = ~self._seen.index.duplicated(keep="last")
        self._seen = self._seen[keep]
        if X is not None:
            self._seen_X = pd.concat([self._seen_X, X])
            self._seen_X = self._seen_X[~self._seen_X.index.duplicated(keep="last")]
        if update_params:
            network = clone(self.forecaster_)
            self.forecaster_ = network.fit(self._frame(self._seen, self._seen_X, network))
        return self

    def _steps(self, fh) -> tuple[np.ndarray, int]:
        relative = np.asarray(fh.to_relative(self.cutoff), dtype=int)
        if (relative < 1).any():
            raise ValueError(
                f"in-sample steps {relative[relative < 1].tolist()} cannot be forecast: "
                "TitansSktimeForecaster forecasts only after the data it has seen"
            )
        return relative, int(relative.max())

    def _roll(self, fh, X):
        """(steps asked for, relative to the cutoff; the rolled forecast of every step up
        to the farthest: point [steps, C], quantile levels or None)."""
        relative, steps = self._steps(fh)
        net = self.forecaster_
        lookback = net.lookback
        seen_X = None if self._seen_X is None else self._seen_X.iloc[-lookback:]
        frame = self._frame(self._seen.iloc[-lookback:], seen_X, net)
        lists = ExogLists.of(net.hist_exog_list, net.futr_exog_list, None)
        series, _ = wide_series(frame, lists, "error", "predict")
        ahead = None
        if self._seen_X is not None:
            ahead = [self._ahead(X, steps, lists)]
        point, levels = roll_series(net, [series], steps, ahead)
        levels = None if levels is None else {q: v[0] for q, v in levels.items()}
        return relative, point[0], levels

    def _ahead(self, X, steps: int, lists: ExogLists) -> Ahead:
        """The exogenous values over steps 1..steps after the cutoff. sktime passes X at
        the steps asked for; the steps between them (which a rolled forecast also reads)
        are interpolated linearly from the given ones and the last seen row, with a
        warning that counts them."""
        if X is None:
            raise ValueError(
                f"the forecaster was fitted with X: pass X over the forecast steps 1..{steps}"
            )
        wanted = ForecastingHorizon(np.arange(1, steps + 1), is_relative=True)
        index = wanted.to_absolute_index(self.cutoff)
        rows = X.reindex(index)
        rows.columns = [str(c) for c in rows.columns]
        absent = rows.isna().any(axis=1).to_numpy()
        if absent.any():
            last = self._seen_X.iloc[-1:].set_axis([str(c) for c in self._seen_X.columns], axis=1)
            positions = pd.concat([last, rows]).reset_index(drop=True)
            rows = positions.interpolate(limit_direction="both").iloc[1:].set_axis(index)
            warnings.warn(
                f"X was not given at {int(absent.sum())} of the forecast steps 1..{steps} "
                "that a rolled forecast reads; they were interpolated from the steps around "
                "them",
                UserWarning,
                stacklevel=4,
            )
        return Ahead(
            rows[list(lists.hist)].to_numpy(np.float64),
            rows[list(lists.futr)].to_numpy(np.float64),
        )

    def _predict(self, fh, X=None) -> pd.DataFrame:
        relative, point, _ = self._roll(fh, X)
        index = fh.to_absolute_index(self.cutoff)
        return pd.DataFrame(point[relative - 1], index=index, columns=self._seen.columns)

    def _predict_quantiles(self, fh, X, alpha) -> pd.DataFrame:
        relative, _, levels = self._roll(fh, X)
        if levels is None:
            raise ValueError("the forecaster was fitted without quantiles; set quantiles=(...)")
        columns, blocks = [], []
        for name_index, name in enumerate(self._seen.columns):
            for a in alpha:
                columns.append((name, a))
                blocks.append(interpolate_quantile(levels, a)[relative - 1, name_index])
        return pd.DataFrame(
            np.stack(blocks, axis=1),
            index=fh.to_absolute_index(self.cutoff),
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
