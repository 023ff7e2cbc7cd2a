"""Experiment trackers: TensorBoard, MLflow and Weights & Biases behind one small interface.

    train:
      tensorboard: auto          # event files in <run>/tensorboard when the package exists
      trackers: [mlflow, wandb]  # each an optional package, asked for by name
      mlflow_uri: null           # null: sqlite:///<run>/mlflow.db; or a server / database URI
      wandb_mode: offline        # offline (files in <run>/wandb, `wandb sync` later) | online

A tracker gets every training and validation log row (`log(prefix, step, values)`, prefix
"train" or "val", the same numbers as the CSV logs) and the run's resolved config once. The
run folder keeps each tracker's run id (`trackers.json`), so a resumed run continues the
same MLflow run and W&B run instead of starting new ones. A tracker asked for by name whose
package is missing stops the run before it starts, with the pip command; TensorBoard keeps
its `auto` rule (used when installed, silently skipped otherwise).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any, Protocol

from ..errors import UserError, hide_password
from .checkpoint import atomic_write_text
from .config import ConfigError

IDS_FILE = "trackers.json"
PACKAGES = {"mlflow": "mlflow-skinny", "wandb": "wandb"}  # pip names of the trackers' modules


class TrackerError(UserError, RuntimeError):
    """A tracker could not start: its store or server refused or could not be reached."""


def _starting(kind: str, where: str, start):
    """start() -> the tracker, or TrackerError naming it, `where` and the library's reason."""
    try:
        return start()
    except Exception as error:  # noqa: BLE001 - any failure of a third-party store
        # the library's own message may quote the URI, password included
        reason = hide_password((str(error).strip().splitlines() or [type(error).__name__])[0][:300])
        raise TrackerError(
            f"train.trackers: {kind} could not start at {where}: {type(error).__name__}: {reason}"
        ) from None


class Tracker(Protocol):
    def log(self, prefix: str, step: int, values: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _flat(config: dict, prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 1e-3}} -> {"optim.lr": 1e-3}: the override names of the recipe."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, name + "."))
        else:
            flat[name] = value
    return flat


class TensorBoardTracker:
    def __init__(self, directory: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(directory))

    def log(self, prefix: str, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        self.writer.close()


class MLflowTracker:
    """One MLflow run per training run, in experiment `name`; params are the resolved
    config's values (`optim.lr`, ...), metrics `train/loss`, `val/mse`, ..."""

    def __init__(self, uri: str, name: str, config: dict, run_id: str | None):
        import mlflow
        from mlflow.entities import Param

        self.client = mlflow.MlflowClient(tracking_uri=uri)
        if run_id is None:
            experiment = self.client.get_experiment_by_name(name)
            experiment_id = (
                experiment.experiment_id if experiment else self.client.create_experiment(name)
            )
            run = self.client.create_run(experiment_id, run_name=name)
            self.run_id = run.info.run_id
            # MLflow caps a param value at 6,000 characters and refuses logging one twice
            params = [Param(k, str(v)[:6000]) for k, v in _flat(config).items()]
            for start in range(0, len(params), 100):  # its batch limit
                self.client.log_batch(self.run_id, params=params[start : start + 100])
        else:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")

    def log(self, prefix: str, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)  # MLflow's milliseconds
        metrics = [Metric(f"{prefix}/{k}", float(v), now, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker:
    """A W&B run in `mode` ("offline": files under <run>/wandb, uploaded by `wandb sync`)."""

    def __init__(self, directory: Path, mode: str, name: str, config: dict, run_id: str | None):
        import wandb

        self.run = wandb.init(
            project=name,
            name=name,
            dir=str(directory),
            mode=mode,
            config=config,
            id=run_id,
            resume="allow" if run_id else None,
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.run_id = self.run.id

    def log(self, prefix: str, step: int, values: dict[str, float]) -> None:
        self.run.log({f"{prefix}/{k}": v for k, v in values.items()}, step=step)

    def close(self) -> None:
        self.run.finish()


def check_trackers(train_config) -> None:
    """Refuse a tracker whose package is missing, before any work (ConfigError); the
    config schema has already refused names other than those of `PACKAGES`."""
    import importlib.util

    for name in train_config.trackers:
        if importlib.util.find_spec(name) is None:
            raise ConfigError(
                f"train.trackers names {name!r} but the {name} package is not installed: "
                f"pip install {PACKAGES[name]} (or remove it from train.trackers)"
            )


def _tensorboard(directory: Path, wanted: bool | str) -> TensorBoardTracker | None:
    if wanted is False:
        return None
    try:
        return TensorBoardTracker(directory)
    except ImportError:
        if wanted is True:
            warnings.warn(
                "train.tensorboard is true but the tensorboard package is not installed: no "
                "TensorBoard logs for this run (the CSV logs are written); pip install "
                "tensorboard, or set train.tensorboard=auto or false",
                stacklevel=5,
            )
        return None


def open_trackers(run_dir: Path, train_config, name: str, config: dict) -> list[Tracker]:
    """The run's trackers, continuing the runs recorded in `<run_dir>/trackers.json`
    (`check_trackers` has passed: the training loop calls it before any work)."""
    run_dir = Path(run_dir)
    trackers: list[Tracker] = []
    tensorboard = _tensorboard(run_dir / "tensorboard", train_config.tensorboard)
    if tensorboard is not None:
        trackers.append(tensorboard)
    ids_path = run_dir / IDS_FILE
    try:
        ids = json.loads(ids_path.read_text()) if ids_path.exists() else {}
    except (OSError, json.JSONDecodeError) as error:
        raise ConfigError(
            f"{ids_path} is unreadable ({error}); remove it to start new tracker runs"
        ) from None
    if "mlflow" in train_config.trackers:
        uri = train_config.mlflow_uri or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
        tracker = _starting(
            "MLflow",
            hide_password(uri),
            lambda: MLflowTracker(uri, name, config, ids.get("mlflow")),
        )
        ids["mlflow"] = tracker.run_id
        trackers.append(tracker)
    if "wandb" in train_config.trackers:
        mode = train_config.wandb_mode
        tracker = _starting(
            "Weights & Biases",
            f"{run_dir / 'wandb'} ({mode})",
            lambda: WandbTracker(run_dir, mode, name, config, ids.get("wandb")),
        )
        ids["wandb"] = tracker.run_id
        trackers.append(tracker)
    if ids:
        atomic_write_text(ids_path, json.dumps(ids, indent=1) + "\n")
    return trackers
