"""`TitansForecaster`: a scikit-learn estimator around the Simba-style Titans forecaster.

    f = TitansForecaster(lookback=96, horizon=24).fit(df)  # DatetimeIndex, a column per variable
    future = f.predict()     # DataFrame [horizon, C] with the future timestamps
    f.score(df_test)         # -MSE (z-scored) over rolling windows

scikit-learn rules: `__init__` only stores parameters, `fit` returns self, fitted attributes
end in `_`, so `clone`, `get_params`/`set_params` and `cross_validate(f, y, cv=TimeSeriesSplit())`
work. Training goes through the shared loop (`titans_seq.training`) with the `forecasting`
task on in-memory windows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from titans_seq.checks import check_int, check_number
from titans_seq.data import DataError, StandardScaler, prepare_frame
from titans_seq.data.frames import infer_frequency, regular_grid
from titans_seq.errors import ConfigError
from titans_seq.training.in_memory import (
    EstimatorTraining,
    estimator_device,
    fit_in_memory,
    load_fitted,
    previous_memory_options,
    save_fitted,
)

from .task import (
    ForecastModelConfig,
    InMemoryForecastTask,
    WindowTensors,
    build_forecaster,
    point_forecast,
)

CONFIG_FILE = "forecaster.json"
FORMAT_VERSION = 2  # 2: the memory's stable parametrisation (1 is read, see load)


def _windows(values: np.ndarray, lookback: int, horizon: int) -> WindowTensors:
    """Every stride-1 window of a [T, C] array: x [N, L, C], y [N, H, C] (float32)."""
    series = torch.as_tensor(values, dtype=torch.float32)
    total = lookback + horizon
    spans = series.unfold(0, total, 1).permute(0, 2, 1)  # [N, L + H, C]
    return WindowTensors(spans[:, :lookback].contiguous(), spans[:, lookback:].contiguous())


class TitansForecaster(BaseEstimator):
    """Multivariate forecaster: RevIN, channel-independent patches, [mixer, EinFFT] blocks.

    Parameters:
        lookback, horizon: input window and forecast length (rows).
        mixer, mixer_options: any registered sequence mixer ("lmm" = Titans memory alone).
        dim, depth, heads, patch_len, stride: model size and patching.
        quantiles: e.g. (0.1, 0.5, 0.9) for a probabilistic head (pinball loss); None = point.
        max_epochs, batch_size, learning_rate: optimisation (AdamW, warmup + cosine).
        validation_fraction: last fraction of the rows held out for early stopping (their
            windows start `lookback` rows earlier); 0 trains on everything for max_epochs.
        patience: epochs without validation improvement before stopping (0 = never).
        missing: NaN/inf policy, "error" | "ffill" | "interpolate".
        device: "auto" (CUDA when available), "cpu", "cuda", ...
        random_state: seed of initialisation and batch order (None = 0).
        verbose: show the progress bar and log lines.

    Fitted attributes: model_, scaler_, feature_names_in_, n_features_in_, freq_,
    history_ (validation metrics per epoch), n_epochs_, device_.
    """

    def __init__(
        self,
        lookback: int = 96,
        horizon: int = 96,
        mixer: str = "lmm",
        mixer_options: dict | None = None,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        patch_len: int = 16,
        stride: int = 8,
        quantiles: tuple[float, ...] | None = None,
        max_epochs: int = 10,
        batch_size: int = 32,
        learning_rate: float = 1e-3,
        validation_fraction: float = 0.1,
        patience: int = 3,
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
        self.quantiles = quantiles
        self.max_epochs = max_epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.validation_fraction = validation_fraction
        self.patience = patience
        self.missing = missing
        self.device = device
        self.random_state = random_state
        self.verbose = verbose

    def __sklearn_tags__(self):
        # the input is one series [T, C] whose rows are time steps, not independent samples:
        # scikit-learn's tabular checks (row order and subset invariance, 1-sample fits) do not
        # apply, so it skips them; tests/domains/test_sklearn_conformance.py runs the rest
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.allow_nan = self.missing != "error"
        tags.target_tags.required = False
        return tags

    # ------------------------------------------------------------------------ input checks
    def _frame(self, y, what: str) -> pd.DataFrame:
        try:
            frame = prepare_frame(y, missing=self.missing)
        except DataError as error:
            raise DataError(f"{what}: {error}") from None
        if isinstance(frame.index, pd.DatetimeIndex) and len(frame) > 2:
            # the index itself when it is regular; None for repeated or irregular stamps
            found = regular_grid(frame.index)
            if found is not None and len(found[0]) > len(frame):
                grid, freq = found
                absent = grid[~grid.isin(frame.index)]
                raise DataError(
                    f"{what}: {len(absent)} time step(s) are missing from the series' "
                    f"{freq} grid (the first at {absent[0]}); pass missing='ffill' or "
                    "'interpolate' to insert and fill them, or resample the series first"
                )
            if found is None:
                steps = frame.index.to_series().diff().dropna().value_counts()
                raise DataError(
                    f"{what}: the timestamps have no regular frequency (steps seen: "
                    f"{', '.join(str(s) for s in steps.index[:3])}); resample the series first"
                )
        return frame

    def _model_config(self) -> ForecastModelConfig:
        return ForecastModelConfig(
            dim=self.dim,
            depth=self.depth,
            heads=self.heads,
            mixer=self.mixer,
            mixer_options=dict(self.mixer_options or {}),
            patch_len=self.patch_len,
            stride=self.stride,
            quantiles=list(self.quantiles or []),
        )

    def _training_settings(self) -> EstimatorTraining:
        return EstimatorTraining(
            self.max_epochs,
            self.batch_size,
            self.learning_rate,
            self.patience,
            self.random_state,
            self.device,
            self.verbose,
            weight_decay=0.05,
        )

    def _check_params(self) -> EstimatorTraining:
        """Every parameter checked before any data is read (the message names it); returns
        the training settings."""
        check_int("lookback", self.lookback, 1)
        check_int("horizon", self.horizon, 1)
        check_number("validation_fraction", self.validation_fraction, low=0.0)
        if self.validation_fraction >= 1.0:
            raise ConfigError(
                f"validation_fraction must be a number in [0, 1), got {self.validation_fraction}"
            )
        settings = self._training_settings()
        self._model_config()  # dim, depth, heads, patch_len, stride, quantiles, mixer
        if self.patch_len > self.lookback + self.stride:
            raise ConfigError(
                f"patch_len={self.patch_len} is longer than lookback + stride = "
                f"{self.lookback + self.stride}"
            )
        return settings

    # ----------------------------------------------------------------------------- fit
    def fit(self, y, X=None):
        """Fit on a series: DataFrame (DatetimeIndex or a "date" column) or array [T, C].

        `X` is unused (present so that scikit-learn's model selection can call fit(y)).
        """
        settings = self._check_params()
        frame = self._frame(y, "fit")
        L, H = int(self.lookback), int(self.horizon)
        if len(frame) < L + H:
            raise DataError(
                f"fit: the series has {len(frame)} rows but lookback + horizon = {L} + {H} = "
                f"{L + H} rows are needed for a single training window"
            )
        values = frame.to_numpy(np.float64)
        self.feature_names_in_ = np.asarray([str(c) for c in frame.columns], dtype=object)
        self.n_features_in_ = values.shape[1]
        self.freq_ = (
            infer_frequency(frame.index) if isinstance(frame.index, pd.DatetimeIndex) else None
        )
        self._input_is_frame = isinstance(y, pd.DataFrame)

        # chronological hold-out: validation windows forecast only the last rows
        n_val_rows = int(len(values) * self.validation_fraction)
        if n_val_rows < H or len(values) - n_val_rows < L + H:
            n_val_rows = 0  # too short to hold anything out: train on everything
        train_rows = values[: len(values) - n_val_rows]
        self.scaler_ = StandardScaler().fit(train_rows)  # statistics of the training rows only
        scaled = self.scaler_.transform(values).astype(np.float32)
        train_set = _windows(scaled[: len(values) - n_val_rows], L, H)
        val_set = _windows(scaled[len(values) - n_val_rows - L :], L, H) if n_val_rows else None

        model_cfg = self._model_config()
        self.model_, result, steps_per_epoch = fit_in_memory(
            InMemoryForecastTask(train_set, val_set, self.n_features_in_),
            "forecasting",
            model=dataclasses.asdict(model_cfg),
            data={"dataset": "<in-memory>", "lookback": L, "horizon": H},
            num_train=len(train_set),
            has_validation=val_set is not None,
            settings=settings,
            build_model=lambda: build_forecaster(model_cfg, self.n_features_in_, L, H),
        )
        self.device_ = estimator_device(self.device)
        self.history_ = result.history
        self.n_epochs_ = result.step // steps_per_epoch
        self._last_context = scaled[-L:]
        self._last_index = frame.index[-L:]
        return self

    # --------------------------------------------------------------------------- predict
    def _context(self, y_context):
        """(scaled context [L, C] float32, index of its rows, whether output is a DataFrame)."""
        if y_context is None:
            return self._last_context, self._last_index, self._input_is_frame
        frame = self._frame(y_context, "predict")
        columns = [str(c) for c in frame.columns]
        expected = list(self.feature_names_in_)
        if isinstance(y_context, pd.DataFrame) and columns != expected:
            missing = sorted(set(expected) - set(columns))
            extra = sorted(set(columns) - set(expected))
            raise DataError(
                f"predict: the columns differ from fit: missing {missing}, unexpected {extra}"
                + ("" if missing or extra else f" (order {columns} instead of {expected})")
            )
        if frame.shape[1] != self.n_features_in_:
            raise DataError(
                f"predict: {frame.shape[1]} columns given, {self.n_features_in_} fitted"
            )
        if len(frame) < self.lookback:
            raise DataError(f"predict: {len(frame)} rows given, lookback = {self.lookback} needed")
        tail = frame.iloc[-self.lookback :]
        scaled = self.scaler_.transform(tail.to_numpy(np.float64)).astype(np.float32)
        return scaled, tail.index, isinstance(y_context, pd.DataFrame)

    def _future_index(self, index) -> pd.Index:
        if isinstance(index, pd.DatetimeIndex):
            freq = self.freq_ or infer_frequency(index)
            return pd.date_range(index[-1], periods=self.horizon + 1, freq=freq)[1:].rename(
                index.name or "date"
            )
        start = int(index[-1]) + 1 if len(index) and np.issubdtype(index.dtype, np.integer) else 0
        return pd.RangeIndex(start, start + self.horizon)

    @torch.no_grad()
    def _raw_forecast(self, scaled: np.ndarray) -> np.ndarray:
        """Model output in original units: [H, C] or [H, C, Q]."""
        x = torch.as_tensor(scaled, device=self.device_).unsqueeze(0)
        out = self.model_(x)[0].float().cpu().numpy()
        if out.ndim == 3:  # quantiles: un-scale each level
            return np.stack(
                [self.scaler_.inverse_transform(out[..., q]) for q in range(out.shape[-1])], -1
            )
        return self.scaler_.inverse_transform(out)

    def predict(self, y_context=None):
        """Forecast the `horizon` rows after the fitted data, or after `y_context`.

        Returns a DataFrame [horizon, C] with future timestamps when the input was a
        DataFrame, else an array [horizon, C]. With quantiles, the median level (or the
        one nearest 0.5) is the point forecast.
        """
        check_is_fitted(self, "model_")
        scaled, index, as_frame = self._context(y_context)
        out = self._raw_forecast(scaled)
        if out.ndim == 3:
            out = point_forecast(torch.as_tensor(out), list(self.quantiles)).numpy()
        if not as_frame:
            return out
        return pd.DataFrame(
            out, index=self._future_index(index), columns=list(self.feature_names_in_)
        )

    def predict_quantiles(self, y_context=None) -> dict[float, pd.DataFrame | np.ndarray]:
        """{level: forecast [horizon, C]} for every fitted quantile level."""
        check_is_fitted(self, "model_")
        if not self.quantiles:
            raise ValueError("this forecaster was fitted without quantiles; set quantiles=(...)")
        scaled, index, as_frame = self._context(y_context)
        out = self._raw_forecast(scaled)
        result = {}
        for i, level in enumerate(self.quantiles):
            q = out[..., i]
            result[level] = (
                pd.DataFrame(
                    q, index=self._future_index(index), columns=list(self.feature_names_in_)
                )
                if as_frame
                else q
            )
        return result

    # ----------------------------------------------------------------------------- score
    @torch.no_grad()
    def score(self, y, X=None, batch_size: int = 256) -> float:
        """-MSE of the point forecasts over every stride-1 window of `y`, on z-scored values
        (the fitted scaler), the unit the forecasting benchmarks report. Higher is better."""
        check_is_fitted(self, "model_")
        frame = self._frame(y, "score")
        if frame.shape[1] != self.n_features_in_:
            raise DataError(f"score: {frame.shape[1]} columns given, {self.n_features_in_} fitted")
        if len(frame) < self.lookback + self.horizon:
            raise DataError(
                f"score: {len(frame)} rows given, lookback + horizon = "
                f"{self.lookback + self.horizon} needed for one window"
            )
        scaled = self.scaler_.transform(frame.to_numpy(np.float64)).astype(np.float32)
        windows = _windows(scaled, self.lookback, self.horizon)
        total, count = 0.0, 0
        for start in range(0, len(windows), batch_size):
            x, target = windows.get_batch(range(start, min(start + batch_size, len(windows))))
            out = self.model_(x.to(self.device_)).float()
            levels = list(self.quantiles or [])
            pred = point_forecast(out, levels).cpu()
            total += float(((pred - target) ** 2).sum())
            count += target.numel()
        return -total / count

    # ------------------------------------------------------------------------ save/load
    def save(self, path):
        """Write `path/` with model.safetensors + forecaster.json (no pickle)."""
        check_is_fitted(self, "model_")
        index = self._last_index
        meta = {
            "format_version": FORMAT_VERSION,
            "params": self.get_params(),
            "feature_names_in": list(self.feature_names_in_),
            "freq": self.freq_,
            "input_is_frame": self._input_is_frame,
            "scaler": {"mean": self.scaler_.mean_.tolist(), "scale": self.scaler_.scale_.tolist()},
            "last_context": self._last_context.tolist(),
            "last_index": [str(t) for t in index],
            "last_index_is_datetime": isinstance(index, pd.DatetimeIndex),
            "history": self.history_,
            "n_epochs": self.n_epochs_,
        }
        return save_fitted(path, self.model_, meta, CONFIG_FILE)

    @classmethod
    def load(cls, path, device: str | None = None) -> TitansForecaster:
        """Rebuild a saved forecaster (weights via safetensors; never unpickles)."""
        meta, weights = load_fitted(path, CONFIG_FILE, "TitansForecaster", FORMAT_VERSION)
        params = meta["params"]
        if meta["format_version"] == 1:  # trained under the memory's previous defaults
            params["mixer_options"] = previous_memory_options(
                params["mixer"], params.get("mixer_options")
            )
        if params.get("quantiles") is not None:
            params["quantiles"] = tuple(params["quantiles"])
        f = cls(**params)
        f.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
        f.n_features_in_ = len(f.feature_names_in_)
        f.freq_ = meta["freq"]
        f._input_is_frame = meta["input_is_frame"]
        f.scaler_ = StandardScaler()
        f.scaler_.mean_ = np.asarray(meta["scaler"]["mean"])
        f.scaler_.scale_ = np.asarray(meta["scaler"]["scale"])
        f._last_context = np.asarray(meta["last_context"], dtype=np.float32)
        index = meta["last_index"]
        f._last_index = (
            pd.DatetimeIndex(pd.to_datetime(index), name="date")
            if meta["last_index_is_datetime"]
            else pd.Index([int(i) for i in index])
        )
        f.history_, f.n_epochs_ = meta["history"], meta["n_epochs"]
        model = build_forecaster(f._model_config(), f.n_features_in_, f.lookback, f.horizon)
        model.load_state_dict(weights)
        f.device_ = estimator_device(device or f.device)
        f.model_ = model.to(f.device_).eval()
        return f
