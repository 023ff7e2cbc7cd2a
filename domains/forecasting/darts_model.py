"""`TitansDartsModel`: a Titans forecaster as a darts `GlobalForecastingModel`.

    from darts import TimeSeries
    from titans_seq.domains.forecasting.darts_model import TitansDartsModel
    model = TitansDartsModel(TitansForecaster(lookback=96, horizon=24)).fit(train)
    model.predict(48)                                  # rolled forward past the horizon
    model.historical_forecasts(series, start=0.8, forecast_horizon=24, retrain=False)
    model.backtest(series, start=0.8, forecast_horizon=24, retrain=False)

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

from titans_seq.training.checkpoint import atomic_write_text
from titans_seq.training.model_folder import require_listed, verify_folder, write_manifest

try:
    from darts import TimeSeries
    from darts.models.forecasting.forecasting_model import GlobalForecastingModel
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError("TitansDartsModel needs darts: pip install 'titans-seq[darts]'") from error

from .estimator import TitansForecaster
from .rollout import roll_forward

FORECASTER_DIR = "forecaster"
SERIES_FILE = "training_series.json"


class TitansDartsModel(GlobalForecastingModel):
    """darts global model around a `TitansForecaster` (uni- or multivariate, no covariates).

    Parameters:
        forecaster: an unfitted TitansForecaster with the model and training options (None:
            the defaults); cloned at fit, so `untrained_model()` and retraining start fresh.

    `fit` takes one series (the network is trained on its stride-1 windows); `predict(n,
    series=...)` forecasts any series of at least `lookback` rows with the fitted network.
    A forecaster with a quantile head (`TitansForecaster(quantiles=(0.1, 0.5, 0.9))`) is
    probabilistic: `predict(n, num_samples=k)` draws k samples per step and component from its
    quantile function (linear between the fitted levels, flat beyond the outermost ones, so
    tails past them are not represented; steps drawn independently), and
    `predict(n, predict_likelihood_parameters=True)` (n <= horizon) returns the quantiles
    themselves as components `<component>_q<level>`, as darts' quantile models name them.
    Without a quantile head forecasts are deterministic (`num_samples=1`). `save` / `load`
    write and read a folder without pickle (darts' own format unpickles).
    """

    def __init__(self, forecaster: TitansForecaster | None = None):
        super().__init__(add_encoders=None)
        self.forecaster = forecaster
        self._template = TitansForecaster() if forecaster is None else forecaster

    # ---------------------------------------------------------------- what the model is
    @property
    def supports_multivariate(self) -> bool:
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

    @property
    def output_chunk_length(self) -> int:
        return self._template.horizon

    @property
    def min_train_series_length(self) -> int:
        return self._template.lookback + self._template.horizon

    @property
    def min_train_samples(self) -> int:
        return 1

    @property
    def _target_window_lengths(self) -> tuple[int, int]:
        return self._template.lookback, self._template.horizon

    @property
    def extreme_lags(self):
        # reads the last `lookback` rows, forecasts `horizon` rows, no covariates
        return -self._template.lookback, self._template.horizon - 1, None, None, None, None, 0

    def _model_encoder_settings(self):
        return None, None, False, False, None, None

    # ------------------------------------------------------------------- fit and predict
    def fit(self, series, past_covariates=None, future_covariates=None, verbose=None, **kwargs):
        """Train the network on one series (a TimeSeries, or a sequence holding one)."""
        if past_covariates is not None or future_covariates is not None:
            raise ValueError("TitansDartsModel takes no covariates")
        if kwargs.get("sample_weight") is not None:
            raise ValueError("TitansDartsModel takes no sample weights")
        if not isinstance(series, TimeSeries):
            if len(series) != 1:
                raise ValueError(
                    f"TitansDartsModel fits one series, got {len(series)}; join related series "
                    "as components of one multivariate TimeSeries"
                )
            series = series[0]
        super().fit(series)
        self.forecaster_ = clone(self._template).fit(self._values(series, "fit"))
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
        if series is None and getattr(self, "training_series", None) is None:
            raise ValueError(
                "this model holds no training series (saved with clean=True): pass the "
                "series to forecast, predict(n, series=...)"
            )
        rng = np.random.default_rng(random_state)
        many = series is not None and not isinstance(series, TimeSeries)
        inputs = series if many else [series if series is not None else self.training_series]
        forecasts = []
        for s in inputs:
            if s.n_components != self.forecaster_.n_features_in_:
                raise ValueError(
                    f"the series has {s.n_components} components; the model was fitted on "
                    f"{self.forecaster_.n_features_in_}"
                )
            point, levels = roll_forward(self.forecaster_, self._values(s, "predict"), n)
            if predict_likelihood_parameters:
                names = [
                    f"{component}_q{level:.2f}" for component in s.components for level in levels
                ]
                values = np.stack([levels[q] for q in levels], -1).reshape(n, -1)  # [n, C*Q]
                forecast = self._build_forecast_series(
                    values[:, :, None], input_series=s, custom_components=names
                )
            elif num_samples > 1:
                samples = sample_quantiles(levels, num_samples, rng)  # [n, C, num_samples]
                forecast = self._build_forecast_series(samples, input_series=s)
            else:
                forecast = self._build_forecast_series(point[:, :, None], input_series=s)
            forecasts.append(forecast)
        return forecasts if many else forecasts[0]

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
        series = None if clean else self.training_series
        if series is not None:
            atomic_write_text(folder / SERIES_FILE, series.to_json())
        else:
            (folder / SERIES_FILE).unlink(missing_ok=True)
        write_manifest(folder, [SERIES_FILE] if series is not None else [])

    @staticmethod
    def load(path, trusted: bool = False) -> TitansDartsModel:
        """A model saved by `save` (no unpickling: `trusted` has nothing to opt out of)."""
        folder = Path(path)
        if not (folder / FORECASTER_DIR).is_dir():
            raise FileNotFoundError(f"{folder} is not a saved TitansDartsModel folder")
        listed = verify_folder(folder)
        forecaster = TitansForecaster.load(folder / FORECASTER_DIR)
        template = clone(forecaster)  # the unfitted settings, for retraining
        model = TitansDartsModel(template)
        model.forecaster_ = forecaster
        if (folder / SERIES_FILE).exists():
            require_listed(folder, listed, SERIES_FILE)
            series = TimeSeries.from_json((folder / SERIES_FILE).read_text())
            GlobalForecastingModel.fit(model, series)
        else:
            model._fit_called = True
        return model

    def _values(self, series: TimeSeries, what: str) -> np.ndarray:
        """The deterministic values [T, C] of a series, checked for length."""
        if series.n_samples != 1:
            raise ValueError(f"{what}: the series is stochastic; pass a deterministic series")
        need = self._template.lookback + (self._template.horizon if what == "fit" else 0)
        if len(series) < need:
            raise ValueError(
                f"{what}: the series has {len(series)} rows, {need} are needed "
                f"(lookback {self._template.lookback}"
                + (f" + horizon {self._template.horizon})" if what == "fit" else ")")
            )
        return series.values(copy=False).astype(np.float64)


__all__: Sequence[str] = ["TitansDartsModel"]


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
