"""Per-channel z-score scaling fit on the training rows only."""

from __future__ import annotations

import numpy as np
import torch


class StandardScaler:
    """z = (x - mean) / std per channel, with the population std (ddof=0, as scikit-learn).

    A constant channel (std 0) gets std 1, so it maps to 0 instead of dividing by zero.

    Attributes (after `fit`):
        mean_: float64 array [C]
        scale_: float64 array [C] (the std, with zeros replaced by 1)
    """

    def __init__(self):
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None

    def fit(self, values) -> StandardScaler:
        """Fit on `values` [T, C] (the train rows)."""
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[0] == 0:
            raise ValueError(f"fit expects a non-empty [T, C] array, got shape {values.shape}")
        self.mean_ = values.mean(axis=0)
        std = values.std(axis=0)
        self.scale_ = np.where(std > 0, std, 1.0)
        return self

    def transform(self, values):
        """[..., C] -> [..., C]; numpy in, numpy out; a tensor keeps its dtype and device."""
        mean, scale = self._stats(values)
        return (values - mean) / scale

    def inverse_transform(self, values):
        """Undo `transform`: [..., C] -> [..., C] in the original units."""
        mean, scale = self._stats(values)
        return values * scale + mean

    def state_dict(self) -> dict:
        self._check_fitted()
        return {"mean": self.mean_.tolist(), "scale": self.scale_.tolist()}

    @classmethod
    def from_state_dict(cls, state: dict) -> StandardScaler:
        scaler = cls()
        scaler.mean_ = np.asarray(state["mean"], dtype=np.float64)
        scaler.scale_ = np.asarray(state["scale"], dtype=np.float64)
        return scaler

    def _check_fitted(self) -> None:
        if self.mean_ is None:
            raise RuntimeError("StandardScaler is not fitted; call fit(train_values) first")

    def _stats(self, values):
        self._check_fitted()
        if values.shape[-1] != self.mean_.shape[0]:
            raise ValueError(
                f"scaler was fit on {self.mean_.shape[0]} channels, got {values.shape[-1]}"
            )
        if isinstance(values, torch.Tensor):
            kw = {"dtype": values.dtype, "device": values.device}
            return torch.as_tensor(self.mean_, **kw), torch.as_tensor(self.scale_, **kw)
        return self.mean_, self.scale_


class LogStandardScaler:
    """z = (log x - mean) / std per channel, for positive values: the z-scoring of
    `StandardScaler` on the logarithm, so that an error in z is a relative error of x.

    Attributes (after `fit`): mean_, scale_ of the logarithm (float64 arrays [C]).
    """

    def __init__(self):
        self.log = StandardScaler()

    @property
    def mean_(self) -> np.ndarray | None:
        return self.log.mean_

    @property
    def scale_(self) -> np.ndarray | None:
        return self.log.scale_

    def fit(self, values) -> LogStandardScaler:
        """Fit on `values` [T, C] (the train rows), every one positive."""
        self.log.fit(np.log(_positive(np.asarray(values, dtype=np.float64))))
        return self

    def transform(self, values):
        """[..., C] positive values -> [..., C]; numpy in, numpy out; a tensor keeps its
        dtype and device."""
        values = _positive(values)
        logs = torch.log(values) if isinstance(values, torch.Tensor) else np.log(values)
        return self.log.transform(logs)

    def inverse_transform(self, values):
        """Undo `transform`: [..., C] -> [..., C] positive values in the original units."""
        z = self.log.inverse_transform(values)
        return torch.exp(z) if isinstance(z, torch.Tensor) else np.exp(z)

    def state_dict(self) -> dict:
        return {"log": True, **self.log.state_dict()}

    @classmethod
    def from_state_dict(cls, state: dict) -> LogStandardScaler:
        scaler = cls()
        scaler.log = StandardScaler.from_state_dict(state)
        return scaler


def scaler_from_state(state: dict) -> StandardScaler | LogStandardScaler:
    """The scaler a `state_dict` describes: `LogStandardScaler`'s carry "log": true."""
    if state.get("log"):
        return LogStandardScaler.from_state_dict(state)
    return StandardScaler.from_state_dict(state)


def _positive(values):
    if not bool((values > 0).all()):
        raise ValueError("a log scale needs positive values; got zero, negative or NaN ones")
    return values
