"""`TitansSktimeForecaster`: a Titans forecaster as an sktime `BaseForecaster`.

    from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster
    net = TitansForecaster(lookback=96, horizon=24, quantiles=(0.1, 0.5, 0.9))
    f = TitansSktimeForecaster(net)
    f.fit(y, fh=[1, 2, 3])           # y: pd.Series / pd.DataFrame, any sktime index
    f.predict(); f.predict_interval(coverage=0.8); f.update(y_new, update_params=False)

It composes a `TitansForecaster` (the `forecaster` parameter, cloned at fit) rather than
re-listing its options, so sktime's tuning reaches them as `forecaster__dim` etc. Steps beyond
the network's `horizon` are rolled forward (`rollout.roll_forward`). Needs the `sktime` extra.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import clone

try:
    from sktime.forecasting.base import BaseForecaster
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "TitansSktimeForecaster needs sktime: pip install 'titans-seq[sktime]'"
    ) from error

from .estimator import TitansForecaster
from .rollout import interpolate_quantile, roll_forward

SKTIME_DEFAULT_LEVELS = (0.05, 0.5, 0.95)


class TitansSktimeForecaster(BaseForecaster):
    """sktime forecaster around a `TitansForecaster` (univariate or multivariate y).

    Parameters:
        forecaster: an unfitted TitansForecaster holding the model and training options
            (None: TitansForecaster() with its defaults). Give it `quantiles` for
            `predict_quantiles` / `predict_interval`; the levels of sktime's defaults
            (0.05, 0.5, 0.95) are fitted beside them.

    Fitted attributes: forecaster_ (the fitted TitansForecaster).

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
        "capability:exogenous": False,
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
        # arrays in, arrays out: sktime owns the index (Period, Range, Datetime, ...)
        self.forecaster_ = network.fit(y.to_numpy(np.float64))
        self._seen = y
        return self

    def _update(self, y: pd.DataFrame, X=None, update_params=True):
        self._seen = pd.concat([self._seen, y])
        self._seen = self._seen[~self._seen.index.duplicated(keep="last")]
        if update_params:
            self.forecaster_ = clone(self.forecaster_).fit(self._seen.to_numpy(np.float64))
        return self

    def _steps(self, fh) -> tuple[np.ndarray, int]:
        relative = np.asarray(fh.to_relative(self.cutoff), dtype=int)
        if (relative < 1).any():
            raise ValueError(
                f"in-sample steps {relative[relative < 1].tolist()} cannot be forecast: "
                "TitansSktimeForecaster forecasts only after the data it has seen"
            )
        return relative, int(relative.max())

    def _context(self) -> np.ndarray:
        return self._seen.to_numpy(np.float64)[-self.forecaster_.lookback :]

    def _predict(self, fh, X=None) -> pd.DataFrame:
        relative, steps = self._steps(fh)
        point, _ = roll_forward(self.forecaster_, self._context(), steps)
        index = fh.to_absolute_index(self.cutoff)
        return pd.DataFrame(point[relative - 1], index=index, columns=self._seen.columns)

    def _predict_quantiles(self, fh, X, alpha) -> pd.DataFrame:
        relative, steps = self._steps(fh)
        _, levels = roll_forward(self.forecaster_, self._context(), steps)
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
