"""A tiny regression task for the engine tests (pure torch: no mixer involved).

Recipes name it `task: training_tiny_task:TinyRegression`; the tests put this folder on
PYTHONPATH for subprocesses (torchrun, the CLI, tuning workers).
"""

from __future__ import annotations

import dataclasses
import time

import torch
from torch import nn

from titans_seq.training.tasks import Task, TensorDataset


@dataclasses.dataclass
class TinyModelConfig:
    hidden: int = 16
    # dropout makes the loss depend on the RNG, so exact resume checks the RNG restore too
    dropout: float = 0.1


@dataclasses.dataclass
class TinyDataConfig:
    features: int = 8
    num_train: int = 512
    num_val: int = 96
    noise: float = 0.1
    seed: int = 1234
    # seconds slept per micro-batch: makes a run slow enough to be killed mid-way
    delay: float = 0.0
    # raise in the loss when the learning rate is above this (simulates a failing trial)
    fail_above_lr: float | None = None
    # training / validation examples whose features are NaN (a diverging run, a bad record)
    nan_train_examples: int = 0
    nan_val_examples: int = 0


class TinyNet(nn.Module):
    def __init__(self, features: int, hidden: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(features, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, 1)
        )
        # a learned offset flagged like a persistent token: must not be weight-decayed
        self.persistent_offset = nn.Parameter(torch.zeros(1, 1))

    def forward(self, x):
        return self.net(x) + self.persistent_offset


class TinyRegression(Task):
    model_config = TinyModelConfig
    data_config = TinyDataConfig

    def build_model(self, cfg):
        return TinyNet(cfg.data.features, cfg.model.hidden, cfg.model.dropout)

    def build_datasets(self, cfg):
        d = cfg.data
        gen = torch.Generator().manual_seed(d.seed)
        w = torch.randn(d.features, 1, generator=gen)
        n = d.num_train + d.num_val
        x = torch.randn(n, d.features, generator=gen)
        y = x @ w + d.noise * torch.randn(n, 1, generator=gen)
        x[: d.nan_train_examples] = float("nan")
        x[d.num_train : d.num_train + d.nan_val_examples] = float("nan")
        train = TensorDataset({"x": x[: d.num_train], "y": y[: d.num_train]})
        val = TensorDataset({"x": x[d.num_train :], "y": y[d.num_train :]})
        self.fail_above_lr = d.fail_above_lr
        self.delay = d.delay
        self.lr = cfg.optim.lr
        return train, val

    def loss(self, model, batch):
        if self.delay:
            time.sleep(self.delay)
        if self.fail_above_lr is not None and self.lr > self.fail_above_lr:
            raise FloatingPointError(f"lr {self.lr} is above {self.fail_above_lr}")
        pred = model(batch["x"])
        return nn.functional.mse_loss(pred, batch["y"]), {}

    def evaluate_batch(self, model, batch):
        pred = model(batch["x"])
        err = pred - batch["y"]
        n = float(err.shape[0])
        return {"loss": (float((err**2).sum()), n), "mae": (float(err.abs().sum()), n)}
