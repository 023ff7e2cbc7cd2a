"""A resumable store of benchmark cells: one JSON file per finished (configuration, seed).

A grid benchmark writes each cell as it finishes and skips the cells already on disk, so a
long grid can be split over processes, killed and resumed without redoing work. Files are
written atomically (temporary file + rename): a killed process never leaves half a cell.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

from titans_seq.training.checkpoint import atomic_write_text


class CellStore:
    """`<root>/cells/<name>.json` for finished cells and `<root>/runs/<name>/` for their runs."""

    def __init__(self, root: Path | str):
        self.root = Path(root)
        self.cells = self.root / "cells"

    def path(self, name: str) -> Path:
        return self.cells / f"{name}.json"

    def done(self, name: str) -> bool:
        return self.path(name).exists()

    def resumable_run_dir(self, name: str) -> tuple[Path, bool]:
        """The run directory of an unfinished cell, and whether to resume it: a cell killed
        after its first checkpoint continues from its newest one (the training loop resumes
        exactly: model, optimiser, scheduler, data order and early-stopping state); a folder
        without a checkpoint is emptied and the cell starts again."""
        from titans_seq.training.checkpoint import latest_checkpoint
        from titans_seq.training.loop import CHECKPOINT_DIR

        run_dir = self.root / "runs" / name
        if run_dir.exists() and latest_checkpoint(run_dir / CHECKPOINT_DIR) is not None:
            return run_dir, True
        return self.fresh_run_dir(name), False

    def fresh_run_dir(self, name: str) -> Path:
        """The run directory of a cell, emptied first: an unfinished cell starts again."""
        run_dir = self.root / "runs" / name
        if run_dir.exists():
            shutil.rmtree(run_dir)
        return run_dir

    def save(self, name: str, record: dict) -> None:
        atomic_write_text(self.path(name), json.dumps(record, indent=1))

    def load_all(self) -> list[dict]:
        return [json.loads(p.read_text()) for p in sorted(self.cells.glob("*.json"))]


def git_commit() -> str:
    """The checkout's short commit, with `+dirty` when tracked files differ from it. The
    environment variable TITANS_SEQ_COMMIT, when set, names it instead: a copy of a checkout
    without its `.git` (sent to a remote GPU machine, say) cannot tell its own commit."""
    if os.environ.get("TITANS_SEQ_COMMIT"):
        return os.environ["TITANS_SEQ_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "titans_seq", "domains", "data", "recipes"],
            capture_output=True,
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


# The commit of the code this process runs, taken when the runner starts: a grid process
# lives for hours while the checkout moves on, and its cells must name the code they ran
STARTED_AT_COMMIT = git_commit()


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"


def provenance(device: torch.device) -> dict:
    """What a cell records about where and when it ran (the commit: the code the process
    started with, `STARTED_AT_COMMIT`)."""
    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "commit": STARTED_AT_COMMIT,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }


def mean_and_spread(values: list[float], digits: int = 3) -> str:
    """`mean` for one value, `mean ± std` (sample std) for several."""
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return f"{mean:.{digits}f}"
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return f"{mean:.{digits}f} ± {std:.{digits}f}"
