"""Typed run configuration: recipe YAML + dotted overrides -> a validated `RunConfig`.

A recipe has the sections `task`, `model`, `data`, `optim`, `train`, `eval`, an optional
`streams` (training with carried state) and an optional `search_space` (read by `titans-seq
tune`). `optim`, `train`, `eval` and `streams` belong to the engine
(`titans_seq.training.schema`); `model` and `data` belong to the task, which declares their
dataclasses (see `titans_seq.training.tasks`). Every key is checked: an unknown key or a value
of the wrong type raises a `ConfigError` naming the dotted key, so a typo never silently
falls back to a default.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..checks import check_number
from ..errors import ConfigError, did_you_mean
from ..typed_config import build_dataclass, coerce, reject_unknown
from .recipe_files import apply_overrides, deep_merge, parse_override, read_recipe
from .schema import (
    ENGINE_SECTIONS,
    TOP_LEVEL_KEYS,
    EvalConfig,
    OptimConfig,
    RunConfig,
    StreamsConfig,
    TrainConfig,
)
from .streams import check_streams
from .tasks import get_task

__all__ = [
    "ConfigError",
    "EvalConfig",
    "OptimConfig",
    "RunConfig",
    "StreamsConfig",
    "TrainConfig",
    "apply_overrides",
    "build_dataclass",
    "coerce",
    "config_changes",
    "deep_merge",
    "from_dict",
    "load_config",
    "parse_override",
    "read_recipe",
]


# keys that may differ between two runs without changing what they compute (how often a
# run logs or checkpoints changes what it writes, not its weights)
COSMETIC_KEYS = frozenset(
    {
        "train.log_every",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.compile",
        "train.out_dir",
        "train.progress",
        "train.tensorboard",
        "train.trackers",
        "train.mlflow_uri",
        "train.wandb_mode",
        "train.plot",
        "train.peak_flops",
        "train.threads",
    }
)
COMPUTATION_SECTIONS = ("model", "data", "optim", "train", "eval", "streams")


def config_changes(
    saved: dict[str, Any], current: dict[str, Any], *, keys_saved_only: bool = False
) -> list[str]:
    """`"section.key: saved -> current"` for every key of `current`'s computation sections
    (`RunConfig.to_dict()` form) whose value differs from `saved`'s, cosmetic keys left out.
    `keys_saved_only`: compare only the keys `saved` holds, so a config written before a
    key existed is not told apart by that key alone."""
    changes = []
    for section in COMPUTATION_SECTIONS:
        before = saved.get(section) or {}
        for key, value in (current.get(section) or {}).items():
            if f"{section}.{key}" in COSMETIC_KEYS or (keys_saved_only and key not in before):
                continue
            if before.get(key) != value:
                changes.append(f"{section}.{key}: {before.get(key)!r} -> {value!r}")
    return changes


def load_config(
    recipe: str | Path | dict, overrides: list[str] | dict[str, Any] | None = None
) -> RunConfig:
    """Read a recipe (path, built-in name or raw dict), apply overrides, validate."""
    raw = dict(recipe) if isinstance(recipe, dict) else read_recipe(recipe)
    if overrides:
        raw = apply_overrides(raw, overrides)
    return from_dict(raw)


def from_dict(raw: dict[str, Any]) -> RunConfig:
    """Validate a raw recipe dict into a `RunConfig` (errors name the dotted key)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"a recipe must be a mapping, got {type(raw).__name__}")
    reject_unknown(raw, TOP_LEVEL_KEYS, prefix="")
    if "task" not in raw:
        raise ConfigError("recipe has no `task:` (see `titans_seq.training.list_tasks()`)")
    task_name = raw["task"]
    if not isinstance(task_name, str):
        raise ConfigError(f"task: expected a task name (str), got {task_name!r}")
    task = get_task(task_name)
    name = raw.get("name") or task_name
    if not isinstance(name, str):
        raise ConfigError(f"name: expected str, got {name!r}")
    sections = {
        key: build_dataclass(cls, raw.get(key), key) for key, cls in ENGINE_SECTIONS.items()
    }
    model = build_dataclass(task.model_config, raw.get("model"), "model")
    data = build_dataclass(task.data_config, raw.get("data"), "data")
    search_space = raw.get("search_space")
    if search_space is not None and not isinstance(search_space, dict):
        raise ConfigError(f"search_space: expected a mapping, got {type(search_space).__name__}")
    cfg = RunConfig(
        name=name, task=task_name, model=model, data=data, search_space=search_space, **sections
    )
    _check_consistency(cfg)
    return cfg


def _check_consistency(cfg: RunConfig) -> None:
    positive = {
        "train.max_steps": cfg.train.max_steps,
        "train.batch_size": cfg.train.batch_size,
        "train.grad_accum": cfg.train.grad_accum,
        "train.log_every": cfg.train.log_every,
        "train.checkpoint_every": cfg.train.checkpoint_every,
        "train.keep_checkpoints": cfg.train.keep_checkpoints,
        "eval.every": cfg.eval.every,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key} must be a positive integer, got {value}")
    if cfg.train.threads != "auto" and cfg.train.threads < 1:
        raise ConfigError(f"train.threads must be 'auto' or >= 1, got {cfg.train.threads}")
    if cfg.train.batch_size % cfg.train.grad_accum:
        raise ConfigError(
            f"train.batch_size ({cfg.train.batch_size}) must be divisible by train.grad_accum "
            f"({cfg.train.grad_accum})"
        )
    check_number("optim.lr", cfg.optim.lr, low=0.0, low_open=True)
    check_number("optim.weight_decay", cfg.optim.weight_decay, low=0.0)
    check_number("optim.eps", cfg.optim.eps, low=0.0, low_open=True)
    for i, beta in enumerate(cfg.optim.betas):
        check_number(f"optim.betas[{i}]", beta, low=0.0, high=1.0)
    if cfg.optim.grad_clip is not None:
        check_number("optim.grad_clip", cfg.optim.grad_clip, low=0.0, low_open=True)
    if cfg.optim.ema_decay is not None:
        check_number("optim.ema_decay", cfg.optim.ema_decay, low=0.0, high=1.0, low_open=True)
        if cfg.train.distributed == "fsdp":
            raise ConfigError(
                "optim.ema_decay averages whole weights on every process; with "
                "train.distributed: fsdp each holds a shard: use ddp, or set optim.ema_decay: null"
            )
    check_number("eval.min_delta", cfg.eval.min_delta, low=0.0)
    task = get_task(cfg.task)
    if task.metrics and cfg.eval.metric not in task.metrics:
        raise ConfigError(
            f"eval.metric is {cfg.eval.metric!r}{did_you_mean(cfg.eval.metric, task.metrics)} "
            f"but task {cfg.task!r} reports only {list(task.metrics)}"
        )
    if not 0 <= cfg.optim.min_lr_ratio <= 1:
        raise ConfigError(f"optim.min_lr_ratio must be in [0, 1], got {cfg.optim.min_lr_ratio}")
    if cfg.optim.warmup_steps < 0:
        raise ConfigError(f"optim.warmup_steps must be >= 0, got {cfg.optim.warmup_steps}")
    if cfg.optim.warmup_steps >= cfg.train.max_steps:
        warnings.warn(
            f"optim.warmup_steps ({cfg.optim.warmup_steps}) is not below train.max_steps "
            f"({cfg.train.max_steps}): the learning rate never reaches optim.lr and the cosine "
            "decay never starts; lower optim.warmup_steps",
            UserWarning,
            stacklevel=3,
        )
    if cfg.train.peak_flops is not None and cfg.train.peak_flops <= 0:
        raise ConfigError(f"train.peak_flops must be positive, got {cfg.train.peak_flops}")
    if cfg.eval.patience < 0:
        raise ConfigError(f"eval.patience must be >= 0, got {cfg.eval.patience}")
    check_streams(cfg.streams, task, cfg.task)
    if cfg.streams.enabled and cfg.train.distributed == "fsdp":
        raise ConfigError(
            "streams: a run that carries state across segments takes train.distributed=ddp "
            "(each process reads its own streams); FSDP is not supported with it"
        )
    if cfg.train.skip_nonfinite < 0:
        raise ConfigError(f"train.skip_nonfinite must be >= 0, got {cfg.train.skip_nonfinite}")
