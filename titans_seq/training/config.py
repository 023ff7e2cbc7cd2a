"""Typed run configuration: recipe YAML + dotted overrides -> validated dataclasses.

A recipe has the sections `task`, `model`, `data`, `optim`, `train`, `eval` and an optional
`search_space` (read by `titans-seq tune`). `optim`, `train` and `eval` belong to the engine and
are declared here; `model` and `data` belong to the task, which declares their dataclasses (see
`titans_seq.training.tasks`). Every key is checked: an unknown key or a value of the wrong type
raises a `ConfigError` naming the dotted key, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import UserError


class ConfigError(UserError, ValueError):
    """A recipe or override is invalid; the message names the offending dotted key."""


@dataclasses.dataclass
class OptimConfig:
    """AdamW with decoupled weight decay and a linear-warmup + cosine learning-rate schedule."""

    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    # the cosine decays from lr to lr * min_lr_ratio at train.max_steps
    min_lr_ratio: float = 0.1
    # global gradient-norm clipping; null disables it
    grad_clip: float | None = 1.0
    # parameters whose name contains one of these substrings get no weight decay (1-D
    # parameters such as norms and biases never get any)
    no_decay: list[str] = dataclasses.field(default_factory=lambda: ["persistent"])


@dataclasses.dataclass
class TrainConfig:
    """How long and how to train; `batch_size` is the global batch of one optimizer step."""

    max_steps: int = 1000
    # examples per optimizer step, summed over processes and accumulation micro-steps
    batch_size: int = 32
    grad_accum: int = 1
    seed: int = 0
    deterministic: bool = False
    # "auto": bf16 autocast on a GPU that supports it, fp16 (+ loss scaling) on older GPUs,
    # fp32 on CPU
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"
    # "auto": cuda:LOCAL_RANK when CUDA is available, else cpu
    device: str = "auto"
    # multi-process strategy under torchrun: "ddp" replicates, "fsdp" shards (FSDP2)
    distributed: Literal["ddp", "fsdp"] = "ddp"
    log_every: int = 10
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    # "{name}" is replaced by the recipe name
    out_dir: str = "runs/{name}"
    progress: bool = True
    tensorboard: bool = True
    plot: bool = True
    # peak FLOP/s of one device for the model-FLOPs-utilization log (e.g. 989.0e12 for an
    # H100 SXM in bf16); null: looked up for known GPUs (`logs.peak_flops`), else no MFU
    peak_flops: float | None = None
    # steps with a NaN/inf loss or gradient norm that are skipped (no optimizer step) before
    # the run stops with TrainingDiverged; 0: stop at the first one
    skip_nonfinite: int = 0


@dataclasses.dataclass
class EvalConfig:
    """Periodic validation and early stopping on one of the task's metrics."""

    every: int = 100
    # examples per validation batch; null: train.batch_size
    batch_size: int | None = None
    # at most this many validation batches per evaluation; null: the whole validation split
    max_batches: int | None = None
    metric: str = "loss"
    mode: Literal["min", "max"] = "min"
    # stop after this many evaluations without an improvement of at least min_delta; 0: never
    patience: int = 0
    min_delta: float = 0.0


ENGINE_SECTIONS = {"optim": OptimConfig, "train": TrainConfig, "eval": EvalConfig}
TOP_LEVEL_KEYS = ("name", "task", "model", "data", "optim", "train", "eval", "search_space")


@dataclasses.dataclass
class RunConfig:
    """A validated recipe. `model` and `data` are instances of the task's dataclasses."""

    name: str
    task: str
    model: Any
    data: Any
    optim: OptimConfig
    train: TrainConfig
    eval: EvalConfig
    search_space: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-ready dict; `from_dict(cfg.to_dict())` gives back an equal config."""
        return {
            "name": self.name,
            "task": self.task,
            "model": _plain(self.model),
            "data": _plain(self.data),
            "optim": _plain(self.optim),
            "train": _plain(self.train),
            "eval": _plain(self.eval),
            **({"search_space": _plain(self.search_space)} if self.search_space else {}),
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def run_dir(self) -> Path:
        return Path(self.train.out_dir.replace("{name}", self.name.replace("/", "_")))


# --------------------------------------------------------------------------------- loading
def read_recipe(recipe: str | Path) -> dict[str, Any]:
    """Raw dict of a recipe file (path or built-in name), with `extends:` chains merged.

    `extends: other.yaml` (relative to the recipe's folder, or a built-in recipe name) loads
    that recipe first and deep-merges this one over it, so variants only state what differs.
    """
    path = resolve_recipe_path(recipe)
    return _read_with_extends(path, seen=())


def resolve_recipe_path(recipe: str | Path) -> Path:
    """A recipe argument is an existing path, else a built-in name (`titans-seq recipes`)."""
    path = Path(recipe)
    if path.is_file():
        return path
    from titans_seq.recipes import builtin_recipe_path

    return builtin_recipe_path(str(recipe))


def _read_with_extends(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise ConfigError(f"recipe `extends` chain loops: {chain}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"recipe {path} is not valid YAML: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(data).__name__}")
    base_ref = data.pop("extends", None)
    if base_ref is None:
        data.setdefault("name", _default_name(path))
        return data
    base_path = path.parent / base_ref
    if not base_path.is_file():
        base_path = resolve_recipe_path(base_ref)
    merged = deep_merge(_read_with_extends(base_path, (*seen, path)), data)
    merged["name"] = data.get("name", _default_name(path))
    return merged


def _default_name(path: Path) -> str:
    """Built-in recipes are named by their path under recipes/ (e.g. synthetic/tiny)."""
    from titans_seq.recipes import recipes_root

    try:
        return path.resolve().relative_to(recipes_root().resolve()).with_suffix("").as_posix()
    except ValueError:
        return path.stem


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, recursing into mappings present in both; inputs are not modified.

    An empty mapping in `update` replaces the inherited one instead of merging into it, so a
    variant can clear options it does not want (`mixer_options: {}` after a base that set
    `chunk_size` for the memory), which merging could never express.
    """
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and value and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """`"optim.lr=3e-4"` -> `("optim.lr", 3e-4)`; the value is read as YAML (lists, null...)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(raw: dict, overrides: list[str] | dict[str, Any]) -> dict:
    """Set dotted keys in a raw recipe dict (a copy is returned)."""
    out = copy.deepcopy(raw)
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides)
    for key, value in items:
        parts = key.split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(f"cannot set {key!r}: {prefix!r} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out


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
    from .tasks import get_task

    if not isinstance(raw, dict):
        raise ConfigError(f"a recipe must be a mapping, got {type(raw).__name__}")
    _reject_unknown(raw, TOP_LEVEL_KEYS, prefix="")
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
    if cfg.train.batch_size % cfg.train.grad_accum:
        raise ConfigError(
            f"train.batch_size ({cfg.train.batch_size}) must be divisible by train.grad_accum "
            f"({cfg.train.grad_accum})"
        )
    if cfg.optim.lr <= 0:
        raise ConfigError(f"optim.lr must be positive, got {cfg.optim.lr}")
    if not 0 <= cfg.optim.min_lr_ratio <= 1:
        raise ConfigError(f"optim.min_lr_ratio must be in [0, 1], got {cfg.optim.min_lr_ratio}")
    if cfg.optim.warmup_steps < 0:
        raise ConfigError(f"optim.warmup_steps must be >= 0, got {cfg.optim.warmup_steps}")
    if cfg.train.peak_flops is not None and cfg.train.peak_flops <= 0:
        raise ConfigError(f"train.peak_flops must be positive, got {cfg.train.peak_flops}")
    if cfg.eval.patience < 0:
        raise ConfigError(f"eval.patience must be >= 0, got {cfg.eval.patience}")
    if cfg.train.skip_nonfinite < 0:
        raise ConfigError(f"train.skip_nonfinite must be >= 0, got {cfg.train.skip_nonfinite}")


# ------------------------------------------------------------------------------ validation
def build_dataclass(cls: type | None, raw: Any, prefix: str) -> Any:
    """Instantiate dataclass `cls` from a mapping, checking keys and value types.

    `cls=None` means the task declares no schema for the section: the mapping is kept as is.
    """
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix}: expected a mapping of keys, got {raw!r}")
    if cls is None:
        return dict(raw)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    _reject_unknown(raw, fields, prefix + ".")
    hints = typing.get_type_hints(cls)
    values = {key: coerce(value, hints[key], f"{prefix}.{key}") for key, value in raw.items()}
    return cls(**values)


def _reject_unknown(raw: dict, known, prefix: str) -> None:
    for key in raw:
        if key not in known:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f"; did you mean '{prefix}{close[0]}'?" if close else ""
            raise ConfigError(
                f"unknown key '{prefix}{key}'{hint} (known: {', '.join(sorted(known))})"
            )


def coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against a type hint, converting only where YAML is lossy.

    PyYAML reads `3e-4` as a string (YAML 1.1 wants `3.0e-4`), and lists stand for tuples, so a
    numeric string is accepted for a float and a list for a tuple; nothing else is converted.
    """
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        errors = []
        for option in args:
            try:
                return coerce(value, option, key)
            except ConfigError as err:
                errors.append(err)
        raise ConfigError(f"{key}: expected {_type_name(hint)}, got {value!r}")
    if hint is type(None):
        if value is None:
            return None
        raise ConfigError(f"{key}: expected null, got {value!r}")
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{key}: expected one of {list(args)}, got {value!r}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true/false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected an integer, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{key}: expected a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{key}: expected a string, got {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise ConfigError(f"{key}: expected {len(args)} values, got {list(value)!r}")
            return tuple(coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        item = args[0] if args else Any
        items = [coerce(v, item, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        value_hint = args[1] if args else Any
        return {k: coerce(v, value_hint, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, key)
    raise ConfigError(f"{key}: unsupported type annotation {hint!r} in the config schema")


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if hint is type(None):
        return "null"
    return getattr(hint, "__name__", str(hint))


def _plain(value: Any) -> Any:
    """Dataclasses/tuples -> dicts/lists, so that `yaml.safe_dump` can write them."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
