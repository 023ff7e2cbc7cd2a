"""Optuna tuning of a recipe: every trial is one `titans_seq.training.train` run.

Several workers (processes, machines) share a study by pointing at the same storage and study
name; each runs its own `n_trials` trials, and the storage hands out unique trial numbers, so
nothing is lost or run twice. Re-running the same command adds trials to the study.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import re
import socket
import time
import warnings
from pathlib import Path
from typing import Any

from titans_seq.errors import ConfigError, UserError, hide_password
from titans_seq.training.config import RunConfig, apply_overrides, from_dict, read_recipe

from .search_space import Param, load_search_space

log = logging.getLogger(__name__)

PRUNERS = ("median", "hyperband", "none")
HEARTBEAT_S = 30  # a running trial's worker writes a heartbeat this often
GRACE_S = 120  # a trial whose heartbeat is older counts as failed (its worker stopped)


@dataclasses.dataclass
class TuneResult:
    study_name: str
    storage: str
    out_dir: Path
    n_trials: int  # in the whole study, all workers
    n_complete: int
    n_pruned: int
    n_failed: int
    # running now, or left by a worker that stopped: such a trial is marked failed once its
    # heartbeat is older than GRACE_S seconds (the next worker to start does it)
    n_running: int
    best_value: float | None
    best_params: dict[str, Any]
    best_recipe: Path | None


def default_storage(out_dir: Path) -> str:
    """An SQLite file in the tuning folder: no server needed on one machine."""
    return f"sqlite:///{Path(out_dir).resolve() / 'study.db'}"


def postgres_driver_url(url: str) -> str:
    """Pick the installed PostgreSQL driver for a driver-less `postgresql://` URL.

    SQLAlchemy 2.1 maps `postgresql://` to psycopg 3; the project's `postgres` extra installs
    psycopg2-binary. Name psycopg2 explicitly when psycopg 3 is absent, so both work.
    """
    import importlib.util

    for scheme in ("postgresql://", "postgres://"):
        if url.startswith(scheme):
            if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2"):
                return "postgresql+psycopg2://" + url[len(scheme) :]
            return "postgresql://" + url[len(scheme) :]
    return url


class StorageError(UserError, RuntimeError):
    """The Optuna storage URL is malformed, or its database cannot be opened or reached."""


def check_storage_url(url: str) -> str:
    """`url` as SQLAlchemy parses it, with a missing SQLite folder created; StorageError for
    a string that is not a database URL. Returns the URL with the password hidden, for
    messages."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    example = "e.g. sqlite:///runs/tune/study.db or postgresql://user:password@host/db"
    try:
        parsed = make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        _ = parsed.port  # a non-numeric port fails here
    except (ArgumentError, ValueError) as error:
        raise StorageError(
            f"--storage {hide_password(url)!r} is not a database URL ({error}); {example}"
        ) from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        folder = Path(parsed.database).expanduser().parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StorageError(
                f"--storage {shown}: cannot create the folder {folder}: {error.strerror or error}"
            ) from None
    return shown


def make_storage(url: str, attempts: int = 5):
    """An Optuna RDB storage; tolerates workers that create a fresh database's schema at once.

    Workers started together on an empty PostgreSQL database race to create Optuna's tables
    and types; the loser gets a unique-violation error although the schema now exists, so
    the connection is retried after a short random pause. A database that stays unreachable
    raises StorageError (one line: the URL without its password, and the driver's reason).
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    shown = check_storage_url(url)
    url = postgres_driver_url(url)
    if url.startswith("sqlite"):
        # wait for the file lock instead of failing when two local workers write at once
        kwargs = {"connect_args": {"timeout": 60}}
    else:
        # pool_pre_ping: survive a database server that closed idle connections between trials
        kwargs = {"pool_pre_ping": True}
    for attempt in range(attempts):
        try:
            # heartbeats: a trial whose worker died (killed, machine lost) is marked failed
            # by the next worker instead of staying "running" forever
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
                )
        except (SQLAlchemyError, ImportError) as err:
            if attempt == attempts - 1 or isinstance(err, ImportError):
                raise StorageError(
                    f"cannot open the Optuna storage {shown}: {_reason(err)}"
                ) from None
            log.info("storage not ready (%s); retrying", type(err).__name__)
            time.sleep(0.2 + random.random())
    raise AssertionError("unreachable")


def _reason(error: Exception) -> str:
    """The driver's own first line (SQLAlchemy wraps it in a page of context)."""
    original = getattr(error, "orig", None) or error
    lines = [ln.strip() for ln in str(original).splitlines() if ln.strip()]
    return lines[0] if lines else type(error).__name__


def check_study_name(name: str) -> str:
    """A study name is also a folder name under runs/tune: letters, digits, '.', '_', '-'."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", name):
        raise ConfigError(
            f"study name {name!r}: use letters, digits, '.', '_' and '-' only (it names a "
            "folder), not starting with '.' or '-'"
        )
    return name


def make_pruner(name: str, cfg: RunConfig):
    """Pruning decisions come from the validation metric reported at every evaluation."""
    import optuna

    if name == "median":
        # a trial is stopped when its metric is worse than the median of earlier trials at
        # the same step; the first trials and the first evaluation always run
        return optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=cfg.eval.every)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=cfg.eval.every, max_resource=cfg.train.max_steps, reduction_factor=3
        )
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ValueError(f"pruner must be one of {PRUNERS}, got {name!r}")


def tune(
    recipe: str | Path | dict,
    n_trials: int,
    overrides: list[str] | None = None,
    storage: str | None = None,
    study_name: str | None = None,
    search_space: str | Path | None = None,
    out_dir: str | Path | None = None,
    pruner: str = "median",
    sampler_seed: int | None = None,
    timeout: float | None = None,
    plots: bool = True,
) -> TuneResult:
    """Run `n_trials` trials of a recipe's search space in this process (one worker).

    The study lives in `storage` (default: SQLite in `out_dir`); each trial trains in
    `out_dir/trials/trial_NNNN` (trial numbers are unique in the study). At the end this worker
    exports the study's best configuration as `out_dir/best_recipe.yaml`, a table of trials
    and the study plots.
    """
    import optuna

    if n_trials <= 0:
        raise ValueError(f"--trials must be a positive integer, got {n_trials}")
    raw = read_recipe(recipe) if not isinstance(recipe, dict) else dict(recipe)
    raw = apply_overrides(raw, overrides or [])
    base_cfg = from_dict(raw)
    params = load_search_space(raw, search_space)
    study_name = check_study_name(study_name or base_cfg.name.replace("/", "_"))
    out_dir = Path(out_dir) if out_dir is not None else Path("runs") / "tune" / study_name
    out_dir.mkdir(parents=True, exist_ok=True)
    storage = storage or default_storage(out_dir)
    direction = "minimize" if base_cfg.eval.mode == "min" else "maximize"

    study = optuna.create_study(
        storage=make_storage(storage),
        study_name=study_name,
        direction=direction,
        sampler=optuna.samplers.TPESampler(seed=sampler_seed),
        pruner=make_pruner(pruner, base_cfg),
        load_if_exists=True,
    )
    if study.direction.name.lower() != direction:
        raise ValueError(
            f"study {study_name!r} in {storage} is set to {study.direction.name.lower()}, but "
            f"the recipe's eval.mode={base_cfg.eval.mode} asks to {direction}"
        )
    objective = Objective(raw, params, out_dir / "trials", base_cfg.eval.metric)
    # catch=Exception: a trial that raises is recorded as FAIL and the worker goes on
    study.optimize(objective, n_trials=n_trials, timeout=timeout, catch=(Exception,))
    return summarize(study, raw, storage, out_dir, plots)


class Objective:
    """One trial: sample the space, train, report every evaluation, return the best value."""

    def __init__(self, raw: dict, params: list[Param], trials_dir: Path, metric: str):
        self.raw = {k: v for k, v in raw.items() if k != "search_space"}
        self.params = params
        self.trials_dir = trials_dir
        self.metric = metric

    def __call__(self, trial) -> float:
        import optuna

        from titans_seq.training.loop import train

        values = {p.key: p.suggest(trial) for p in self.params}
        run_dir = self.trials_dir / f"trial_{trial.number:04d}"
        trial.set_user_attr("run_dir", str(run_dir.resolve()))
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")

        def report(step: int, metrics: dict[str, float]) -> None:
            value = metrics[self.metric]
            if math.isnan(value):
                raise FloatingPointError(f"validation {self.metric} is NaN at step {step}")
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned(f"pruned at step {step} ({self.metric}={value:.6g})")

        try:  # a sampled combination the recipe refuses fails the trial like a crash does
            overrides = {**values, "train.out_dir": str(run_dir), "train.progress": False}
            cfg = from_dict(apply_overrides(self.raw, overrides))
            result = train(cfg, hooks=[report])
        except optuna.TrialPruned:
            raise
        except Exception as err:
            # the study records the trial as failed; keep the reason next to it
            trial.set_user_attr("error", f"{type(err).__name__}: {err}")
            raise
        if result.best_metric is None:
            raise RuntimeError("the run finished without any evaluation (check eval.every)")
        return result.best_metric


def best_recipe(raw: dict, best_params: dict[str, Any]) -> dict[str, Any]:
    """The recipe with the best trial's values filled in and the search space removed."""
    tuned = apply_overrides({k: v for k, v in raw.items() if k != "search_space"}, best_params)
    tuned["name"] = f"{raw.get('name', 'recipe')}-tuned"
    return from_dict(tuned).to_dict()


def summarize(study, raw: dict, storage: str, out_dir: Path, plots: bool) -> TuneResult:
    """Export the best recipe, the trials table and the plots of the whole study."""
    import yaml
    from optuna.trial import TrialState

    from titans_seq.training.checkpoint import atomic_write_text

    trials = study.get_trials(deepcopy=False)
    count = {s: sum(t.state == s for t in trials) for s in TrialState}
    best_path, best_value, best_params = None, None, {}
    if count[TrialState.COMPLETE]:
        best = study.best_trial
        best_value, best_params = best.value, dict(best.params)
        best_path = out_dir / "best_recipe.yaml"
        header = (
            f"# best trial {best.number} of study {study.study_name}: "
            f"{raw.get('eval', {}).get('metric', 'loss')} = {best.value:.6g}\n"
        )
        atomic_write_text(
            best_path, header + yaml.safe_dump(best_recipe(raw, best_params), sort_keys=False)
        )
    if trials:
        frame = study.trials_dataframe()
        atomic_write_text(out_dir / "trials.csv", frame.to_csv(index=False))
    if plots:
        from .plots import plot_study

        plot_study(study, out_dir)
    return TuneResult(
        study_name=study.study_name,
        storage=storage,
        out_dir=out_dir,
        n_trials=len(trials),
        n_complete=count[TrialState.COMPLETE],
        n_pruned=count[TrialState.PRUNED],
        n_failed=count[TrialState.FAIL],
        n_running=count[TrialState.RUNNING] + count[TrialState.WAITING],
        best_value=best_value,
        best_params=best_params,
        best_recipe=best_path,
    )
