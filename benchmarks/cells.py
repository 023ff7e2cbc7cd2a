"""A resumable store of benchmark cells: one JSON file per finished (configuration, seed).

A grid benchmark writes each cell as it finishes and skips the cells already on disk, so a
long grid can be split over processes, killed and resumed without redoing work. Files are
written atomically (temporary file + rename): a killed process never leaves half a cell.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

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


def exit_with_parent(parent_pid: int, poll_seconds: float = 2.0) -> None:
    """Pool initializer: end this worker soon after the process that started it is gone.

    A worker process outlives a grid process that is killed with a signal it cannot clean up
    after (SIGTERM from `kill` or `timeout`, SIGKILL): it would go on training its cell and
    writing into the cell's run folder, next to the rerun that resumes the same cell."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def mean_and_spread(values: list[float], digits: int = 3) -> str:
    """`mean` for one value, `mean ± std` (sample std) for several."""
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return f"{mean:.{digits}f}"
    std = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    return f"{mean:.{digits}f} ± {std:.{digits}f}"
