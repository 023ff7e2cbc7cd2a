"""What the scikit-learn estimators share: training on in-memory data through the shared
loop, and saving/loading a fitted model as safetensors + JSON (never pickle)."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from titans_seq.backbone import pin_saved_defaults
from titans_seq.checks import check_int, check_number
from titans_seq.errors import DataError

from ..devices import resolve_device
from .checkpoint import CheckpointError, atomic_write_text, load_weights, save_weights
from .config import from_dict
from .distributed import broadcast_module, broadcast_object, local_rank, process_group
from .divergence import TrainingDiverged
from .loop import BEST_WEIGHTS, TrainResult, train
from .model_folder import verify_folder, write_manifest
from .tasks import Task

WEIGHTS_FILE = "model.safetensors"


@dataclasses.dataclass
class EstimatorTraining:
    """The optimisation settings an estimator exposes (epochs, batch, lr, early stopping),
    checked when made: an estimator makes them before it reads any data, so a bad value is
    reported under its parameter name first."""

    max_epochs: int
    batch_size: int
    learning_rate: float
    patience: int
    random_state: int | None
    device: str
    verbose: bool
    weight_decay: float = 0.1
    # the averaged weights kept instead of the trained ones (`optim.ema_decay`); None: off
    ema_decay: float | None = None

    def __post_init__(self) -> None:
        check_int("max_epochs", self.max_epochs, 1)
        check_int("batch_size", self.batch_size, 1)
        check_int("patience", self.patience, 0)
        check_number("learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_number("weight_decay", self.weight_decay, low=0.0)
        if self.ema_decay is not None:
            check_number("ema_decay", self.ema_decay, low=0.0, high=1.0, low_open=True)
        if self.random_state is not None:
            check_int("random_state", self.random_state, 0)


def fit_in_memory(
    task: Task,
    task_name: str,
    model: dict[str, Any],
    data: dict[str, Any],
    num_train: int,
    has_validation: bool,
    settings: EstimatorTraining,
    build_model,
    epoch_examples: int | None = None,
) -> tuple[nn.Module, TrainResult, int]:
    """Train `task` (holding its datasets) with the shared loop in a throw-away run folder.

    One epoch = ceil(epoch_examples / batch size) steps (epoch_examples: None = num_train;
    fewer draws each epoch's examples at random, the next epoch continuing the same shuffled
    order over all num_train); evaluation (and early stopping on the validation loss, when
    there is a validation set) once per epoch. `build_model()` makes
    a fresh network that receives the best validation weights. Returns (network on the
    training device, the run's result, steps per epoch).

    Under torchrun every process calls this with the same data: each computes its share of
    every batch (the loop's data-parallel path), and all return the same network.
    """
    batch_size = min(settings.batch_size, num_train)
    steps_per_epoch = -(-min(epoch_examples or num_train, num_train) // batch_size)
    total_steps = steps_per_epoch * settings.max_epochs
    with (
        process_group(settings.device) as ctx,
        tempfile.TemporaryDirectory(prefix=f"titans_{task_name}_") as run_dir,
    ):
        device = ctx.device
        cfg = from_dict(
            {
                "task": task_name,
                "name": task_name,
                "model": model,
                "data": data,
                "optim": {
                    "lr": settings.learning_rate,
                    "weight_decay": settings.weight_decay,
                    "warmup_steps": min(100, total_steps // 10),
                    "ema_decay": settings.ema_decay,
                },
                "train": {
                    "max_steps": total_steps,
                    "batch_size": batch_size,
                    "seed": 0 if settings.random_state is None else int(settings.random_state),
                    "device": str(device),
                    "out_dir": run_dir,
                    "progress": bool(settings.verbose),
                    "tensorboard": False,
                    "plot": False,
                    "checkpoint_every": total_steps,
                    "keep_checkpoints": 1,
                    "log_every": max(1, steps_per_epoch // 4),
                },
                "eval": {
                    "every": steps_per_epoch,
                    "metric": "loss",
                    "mode": "min",
                    "patience": settings.patience if has_validation else 0,
                },
            }
        )
        try:
            result = train(cfg, task=task, quiet=not settings.verbose)
        except TrainingDiverged as err:
            # the estimator's own parameter names, not the recipe keys of the loop's message
            raise TrainingDiverged(
                err.step,
                err.what,
                err.loss,
                err.grad_norm,
                f"Try a lower learning_rate (now {settings.learning_rate:g}); check the "
                "input for extreme values.",
            ) from None
        # under torchrun only the first process writes the run folder: it reads the best
        # weights and every process receives them
        best = Path(run_dir) / BEST_WEIGHTS
        if not broadcast_object(best.is_file() if ctx.is_main else None, ctx):
            raise TrainingDiverged(
                result.step, "validation metric", float("nan"), None,
                "No evaluation produced a best model.",
            )  # fmt: skip
        network = build_model()
        if ctx.is_main:
            network.load_state_dict(load_weights(best))
        network = network.to(device)
        broadcast_module(network, ctx)
    return network.eval(), result, steps_per_epoch


def save_fitted(path, model: nn.Module, meta: dict[str, Any], config_file: str) -> Path:
    """Write `path/` with the weights (safetensors), `config_file` (JSON) and the manifest
    that checksums both (`model_folder`), each atomically, the manifest last."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_weights(path / WEIGHTS_FILE, {k: v.cpu() for k, v in model.state_dict().items()})
    atomic_write_text(path / config_file, json.dumps(meta, indent=2, default=_plain))
    write_manifest(path, [WEIGHTS_FILE, config_file])
    return path


def _plain(value):
    """JSON for the NumPy scalars and arrays a parameter grid leaves in get_params()."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def load_fitted(
    path, config_file: str, kind: str, format_version: int, allow_unverified: bool = False
):
    """(meta dict, state dict) of a model written by `save_fitted`; clear errors for a folder
    that is not one, a corrupt JSON file or an unknown format version.

    Versions 1 .. format_version are read: `meta["format_version"]` tells the caller which
    one it got (older versions predate changes of the memory's defaults, see
    `saved_mixer_options`). A folder without a manifest is refused unless
    `allow_unverified` (`verify_folder`).
    """
    path = Path(path)
    if not (path / config_file).is_file() or not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{path} is not a saved {kind} ({config_file} + {WEIGHTS_FILE})")
    verify_folder(path, required=[WEIGHTS_FILE, config_file], allow_unverified=allow_unverified)
    try:
        meta = json.loads((path / config_file).read_text())
    except json.JSONDecodeError as error:
        raise DataError(f"{path / config_file} is corrupt: {error}") from None
    version = meta.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= format_version:
        raise DataError(f"{path / config_file}: unsupported format version {version}")
    return meta, load_weights(path / WEIGHTS_FILE, require_digest=True)


def load_described_weights(
    model: nn.Module, weights: dict, source: Path, fields: dict[str, str | tuple[str, ...]]
) -> None:
    """Load `weights` into `model`, which was built from the config file `source`; a
    CheckpointError names the config's field that disagrees with the weights' shapes
    instead of torch's size-mismatch report. `fields`: weight-name prefix -> the field that
    shapes those weights, or a tuple of the field behind each axis."""
    expected = model.state_dict()
    wrong = [
        (name, tuple(weights[name].shape), tuple(value.shape))
        for name, value in expected.items()
        if name in weights and tuple(weights[name].shape) != tuple(value.shape)
    ]
    missing = [name for name in expected if name not in weights]
    unexpected = [name for name in weights if name not in expected]
    if not (wrong or missing or unexpected):
        model.load_state_dict(weights)
        return
    axis = None
    if wrong:
        name, saved, described = wrong[0]
        if len(saved) == len(described):
            axis = next(i for i, (a, b) in enumerate(zip(saved, described)) if a != b)
        detail = (
            f"{name!r} is {list(saved)} in the weights, {list(described)} in the model it describes"
        )
    elif missing:
        name = missing[0]
        detail = (
            f"the weights lack {len(missing)} tensor(s) of the model it describes, e.g. {name!r}"
        )
    else:
        name = unexpected[0]
        detail = f"the weights hold {len(unexpected)} tensor(s) it has no place for, e.g. {name!r}"
    field = next(
        (f for prefix, f in fields.items() if name.startswith(prefix)),
        "the architecture (mixer, mixer_options, dim, depth, heads)",
    )
    if isinstance(field, tuple):
        field = field[axis] if axis is not None and axis < len(field) else " or ".join(field)
    raise CheckpointError(
        f"{source} does not describe the weights beside it: {detail}; its {field} was "
        "edited, or the weights come from another model"
    )


def saved_mixer_options(mixer: str, mixer_options: dict | None, generation: int) -> dict:
    """The mixer options an estimator was trained with, from those it saved and the
    generation of defaults it was saved under (`pin_saved_defaults`)."""
    return pin_saved_defaults(mixer_options, [mixer], generation)[0]


def estimator_device(device: str) -> str:
    """The concrete device an estimator's `device` parameter means ("auto" -> cuda or cpu;
    under torchrun, the process's own GPU)."""
    return str(resolve_device(device, local_rank()))
