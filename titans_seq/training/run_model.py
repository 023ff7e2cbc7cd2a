"""`load_run_model`: the trained model of a run folder of the shared training loop."""

from __future__ import annotations

from pathlib import Path

from .config import load_config
from .run_files import RUN_CONFIG, run_weights
from .tasks import get_task


def load_run_model(run: str | Path, weights: str = "best"):
    """(config, task, model in eval mode) of a training run folder.

    The model is rebuilt by the run's task from its `config.yaml`; `weights="best"` loads
    `best_model.safetensors` (the best validation metric) when the run wrote one, else,
    as `weights="last"` does, the newest complete checkpoint (so a run can be inspected
    while it trains). Every file is verified (digests, manifests) on the way.
    """
    run = Path(run)
    if weights not in ("best", "last"):
        raise ValueError(f"weights must be 'best' or 'last', got {weights!r}")
    config_file = run / RUN_CONFIG
    if not config_file.is_file():
        raise FileNotFoundError(f"{run} is not a training run folder (no {RUN_CONFIG})")
    cfg = load_config(config_file)
    task = get_task(cfg.task)
    model = task.build_model(cfg)
    model.load_state_dict(run_weights(run, weights))
    return cfg, task, model.eval()
