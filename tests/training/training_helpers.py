"""Helpers shared by the training-engine tests (recipes of the tiny task, subprocesses)."""

from __future__ import annotations

from pathlib import Path

import yaml
from process_helpers import cli_command  # noqa: F401  (re-exported for the training tests)
from process_helpers import subprocess_env as process_env

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
    """Environment for child processes (see process_helpers), the tiny task importable."""
    return process_env(HERE)
