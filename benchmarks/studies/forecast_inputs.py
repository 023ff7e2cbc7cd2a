"""What the forecaster reads, measured on one target of a benchmark dataset (ETTh1's oil
temperature, OT, by default): its own history, the dataset's other columns as historical
covariates (Time-Series-Library's "MS" setting; for ETTh1 the six loads), calendar
features as future covariates, and earlier windows streamed through the memory
(`history_windows`); `--lookback` for longer fixed windows.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/forecast_inputs.py --jobs 2
    python benchmarks/studies/forecast_inputs.py --configs "OT alone,OT + memory of 4 windows"
    python benchmarks/studies/forecast_inputs.py --dataset Weather --configs "OT alone"
    python benchmarks/studies/forecast_inputs.py --epochs 1 --seeds 0 --train-rows 2000  # smoke run

`TitansForecaster(random_state=seed)` with the given lookback/horizon on the dataset's
protocol borders (ETT: 12/4/4 months; others 70/10/20): fit on the training and validation
rows (the validation rows for early stopping; the scaling is fit on the training rows
only), MSE on the target over every stride-1 test window, z-scored by the training rows'
statistics, as the benchmark tables report it (config names say OT for any target).
Every fit runs in its own process with one torch thread, `--jobs` side by side. Prints a
Markdown table (mean +- std over seeds, fit seconds) and writes it with every run, the
command and where and when it ran (device, torch, commit, date) to `--out`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness
from harness import provenance  # noqa: E402

OTHERS = "<others>"  # the dataset's columns other than the target, as covariates
CONFIGS = {
    "OT alone": dict(),
    "OT + six loads (historical)": dict(hist_exog_list=OTHERS),
    "OT + loads + calendar (future)": dict(hist_exog_list=OTHERS, calendar="auto"),
    "OT + calendar (future)": dict(calendar="auto"),
    "OT + memory of 4 windows": dict(history_windows=4),
}


def run_one(config: str, seed: int, args) -> dict:
    """One fit and its test MSE (in this process)."""
    import warnings

    import torch

    from titans_seq.data import get_dataset, load_timeseries, split_borders
    from titans_seq.data.frames import prepare_frame
    from titans_seq.domains.forecasting import TitansForecaster

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    frame = load_timeseries(args.dataset, target=args.target)
    # on its own time grid, so every row's calendar is known: Weather's benchmark file
    # repeats one row (2020-05-12 06:00, dropped) and misses nine 10-minute steps
    # (2020-05-29, interpolated); its 52,696 rows become 52,704, and the protocol's borders
    # move by at most 8 rows
    frame = prepare_frame(frame, date_column=None, missing="interpolate", duplicates="first")
    borders = split_borders(get_dataset(args.dataset).protocol, len(frame), args.lookback)
    options = dict(CONFIGS[config])
    others = [c for c in frame.columns if c != args.target]
    columns = [args.target]
    if options.get("hist_exog_list") == OTHERS:
        options["hist_exog_list"] = others
        columns = [*others, args.target]
    if "calendar" in options and args.calendar != "auto":
        options["calendar"] = args.calendar.split(",")
    fit_rows = frame.iloc[: borders.val[1]][columns]
    if args.train_rows:
        fit_rows = fit_rows.iloc[-args.train_rows :]
    test_rows = frame.iloc[borders.slice("test")][columns]
    forecaster = TitansForecaster(
        lookback=args.lookback,
        horizon=args.horizon,
        mixer=args.mixer,
        max_epochs=args.epochs,
        learning_rate=args.learning_rate,
        # the protocol's validation rows: the last 4 of ETT's 16 months, 1/8 of the others'
        validation_fraction=(borders.val[1] - borders.train[1]) / borders.val[1],
        random_state=seed,
        device="cpu",
        **options,
    )
    start = time.perf_counter()
    forecaster.fit(fit_rows)
    seconds = time.perf_counter() - start
    return {
        "config": config,
        "seed": seed,
        "test_mse": -forecaster.score(test_rows),
        "epochs": forecaster.n_epochs_,
        "fit_seconds": round(seconds, 1),
    }


def child(config: str, seed: int, args) -> dict:
    command = [sys.executable, __file__, "--one", config, "--seed", str(seed)]
    names = ("lookback", "horizon", "epochs", "threads", "train_rows", "calendar",
             "learning_rate", "dataset", "target", "mixer")  # fmt: skip
    for name in names:
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"config": config, "seed": seed, "error": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(runs: list[dict]) -> str:
    lines = [
        "| inputs | test MSE on OT (mean ± std) | seeds | epochs | fit s |",
        "|---|---|---|---|---|",
    ]
    for config in dict.fromkeys(r["config"] for r in runs):
        ok = [r for r in runs if r["config"] == config and "error" not in r]
        if not ok:
            lines.append(f"| {config} | failed | 0 | | |")
            continue
        mses = [r["test_mse"] for r in ok]
        std = statistics.stdev(mses) if len(mses) > 1 else 0.0
        lines.append(
            f"| {config} | {statistics.mean(mses):.4f} ± {std:.4f} | {len(ok)} | "
            f"{statistics.mean(r['epochs'] for r in ok):.1f} | "
            f"{statistics.mean(r['fit_seconds'] for r in ok):.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ETTh1", help="a registered benchmark dataset")
    parser.add_argument("--target", default="OT", help="the column to forecast")
    parser.add_argument("--mixer", default="lmm", help="the forecaster's sequence mixer")
    parser.add_argument("--lookback", type=int, default=96)
    parser.add_argument("--horizon", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names")
    parser.add_argument("--train-rows", type=int, default=0, help="last N fit rows (0 = all)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--calendar", default="auto", help="'auto' or feature names, a,b,...")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/forecasting/inputs.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one, args.seed, args)))
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    chosen = args.configs.split(",")
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {list(CONFIGS)}")
    jobs = [(config, seed) for seed in seeds for config in chosen]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(lambda job: child(*job, args), jobs))
    for run in runs:
        if "error" in run:
            print(f"{run['config']} seed {run['seed']}: {run['error']}", file=sys.stderr)
    print(table(runs))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: v for k, v in vars(args).items() if k not in ("one", "seed", "out", "configs")}
    # the fits ran in children with `--threads` torch threads each: the device says so
    import torch

    torch.set_num_threads(args.threads)
    record = {
        "command": shlex.join(["python", *sys.argv]),
        **provenance("cpu"),
        "settings": settings,
        "runs": runs,
        "table": table(runs),
    }
    out.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
