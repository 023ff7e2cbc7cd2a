"""Run logs: CSV files (always), experiment trackers (`trackers.py`), a tqdm progress bar,
messages through `logging`; the peak FLOP/s of known GPUs for the model-FLOPs-utilization
(MFU) column."""

from __future__ import annotations

import csv
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

LOG = logging.getLogger("titans_seq.training")
TRAIN_LOG = "train_log.csv"
EVAL_LOG = "eval_log.csv"

# Dense (no structured sparsity) 16-bit tensor-core peaks in FLOP/s, matched in order against
# `torch.cuda.get_device_name()`. Sources: NVIDIA H100 Tensor Core GPU datasheet (H100 SXM
# BF16/FP16 1,979 TFLOPS "with sparsity" = 989.5 dense; H100 PCIe 1,513 = 756 dense), NVIDIA
# H200 datasheet (1,979 with sparsity, same as H100 SXM), NVIDIA A100 datasheet (BF16/FP16
# 312 TFLOPS dense, SXM and PCIe). Devices not listed get no MFU unless train.peak_flops is set.
PEAK_FLOPS_16BIT: tuple[tuple[tuple[str, ...], float], ...] = (
    (("H100", "PCIE"), 756e12),
    (("H100",), 989e12),  # SXM5 (device name "NVIDIA H100 80GB HBM3")
    (("H200",), 989e12),
    (("A100",), 312e12),
)


def peak_flops(
    configured: float | None, device: torch.device, autocast_dtype: torch.dtype | None
) -> float | None:
    """Peak FLOP/s of one device for the MFU: `train.peak_flops` when set; else the table
    above for a known GPU training in bf16/fp16; else None (CPU, fp32 or an unknown GPU:
    no MFU is logged rather than one against an invented peak)."""
    if configured is not None:
        return float(configured)
    if device.type != "cuda" or autocast_dtype not in (torch.bfloat16, torch.float16):
        return None
    name = torch.cuda.get_device_name(device).upper()
    for keys, flops in PEAK_FLOPS_16BIT:
        if all(k in name for k in keys):
            return flops
    return None


class CSVLog:
    """Append rows of scalars to a CSV file whose columns are fixed by the first row.

    A resumed run first calls `truncate_after(step)`: rows logged after the checkpoint it
    resumes from (by the killed run) are dropped, so the log reads like an uninterrupted run.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.columns: list[str] | None = None
        if self.path.exists() and self.path.stat().st_size:
            with open(self.path, newline="") as f:
                self.columns = next(csv.reader(f), None)

    def truncate_after(self, step: int) -> None:
        if self.columns is None:
            return
        with open(self.path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("step") and int(r["step"]) <= step]
        with open(self.path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)

    def write(self, row: dict[str, Any]) -> None:
        new_file = self.columns is None
        if new_file:
            self.columns = list(row)
        with open(self.path, "a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            writer.writerow({k: _fmt(row.get(k)) for k in self.columns})


def _fmt(value: Any) -> Any:
    # repr: the shortest text that reads back as the same float (logs are compared exactly)
    return repr(value) if isinstance(value, float) else value


def read_csv(path: Path) -> list[dict[str, float]]:
    """Rows of a log written by `CSVLog`, with numbers parsed (empty cells skipped)."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [
            {k: float(v) for k, v in row.items() if v not in ("", None)}
            for row in csv.DictReader(f)
        ]


class _BarHandler(logging.Handler):
    """Writes log records above the progress bar (tqdm.write) so the bar stays intact."""

    def __init__(self, bar):
        super().__init__(logging.INFO)
        self.bar = bar

    def emit(self, record: logging.LogRecord) -> None:
        self.bar.write(self.format(record))


class RunLogger:
    """Everything rank 0 reports about a run: CSVs, the trackers (TensorBoard, MLflow, W&B),
    the progress bar, and messages through `logging` (logger "titans_seq.training").

    Messages go to the console above the bar unless the application has configured logging
    itself (a handler on "titans_seq", an ancestor or the root): then its handlers get them
    and nothing is printed twice. `quiet` prints nothing; the logs are written either way.
    """

    def __init__(
        self,
        run_dir: Path,
        total_steps: int,
        start_step: int,
        progress: bool,
        trackers: list | None = None,
        quiet: bool = False,
    ):
        self.run_dir = Path(run_dir)
        self.quiet = quiet  # nothing on the console (the CSV logs are still written)
        self.train_csv = CSVLog(self.run_dir / TRAIN_LOG)
        self.eval_csv = CSVLog(self.run_dir / EVAL_LOG)
        self.train_csv.truncate_after(start_step)
        self.eval_csv.truncate_after(start_step)
        self.trackers = list(trackers or [])
        self.bar = tqdm(
            total=total_steps,
            initial=start_step,
            disable=not progress,
            desc="train",
            unit="step",
            dynamic_ncols=True,
        )
        self.handler = None
        if not quiet and not LOG.hasHandlers():
            self.handler = _BarHandler(self.bar)
            LOG.addHandler(self.handler)
            self._level = LOG.level
            LOG.setLevel(logging.INFO)

    def train(self, step: int, values: dict[str, float]) -> None:
        self.train_csv.write({"step": step, **values})
        self._track("train", step, values)
        shown = {"loss": values["loss"], "lr": values["lr"]}
        if "tokens_per_s" in values:
            shown["tok/s"] = values["tokens_per_s"]
        else:
            shown["ex/s"] = values["examples_per_s"]
        postfix = {k: f"{v:.4g}" for k, v in shown.items()}
        if "mfu" in values:
            postfix["mfu"] = f"{100 * values['mfu']:.1f}%"
        self.bar.set_postfix(postfix, refresh=False)

    def eval(self, step: int, values: dict[str, float]) -> None:
        self.eval_csv.write({"step": step, **values})
        self._track("val", step, values)
        self.message(f"step {step}: " + "  ".join(f"val_{k}={v:.5g}" for k, v in values.items()))

    def advance(self, steps: int = 1) -> None:
        self.bar.update(steps)

    def message(self, text: str) -> None:
        if not self.quiet:
            LOG.info(text)

    def _track(self, prefix: str, step: int, values: dict[str, float]) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.log(prefix, step, values)
            except Exception as error:  # noqa: BLE001 - a tracker's server went away
                # the run goes on: the CSV logs hold every row the tracker missed
                self.trackers.remove(tracker)
                warnings.warn(
                    f"{type(tracker).__name__} stopped at step {step} ({type(error).__name__}: "
                    f"{str(error)[:200]}); it gets no further rows, the CSV logs have them all",
                    RuntimeWarning,
                    stacklevel=2,
                )

    def close(self) -> None:
        self.bar.close()
        for tracker in self.trackers:
            tracker.close()
        if self.handler is not None:
            LOG.removeHandler(self.handler)
            LOG.setLevel(self._level)
            self.handler = None
