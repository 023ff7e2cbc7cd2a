"""The `forecasting` training task: a Simba-style forecaster on a windowed series.

Recipes name a registered dataset (or a CSV path) and the standard protocol does the rest
(`titans_seq.data.forecast_splits`: borders, train-only z-scoring, stride-1 windows). The
scikit-learn estimator reuses the same task with its in-memory windows
(`InMemoryForecastTask`), so there is one training path for both.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch
from torch import nn

from titans_seq.checks import check_choice, check_int
from titans_seq.errors import ConfigError
from titans_seq.mixers.options import check_layer_options
from titans_seq.training.tasks import BatchDataset, Task, register_task

from .covariate_tokens import NO_COVARIATES, CovariateShape
from .dlinear import DLinear
from .model import SimbaForecaster
from .patchtst import PatchTST
from .revin import CENTERS

POINT_LOSSES = ("mse", "mae")
ARCHITECTURES = ("simba", "dlinear", "patchtst")


@dataclasses.dataclass
class ForecastModelConfig:
    # "simba": the patch forecaster with any sequence mixer; "dlinear": the linear baseline;
    # "patchtst": the bidirectional patch Transformer baseline (dim, depth, heads, patch_len,
    # stride and dropout apply; mixer and einfft_blocks do not)
    architecture: str = "simba"
    dim: int = 64
    depth: int = 2
    heads: int = 4
    # a registered mixer name (LMM by default, as in the Titans paper's forecasting setting)
    mixer: str = "lmm"
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    patch_len: int = 16
    stride: int = 8
    einfft_blocks: int = 4
    dropout: float = 0.1
    # quantile levels for a probabilistic head trained with the pinball loss; [] = point
    quantiles: list[float] = dataclasses.field(default_factory=list)
    # the point head's training loss: "mse" forecasts the mean, "mae" the median
    loss: str = "mse"
    # the level each window is normalised from (RevIN): "mean", "last" (its last value) or
    # "trend" (its least-squares line at the last step)
    center: str = "mean"

    def __post_init__(self) -> None:
        # typos, wrong types and impossible sizes fail when the recipe is loaded
        # (--print-config) or the estimator is fitted, not deep inside the model
        check_choice("architecture", self.architecture, ARCHITECTURES)
        for name in ("dim", "depth", "heads", "patch_len", "stride", "einfft_blocks"):
            check_int(name, getattr(self, name), 1)
            setattr(self, name, int(getattr(self, name)))  # NumPy integers as Python ints
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout!r}")
        check_quantile_levels(self.quantiles)
        self.quantiles = [float(q) for q in self.quantiles]
        check_choice("loss", self.loss, POINT_LOSSES)
        check_choice("center", self.center, CENTERS)
        if self.quantiles and self.loss != "mse":
            raise ConfigError(
                f"loss={self.loss!r} is for point forecasts: a quantile head trains on the "
                f"pinball loss (its 0.5 level is the median); leave loss at 'mse'"
            )
        check_layer_options(self.mixer, self.mixer_options, "model.mixer_options")


def check_quantile_levels(levels) -> None:
    """ConfigError unless every level is a distinct number strictly between 0 and 1."""
    levels = list(levels or [])
    bad = [q for q in levels if isinstance(q, bool) or not isinstance(q, (int, float))]
    bad += [q for q in levels if q not in bad and not 0.0 < q < 1.0]
    if bad:
        raise ConfigError(f"quantiles must lie strictly between 0 and 1, got {bad}")
    if len(set(levels)) != len(levels):
        raise ConfigError(f"quantiles must be distinct, got {levels}")


@dataclasses.dataclass
class ForecastDataConfig:
    # a registered dataset name (titans_seq.data.list_datasets()) or a CSV file path
    dataset: str = "ETTh1"
    lookback: int = 96
    horizon: int = 96
    # "M": all channels in and out (the benchmark's multivariate setting)
    features: str = "M"
    target: str | None = None

    def __post_init__(self) -> None:
        check_int("lookback", self.lookback, 1)
        check_int("horizon", self.horizon, 1)
        self.lookback, self.horizon = int(self.lookback), int(self.horizon)


class WindowTensors(BatchDataset):
    """Windows stored as two tensors: x [N, L, C] and y [N, H, C] (float32)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"{x.shape[0]} input windows but {y.shape[0]} target windows")
        self.x, self.y = x, y

    @classmethod
    def from_windows(cls, windows) -> WindowTensors:
        """Materialise a `titans_seq.data.ForecastWindows` split."""
        pairs = [windows[i] for i in range(len(windows))]
        return cls(torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs]))

    def __len__(self) -> int:
        return self.x.shape[0]

    def get_batch(self, indices):
        index = torch.as_tensor(list(indices), dtype=torch.long)
        return self.x[index], self.y[index]


@functools.lru_cache(maxsize=4)
def _cached_splits(dataset: str, lookback: int, horizon: int, features: str, target):
    """The protocol's splits, loaded once per process (build_model and build_datasets both
    need them)."""
    from titans_seq.data import forecast_splits

    return forecast_splits(
        dataset, lookback=lookback, horizon=horizon, features=features, target=target
    )


def point_loss(prediction: torch.Tensor, target: torch.Tensor, loss: str) -> torch.Tensor:
    """Mean squared ("mse") or absolute ("mae") error of point forecasts [...] against the
    target [...]."""
    error = prediction - target
    return error.abs().mean() if loss == "mae" else error.square().mean()


def pinball_loss(prediction: torch.Tensor, target: torch.Tensor, quantiles: torch.Tensor):
    """Mean quantile loss: prediction [..., Q], target [...], quantiles [Q]."""
    diff = target.unsqueeze(-1) - prediction
    return torch.maximum(quantiles * diff, (quantiles - 1) * diff).mean()


def build_forecaster(
    model_cfg: ForecastModelConfig,
    num_channels: int,
    lookback: int,
    horizon: int,
    covariates: CovariateShape = NO_COVARIATES,
) -> nn.Module:
    """The network a model config describes: [B, L, C] -> [B, H, C] (or [B, H, C, Q]),
    reading the covariates `covariates` describes. Its `point_loss` attribute is the
    config's `loss`, which the task trains a point head with."""
    network = _network(model_cfg, num_channels, lookback, horizon, covariates)
    network.point_loss = model_cfg.loss
    return network


def _network(
    model_cfg: ForecastModelConfig,
    num_channels: int,
    lookback: int,
    horizon: int,
    covariates: CovariateShape,
) -> nn.Module:
    if model_cfg.architecture in ("dlinear", "patchtst"):  # the baselines: point forecasts
        if model_cfg.quantiles:
            raise ValueError(f"the {model_cfg.architecture} baseline has no quantile head")
        if covariates.any:
            raise ValueError(f"the {model_cfg.architecture} baseline takes no covariates")
    if model_cfg.architecture == "dlinear":
        if model_cfg.center != "mean":
            raise ValueError("the dlinear baseline reads the series unnormalised: no center")
        return DLinear(lookback, horizon)
    if model_cfg.architecture == "patchtst":
        return PatchTST(
            num_channels,
            lookback,
            horizon,
            dim=model_cfg.dim,
            depth=model_cfg.depth,
            heads=model_cfg.heads,
            patch_len=model_cfg.patch_len,
            stride=model_cfg.stride,
            dropout=model_cfg.dropout,
            center=model_cfg.center,
        )
    if model_cfg.architecture != "simba":
        raise ValueError(
            f"unknown forecasting architecture {model_cfg.architecture!r}; choose one of "
            f"{ARCHITECTURES}"
        )
    return SimbaForecaster(
        num_channels,
        lookback,
        horizon,
        dim=model_cfg.dim,
        depth=model_cfg.depth,
        mixer=model_cfg.mixer,
        heads=model_cfg.heads,
        mixer_options=model_cfg.mixer_options,
        patch_len=model_cfg.patch_len,
        stride=model_cfg.stride,
        einfft_blocks=model_cfg.einfft_blocks,
        dropout=model_cfg.dropout,
        quantiles=tuple(model_cfg.quantiles),
        covariates=covariates,
        center=model_cfg.center,
    )


def run_forecaster(model: nn.Module, inputs) -> torch.Tensor:
    """The model on a batch's inputs: a window x [B, L, C], or a dict of x and covariates
    (`PanelWindows`), passed as keyword arguments."""
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def quantile_bracket(levels, alpha: float) -> tuple[int, int, float] | None:
    """(i, j, w) such that the alpha quantile is (1 - w) * level i + w * level j: the fitted
    level itself (i == j) when one lies within rounding of alpha (1 - 0.95 is 0.04999...),
    else the nearest levels below and above it; None when alpha lies outside the levels."""
    for i, q in enumerate(levels):
        if abs(q - alpha) < 1e-9:
            return i, i, 0.0
    below = [i for i, q in enumerate(levels) if q < alpha]
    above = [i for i, q in enumerate(levels) if q > alpha]
    if not below or not above:
        return None
    lower = max(below, key=lambda i: levels[i])
    upper = min(above, key=lambda i: levels[i])
    return lower, upper, (alpha - levels[lower]) / (levels[upper] - levels[lower])


def point_forecast(output: torch.Tensor, quantiles) -> torch.Tensor:
    """[B, H, C] point forecast from a model output ([B, H, C] or [B, H, C, Q]): the median
    level; without one, linear between the levels around 0.5 ((0.1, 0.9): their midpoint),
    or the nearest level when all lie on one side of it."""
    if not quantiles:
        return output
    levels = [float(q) for q in quantiles]
    bracket = quantile_bracket(levels, 0.5)
    if bracket is None:
        return output[..., min(range(len(levels)), key=lambda i: abs(levels[i] - 0.5))]
    lower, upper, weight = bracket
    if lower == upper:
        return output[..., lower]
    return (1 - weight) * output[..., lower] + weight * output[..., upper]


@register_task("forecasting")
class ForecastingTask(Task):
    """Loss: MSE (or MAE: the model config's `loss`) on z-scored values, the pinball loss
    with quantiles; metrics: mse, mae."""

    metrics = ("loss", "mse", "mae")
    model_config = ForecastModelConfig
    data_config = ForecastDataConfig

    def _splits(self, cfg):
        d = cfg.data
        return _cached_splits(d.dataset, d.lookback, d.horizon, d.features, d.target)

    def num_channels(self, cfg) -> int:
        train, *_ = self._splits(cfg)
        return train[0][0].shape[-1]

    def build_model(self, cfg) -> nn.Module:
        return build_forecaster(
            cfg.model, self.num_channels(cfg), cfg.data.lookback, cfg.data.horizon
        )

    def build_datasets(self, cfg):
        train, val, _test, _scaler = self._splits(cfg)
        return WindowTensors.from_windows(train), WindowTensors.from_windows(val)

    def loss(self, model, batch):
        inputs, y = batch
        out = run_forecaster(model, inputs)
        quantiles = self._quantiles(model)
        if quantiles is None:
            return point_loss(out.float(), y, self._point_loss(model)), {}
        return pinball_loss(out.float(), y, quantiles.to(out.device)), {}

    def evaluate_batch(self, model, batch):
        inputs, y = batch
        out = run_forecaster(model, inputs).float()
        levels = self._quantiles(model)
        point = point_forecast(out, None if levels is None else levels.tolist())
        n = float(y.numel())
        metrics = {
            "mse": (float(((point - y) ** 2).sum()), n),
            "mae": (float((point - y).abs().sum()), n),
        }
        if levels is None:
            metrics["loss"] = metrics[self._point_loss(model)]
        else:
            loss = pinball_loss(out, y, levels.to(out.device))
            metrics["loss"] = (float(loss) * n, n)
        return metrics

    @staticmethod
    def _unwrapped(model) -> nn.Module:
        return getattr(model, "module", model)  # DDP/FSDP wrappers keep the model in .module

    @classmethod
    def _point_loss(cls, model) -> str:
        return getattr(cls._unwrapped(model), "point_loss", "mse")

    @classmethod
    def _quantiles(cls, model) -> torch.Tensor | None:
        levels = getattr(cls._unwrapped(model), "quantile_levels", None)
        return None if levels is None or len(levels) == 0 else levels


class InMemoryForecastTask(ForecastingTask):
    """The forecasting task on windows the caller already built (the estimator's path)."""

    def __init__(
        self,
        train: BatchDataset,
        val: BatchDataset | None,
        num_channels: int,
        covariates: CovariateShape = NO_COVARIATES,
    ):
        self.train, self.val, self._num_channels = train, val, num_channels
        self.covariates = covariates

    def num_channels(self, cfg) -> int:
        return self._num_channels

    def build_model(self, cfg) -> nn.Module:
        return build_forecaster(
            cfg.model, self._num_channels, cfg.data.lookback, cfg.data.horizon, self.covariates
        )

    def build_datasets(self, cfg):
        return self.train, self.val if self.val is not None else self.train
