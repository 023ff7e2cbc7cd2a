"""`TitansDartsModel`: a Titans forecaster as a darts `GlobalForecastingModel`.

    from darts import TimeSeries
    from titans_seq.domains.forecasting.darts_model import TitansDartsModel
    model = TitansDartsModel(TitansForecaster(lookback=96, horizon=24)).fit(train)
    model.predict(48)                                  # rolled forward past the horizon
    model.historical_forecasts(series, start=0.8, forecast_horizon=24, retrain=False)
    model.backtest(series, start=0.8, forecast_horizon=24, retrain=False)
    model.fit([s1, s2, s3], past_covariates=[p1, p2, p3], future_covariates=[f1, f2, f3])

darts is the adapter's host because its backtesting (`historical_forecasts`, `backtest`,
`residuals`) runs any model that implements `fit`/`predict`, and a global model may forecast
any series from its own history: a trained network backtests without refitting
(`retrain=False`), which is how users of darts' own torch models evaluate them. darts also
wraps neuralforecast's models, so its users meet both libraries there. Needs the `darts` extra.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from sklearn.base import clone

from titans_seq.checks import check_int
from titans_seq.training.checkpoint import atomic_write_text
from titans_seq.training.model_folder import require_listed, verify_folder, write_manifest

try:
    from darts import TimeSeries
    from darts.models.forecasting.forecasting_model import GlobalForecastingModel
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("TitansDartsModel needs darts: pip install 'titans-seq[darts]'") from error

from .darts_inputs import (
    FUTURE,
    PAST,
    ahead,
    covariate_names,
    history,
    long_frames,
    wide_frame,
)
from .data_defaults import AUTO
from .estimator import TitansForecaster
from .fit_plan import shortest_lookback
from .rollout import roll_series

FORECASTER_DIR = "forecaster"
SERIES_FILE = "training_series.json"
COVARIATE_FILES = {"past": "past_covariates.json", "future": "future_covariates.json"}


def _template_forecaster(
    forecaster: TitansForecaster | None, darts_named: dict, params: dict
) -> TitansForecaster:
    """The unfitted forecaster a model trains: `forecaster`, or one built from parameters
    (darts' names already mapped to the forecaster's in `darts_named`; None: not given)."""
    given = {name: value for name, value in darts_named.items() if value is not None}
    clashes = sorted(set(given) & set(params))
    if clashes:
        raise TypeError(
            f"TitansDartsModel: {clashes} given twice, by darts' name and by TitansForecaster's"
        )
    params = {**params, **given}
    if forecaster is None:
        unknown = sorted(set(params) - set(TitansForecaster().get_params()))
        if unknown:
            raise TypeError(
                f"TitansDartsModel: {unknown} are not TitansForecaster parameters "
                f"(darts' names taken: input_chunk_length, output_chunk_length, n_epochs)"
            )
        return TitansForecaster(**params)
    if not isinstance(forecaster, TitansForecaster):
        raise TypeError(
            f"TitansDartsModel wraps a TitansForecaster, got {type(forecaster).__name__}"
        )
    if params:
        raise TypeError(
            f"TitansDartsModel: give either a forecaster or its parameters, not both "
            f"(got a forecaster and {sorted(params)})"
        )
    return forecaster


class TitansDartsModel(GlobalForecastingModel):
    """darts global model around a `TitansForecaster`, with past, future and static covariates.

    Parameters:
        forecaster: an unfitted TitansForecaster with the model and training options (None:
            the defaults); cloned at fit, so `untrained_model()` and retraining start fresh.
        input_chunk_length, output_chunk_length, n_epochs, **forecaster_params: instead of
            a forecaster, its parameters with darts' names for the three that darts' torch
            models share (`lookback`, `horizon`, `max_epochs`) and `TitansForecaster`'s own
            names for the rest: `TitansDartsModel(input_chunk_length=96,
            output_chunk_length=24, n_epochs=5, mixer="mag", random_state=0)`.

    `fit` takes one (multivariate) series, or several univariate series for one global
    model (the forecaster's long layout: each series scaled by its own statistics, series
    shorter than lookback + horizon left-padded), with `past_covariates` (historical
    exogenous), `future_covariates` (known over the horizon) and, for several series, the
    series' numeric static covariates. `predict(n, series=...)` forecasts any series with the
    fitted network (given its covariates: future ones over the `n` steps, past ones over the
    steps past the first `horizon` block when `n > horizon`).
    A forecaster with a quantile head (`TitansForecaster(quantiles=(0.1, 0.5, 0.9))`) is
    probabilistic: `predict(n, num_samples=k)` draws k samples per step and component from its
    quantile function (linear between the fitted levels, flat beyond the outermost ones, so
    tails past them are not represented; steps drawn independently), and
    `predict(n, predict_likelihood_parameters=True)` (n <= horizon) returns the quantiles
    themselves as components `<component>_q<level>`, as darts' quantile models name them.
    Without a quantile head forecasts are deterministic (`num_samples=1`). `save` / `load`
    write and read a folder without pickle (darts' own format unpickles).
    """

    def __init__(
        self,
        forecaster: TitansForecaster | None = None,
        input_chunk_length: int | None = None,
        output_chunk_length: int | None = None,
        n_epochs: int | None = None,
        **forecaster_params,
    ):
        super().__init__(add_encoders=None)
        self.forecaster = forecaster
        self._template = _template_forecaster(
            forecaster,
            {
                "lookback": input_chunk_length,
                "horizon": output_chunk_length,
                "max_epochs": n_epochs,
            },
            forecaster_params,
        )

    # ---------------------------------------------------------------- what the model is
    @property
    def supports_multivariate(self) -> bool:
        return True

    @property
    def supports_past_covariates(self) -> bool:
        return True

    @property
    def supports_future_covariates(self) -> bool:
        return True

    @property
    def supports_static_covariates(self) -> bool:
        return True

    @property
    def supports_probabilistic_prediction(self) -> bool:
        return bool(self._template.quantiles)

    @property
    def supports_likelihood_parameter_prediction(self) -> bool:
        return bool(self._template.quantiles)

    @property
    def supports_optimized_historical_forecasts(self) -> bool:
        return False

    @property
    def supports_sample_weight(self) -> bool:
        return False

    def _lookback(self) -> int:
        """The fitted forecaster's lookback; before fit the template's, or for "auto" the
        shortest it can choose (one patch), so that darts' length checks admit what the
        forecaster accepts."""
        fitted = getattr(self, "forecaster_", None)
        if fitted is not None:
            return fitted.lookback_
        template = self._template
        return shortest_lookback(template) if template.lookback == AUTO else int(template.lookback)

    @property
    def input_chunk_length(self) -> int:
        return self._lookback()

    @property
    def output_chunk_length(self) -> int:
        return self._template.horizon

    @property
    def min_train_series_length(self) -> int:
        return self._lookback() + self._template.horizon

    @property
    def min_train_samples(self) -> int:
        return 1

    @property
    def _target_window_lengths(self) -> tuple[int, int]:
        return self._lookback(), self._template.horizon

    @property
    def extreme_lags(self):
        # reads the last `lookback` rows (and past covariates there), forecasts `horizon`
        # rows, reads future covariates over the lookback and the horizon
        L, H = self._lookback(), self._template.horizon
        past = (-L, -1) if getattr(self, "_uses_past_covariates", False) else (None, None)
        future = (-L, H - 1) if getattr(self, "_uses_future_covariates", False) else (None, None)
        return -L, H - 1, *past, *future, 0

    def _model_encoder_settings(self):
        return None, None, False, False, None, None

    # ------------------------------------------------------------------- fit and predict
    def fit(self, series, past_covariates=None, future_covariates=None, verbose=None, **kwargs):
        """Train the network on one series or several (a TimeSeries or a sequence), with
        matching covariate series (one per target series)."""
        if kwargs.get("sample_weight") is not None:
            raise ValueError("TitansDartsModel takes no sample weights")
        many = [series] if isinstance(series, TimeSeries) else list(series)
        pasts = _matching(past_covariates, len(many), "past_covariates")
        futures = _matching(future_covariates, len(many), "future_covariates")
        if len(many) == 1:  # a sequence of one is that series
            series, past_covariates, future_covariates = many[0], pasts[0], futures[0]
        super().fit(series, past_covariates, future_covariates)
        network = clone(self._template).set_params(
            hist_exog_list=covariate_names(pasts[0], PAST) or None,
            futr_exog_list=covariate_names(futures[0], FUTURE) or None,
        )
        if len(many) == 1:
            self._values(many[0], "fit")
            network.fit(wide_frame(many[0], pasts[0], futures[0]))
        else:
            frame, statics = long_frames(many, pasts, futures)
            if statics is not None:
                network.set_params(stat_exog_list=[c for c in statics.columns if c != "unique_id"])
            network.fit(frame, static_df=statics)
        self.forecaster_ = network
        return self

    def predict(
        self,
        n: int,
        series=None,
        past_covariates=None,
        future_covariates=None,
        num_samples: int = 1,
        verbose=None,
        predict_likelihood_parameters: bool = False,
        show_warnings: bool = True,
        random_state=None,
        **kwargs,
    ):
        """The `n` steps after `series` (default: the training series), one per input series."""
        check_int("predict: n (the steps to forecast)", n, 1)
        check_int("predict: num_samples", num_samples, 1)
        if series is None:
            if getattr(self, "training_series", None) is None:
                raise ValueError(
                    "this model holds no training series (fitted on several, or saved with "
                    "clean=True): pass the series to forecast, predict(n, series=...)"
                )
            series = self.training_series
            past_covariates = past_covariates or getattr(self, "past_covariate_series", None)
            future_covariates = future_covariates or getattr(self, "future_covariate_series", None)
        super().predict(
            n,
            series,
            past_covariates,
            future_covariates,
            num_samples,
            verbose,
            predict_likelihood_parameters,
            show_warnings,
        )
        many = not isinstance(series, TimeSeries)
        inputs = list(series) if many else [series]
        pasts = _matching(past_covariates, len(inputs), "past_covariates")
        futures = _matching(future_covariates, len(inputs), "future_covariates")
        net = self.forecaster_
        long = net.layout_ == "long"
        histories, aheads = [], []
        for i, (s, past, future) in enumerate(zip(inputs, pasts, futures, strict=True)):
            if s.n_components != len(net.target_names_):
                raise ValueError(
                    f"the series has {s.n_components} components; the model was fitted on "
                    f"{len(net.target_names_)}"
                )
            if not long:
                self._values(s, "predict")
            histories.append(history(s, past, future, f"series {i}", long))
            aheads.append(ahead(s, past, future, n, net.horizon))
        uses_covariates = pasts[0] is not None or futures[0] is not None
        point, levels = roll_series(net, histories, n, aheads if uses_covariates else None)
        rng = np.random.default_rng(random_state)
        forecasts = []
        for i, s in enumerate(inputs):
            one = None if levels is None else {q: v[i] for q, v in levels.items()}
            forecasts.append(
                self._forecast(s, point[i], one, n, num_samples, predict_likelihood_parameters, rng)
            )
        return forecasts if many else forecasts[0]

    def _forecast(self, s, point, levels, n, num_samples, likelihood_parameters, rng):
        """One forecast TimeSeries: the point path, samples, or the quantile levels."""
        if likelihood_parameters:
            names = [f"{component}_q{level:.2f}" for component in s.components for level in levels]
            values = np.stack([levels[q] for q in levels], -1).reshape(n, -1)  # [n, C*Q]
            return self._build_forecast_series(
                values[:, :, None], input_series=s, custom_components=names
            )
        if num_samples > 1:
            samples = sample_quantiles(levels, num_samples, rng)  # [n, C, num_samples]
            return self._build_forecast_series(samples, input_series=s)
        return self._build_forecast_series(point[:, :, None], input_series=s)

    # ------------------------------------------------------------------ save and load
    def save(self, path=None, clean: bool = False, **pkl_kwargs) -> None:
        """Save into the folder `path` without pickle: the fitted forecaster as
        `TitansForecaster.save` writes it (safetensors + JSON, checksummed) in `forecaster/`,
        and the training series as darts' JSON in `training_series.json` (left out with
        `clean=True`, as darts does: `predict` then needs `series=`). Default folder:
        `TitansDartsModel_<date>_<time>`."""
        if pkl_kwargs:
            raise TypeError(
                f"TitansDartsModel.save writes no pickle; it takes no {sorted(pkl_kwargs)}"
            )
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError("TitansDartsModel.save writes a folder: give a path, not a file handle")
        if not getattr(self, "_fit_called", False):
            raise ValueError("fit the model before saving it")
        folder = Path(path or f"{type(self).__name__}_{time.strftime('%Y-%m-%d_%H_%M_%S')}")
        self.forecaster_.save(folder / FORECASTER_DIR)
        stored = {
            SERIES_FILE: getattr(self, "training_series", None),
            COVARIATE_FILES["past"]: getattr(self, "past_covariate_series", None),
            COVARIATE_FILES["future"]: getattr(self, "future_covariate_series", None),
        }
        written = []
        for name, value in stored.items():
            if value is not None and not clean:
                atomic_write_text(folder / name, value.to_json())
                written.append(name)
            else:
                (folder / name).unlink(missing_ok=True)
        write_manifest(folder, written)

    @staticmethod
    def load(path, trusted: bool = False) -> TitansDartsModel:
        """A model saved by `save` (never unpickles). trusted: load a folder without a
        manifest (`TitansForecaster.load`'s `allow_unverified`), trusting its files."""
        folder = Path(path)
        if not (folder / FORECASTER_DIR).is_dir():
            raise FileNotFoundError(f"{folder} is not a saved TitansDartsModel folder")
        listed = verify_folder(folder, allow_unverified=trusted)
        forecaster = TitansForecaster.load(folder / FORECASTER_DIR, allow_unverified=trusted)
        template = clone(forecaster)  # the unfitted settings, for retraining
        model = TitansDartsModel(template)
        model.forecaster_ = forecaster
        stored = {}
        for name in (SERIES_FILE, *COVARIATE_FILES.values()):
            if (folder / name).exists():
                require_listed(folder, listed, name)
                stored[name] = TimeSeries.from_json((folder / name).read_text())
        if SERIES_FILE in stored:
            GlobalForecastingModel.fit(
                model,
                stored[SERIES_FILE],
                stored.get(COVARIATE_FILES["past"]),
                stored.get(COVARIATE_FILES["future"]),
            )
        else:
            model._fit_called = True
        model._uses_past_covariates = bool(forecaster.hist_exog_list)
        model._uses_future_covariates = bool(forecaster.futr_exog_list)
        return model

    def _values(self, series: TimeSeries, what: str) -> np.ndarray:
        """The deterministic values [T, C] of a series, checked for length."""
        if series.n_samples != 1:
            raise ValueError(f"{what}: the series is stochastic; pass a deterministic series")
        need = self._lookback() + (self._template.horizon if what == "fit" else 0)
        if len(series) < need:
            raise ValueError(
                f"{what}: the series has {len(series)} rows, {need} are needed "
                f"(lookback {self._lookback()}"
                + (f" + horizon {self._template.horizon})" if what == "fit" else ")")
            )
        return series.values(copy=False).astype(np.float64)


__all__: Sequence[str] = ["TitansDartsModel"]


def _matching(covariates, count: int, what: str) -> list:
    """One covariate series (or None) per target series."""
    if covariates is None:
        return [None] * count
    listed = [covariates] if isinstance(covariates, TimeSeries) else list(covariates)
    if len(listed) != count:
        raise ValueError(f"{what}: {len(listed)} series given for {count} target series")
    return listed


def sample_quantiles(levels: dict[float, np.ndarray], count: int, rng) -> np.ndarray:
    """`count` draws per step and component from the quantile function that the fitted
    `levels` ({level: [steps, C]}, sorted, non-crossing) sketch: u ~ U(0, 1), linear between
    the fitted levels and flat beyond the outermost ones. Returns [steps, C, count]."""
    known = np.array(sorted(levels))
    values = np.stack([levels[q] for q in known], -1)  # [steps, C, Q]
    u = rng.uniform(size=(*values.shape[:2], count))
    out = np.empty_like(u)
    for t in range(values.shape[0]):
        for c in range(values.shape[1]):
            out[t, c] = np.interp(u[t, c], known, values[t, c])
    return out
