"""How a fit grows with the panel: time and peak memory of `TitansForecaster` on 1K, 10K
and 100K hourly series resampled from M4 Hourly.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/panel_scale.py --threads 2
    python benchmarks/studies/panel_scale.py --sizes 200 2000 --rows 240   # smoke

Series i of a panel is the last `--rows` training hours of an M4 Hourly series drawn at
random, times a random scale in [0.5, 2] (so that no two series are the same), on its own
hourly grid. Each size runs in a fresh process: it builds the panel (a long frame with
string `unique_id`s, as users hold one), then fits `TitansForecaster(horizon=48)` with its
defaults except the training budget, fixed at `--windows-per-series` windows of each series
(one epoch), and the batch, 32 windows at every size (the default's rule takes 128 on long
schedules), so that what grows with the panel is the reading, scaling and windowing of
the data, the same number of steps per series, and the forecast of every series
(`predict` in partitions of `--partition` series). Peak memory is the process's resident
peak over the fit and forecast (the panel itself included), reset after the panel is built.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness

HORIZON = 48


def resampled_panel(size: int, rows: int, seed: int):
    """A long frame (`unique_id`, `ds`, `y`) of `size` series of `rows` hours each."""
    import numpy as np
    import pandas as pd

    from titans_seq.data.m4 import load_m4

    source = [g.to_numpy()[-rows:] for _, g in load_m4("Hourly").train.groupby("unique_id")["y"]]
    source = [s for s in source if len(s) == rows]
    rng = np.random.default_rng(seed)
    picks = rng.integers(len(source), size=size)
    scales = rng.uniform(0.5, 2.0, size=size)
    values = np.concatenate([source[p] * s for p, s in zip(picks, scales, strict=True)])
    ids = np.array([f"S{i:06d}" for i in range(size)], dtype=object)
    grid = pd.date_range("2020-01-01", periods=rows, freq="h").to_numpy()
    return pd.DataFrame({"unique_id": np.repeat(ids, rows), "ds": np.tile(grid, size), "y": values})


def _resident_peak_mib() -> float:
    """The process's resident peak since the last reset (VmHWM), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_resident_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:  # not Linux: the peak then includes building the panel
        return False


def run_one(size: int, args) -> dict:
    import numpy as np
    import torch

    from titans_seq.domains.forecasting import TitansForecaster

    torch.set_num_threads(args.threads)
    panel = resampled_panel(size, args.rows, args.seed)
    panel_mib = panel.memory_usage(deep=True).sum() / 2**20
    reset = _reset_resident_peak()
    f = TitansForecaster(
        horizon=HORIZON,
        max_epochs=1,
        epoch_windows=args.windows_per_series * size,
        batch_size=32,
        random_state=args.seed,
        device="cpu",
    )
    start = time.perf_counter()
    f.fit(panel)
    fit_seconds = time.perf_counter() - start
    start = time.perf_counter()
    ids = f.ids_
    forecast_rows = 0
    for first in range(0, len(ids), args.partition):
        forecast_rows += len(f.predict(ids=ids[first : first + args.partition]))
    predict_seconds = time.perf_counter() - start
    assert forecast_rows == size * HORIZON
    return {
        "series": size,
        "rows": int(len(panel)),
        "fit_seconds": fit_seconds,
        "predict_seconds": predict_seconds,
        "peak_mib": _resident_peak_mib(),
        "peak_reset_after_panel": reset,
        "panel_mib": float(panel_mib),
        "training_windows": int(args.windows_per_series * size),
        "lookback": f.lookback_,
        "dim": f.dim_,
        "loss": f.loss_,
        "val_loss": float(np.min([e["loss"] for e in f.history_])),
    }


def table(runs: list[dict]) -> str:
    """Per size: fit and forecast seconds, seconds per 1K series, their ratio to the
    smallest size's, and peak memory."""
    done = [r for r in runs if "fit_seconds" in r]
    lines = [
        "| series | rows | fit s | forecast s | fit s per 1K series | x linear | peak GiB |",
        "|---|---|---|---|---|---|---|",
    ]
    base = done[0]["fit_seconds"] / done[0]["series"] if done else None
    for r in done:
        per = r["fit_seconds"] / r["series"]
        lines.append(
            f"| {r['series']:,} | {r['rows']:,} | {r['fit_seconds']:.0f} | "
            f"{r['predict_seconds']:.0f} | {1000 * per:.2f} | {per / base:.2f} | "
            f"{r['peak_mib'] / 1024:.2f} |"
        )
    for r in runs:
        if "cut_at_seconds" in r:
            lines.append(f"| {r['job'][0]} | cut at {r['cut_at_seconds']:.0f} s | | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    p.add_argument("--rows", type=int, default=480, help="hours per series (at most 700)")
    p.add_argument("--windows-per-series", type=int, default=2,
                   help="training windows drawn per series (one epoch)")  # fmt: skip
    p.add_argument("--partition", type=int, default=10_000, help="series per predict call")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch threads per fit")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side")
    p.add_argument("--fit-limit", type=float, default=7200.0,
                   help="seconds after which a size is stopped and reported as cut")  # fmt: skip
    p.add_argument("--out", default="runs/panel_scale", help="folder for the results")
    p.add_argument("--_one", nargs=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        print(json.dumps(run_one(int(args._one[0]), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    jobs = [(size,) for size in args.sizes]
    runs = run_jobs_side_by_side(__file__, argv, jobs, args.threads, args.jobs, args.fit_limit)
    write_study_report(__file__, argv, args, table(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
