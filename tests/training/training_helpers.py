"""Helpers shared by the training-engine tests (recipes of the tiny task, subprocesses)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
TINY_TASK = "training_tiny_task:TinyRegression"


def tiny_raw(out_dir: Path, **sections) -> dict:
    """A recipe of the tiny regression task; `sections` update the defaults per section."""
    raw = {
        "name": "tiny_regression",
        "task": TINY_TASK,
        "model": {"hidden": 16, "dropout": 0.1},
        "data": {"num_train": 256, "num_val": 64},
        "optim": {"lr": 3.0e-3, "warmup_steps": 5, "weight_decay": 0.05},
        "train": {
            "max_steps": 40,
            "batch_size": 16,
            "log_every": 5,
            "checkpoint_every": 10,
            "out_dir": str(out_dir),
            "progress": False,
            "plot": False,
            "tensorboard": False,
        },
        "eval": {"every": 10, "batch_size": 32},
    }
    for section, values in sections.items():
        if isinstance(values, dict):
            raw.setdefault(section, {}).update(values)
        else:
            raw[section] = values
    return raw


def write_recipe(path: Path, raw: dict) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def subprocess_env() -> dict[str, str]:
    """Environment for child processes: the tiny task importable, one thread per process
    (two processes share the CI's two cores), no torchrun variables inherited."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def cli_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "titans_seq.cli", *args]
