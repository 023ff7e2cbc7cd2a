"""Whether a dataset's covariates carry signal that reaches the test months, probed with a
ridge regression before any deep model is trained.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/covariate_signal.py
    python benchmarks/studies/covariate_signal.py --datasets ETTh1,ETTh2,ETTm1,ETTm2,Weather \
        --train-stride 2
    python benchmarks/studies/covariate_signal.py --datasets ETTm1 --horizons 96,336

A forecaster can only gain from a covariate that predicts the target out of sample. This
study asks that of the simplest model that can use one: a ridge regression from a lookback
window to the horizon, on the dataset's protocol borders (ETT 12/4/4 months, the others
70/10/20), every series z-scored by its training rows, the target centred on its window's
mean as RevIN does. For each set of inputs:

  target alone             the target's lookback window
  + others (historical)    every other column's lookback window, centred per window
  + calendar (future)      one-hot hour (where the rows are sub-daily) and weekday of the
                           horizon's first step: these fix the calendar of every horizon
                           step, so each output learns its own hour and weekday profile
  + others + calendar

the ridge penalty is chosen on the validation windows (grid `--penalties`), then the test
MSE on the z-scored target over every stride-1 test window is reported, as the forecasting
tables report it. Training windows are taken every `--train-stride` rows.

Prints a Markdown table per dataset (validation and test MSE per input set and horizon) and
writes them with the settings to `--out`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from titans_seq.data import get_dataset, load_timeseries, split_borders

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness
from harness import git_commit  # noqa: E402

INPUTS = {
    "target alone": (False, False),
    "+ others (historical)": (True, False),
    "+ calendar (future)": (False, True),
    "+ others + calendar": (True, True),
}


def one_hot_calendar(index: pd.Index) -> np.ndarray | None:
    """[T, K] one-hot hour (when the rows are sub-daily) and weekday of a DatetimeIndex;
    None for an index without timestamps."""
    if not isinstance(index, pd.DatetimeIndex):
        return None
    parts = []
    if len(index) > 1 and (index[1] - index[0]) < pd.Timedelta(days=1):
        parts.append(np.eye(24, dtype=np.float32)[index.hour])
    parts.append(np.eye(7, dtype=np.float32)[index.dayofweek])
    return np.concatenate(parts, axis=1)


def design(target, others, calendar, starts, lookback, horizon, use_others, use_calendar):
    """(X [N, F], Y [N, horizon]) of the windows starting at `starts`: the target centred on
    its lookback mean (Y too), the others centred per column, the calendar of the horizon's
    first step."""
    rows = starts[:, None] + np.arange(lookback)[None, :]
    ahead = starts[:, None] + lookback + np.arange(horizon)[None, :]
    history = target[rows]
    level = history.mean(axis=1, keepdims=True)
    parts = [history - level]
    if use_others:
        window = others[rows]  # [N, L, K]
        parts.append((window - window.mean(axis=1, keepdims=True)).reshape(len(starts), -1))
    if use_calendar:
        parts.append(calendar[starts + lookback])
    parts.append(np.ones((len(starts), 1), dtype=np.float64))
    return np.concatenate(parts, axis=1), target[ahead] - level


def ridge(X, Y, penalty):
    """Weights [F, H] minimising |XW - Y|^2 + penalty |W|^2 (the intercept column included)."""
    gram = X.T @ X
    gram[np.diag_indices_from(gram)] += penalty
    return np.linalg.solve(gram, X.T @ Y)


def probe(frame, calendar, target_name, protocol, lookback, horizon, penalties, train_stride):
    """{input set: {"penalty", "val_mse", "test_mse"}} for one horizon; `calendar` [T, K]
    (None: no calendar inputs)."""
    borders = split_borders(protocol, len(frame), lookback)
    train = frame.iloc[: borders.train[1]]
    z = ((frame - train.mean()) / train.std()).to_numpy(np.float64)
    columns = list(frame.columns)
    target = z[:, columns.index(target_name)]
    others = np.delete(z, columns.index(target_name), axis=1)

    def starts(lo, hi, step=1):
        return np.arange(lo, hi - lookback - horizon + 1, step)

    test = borders.slice("test")
    sets = {
        "train": starts(borders.train[0], borders.train[1], train_stride),
        "val": starts(borders.val[0], borders.val[1]),
        "test": starts(test.start, test.stop),
    }
    results = {}
    for name, (use_others, use_calendar) in INPUTS.items():
        if use_calendar and calendar is None:
            continue
        data = {
            split: design(target, others, calendar, s, lookback, horizon, use_others, use_calendar)
            for split, s in sets.items()
        }
        best = None
        for penalty in penalties:
            weights = ridge(*data["train"], penalty)
            val = float(((data["val"][0] @ weights - data["val"][1]) ** 2).mean())
            if best is None or val < best[1]:
                best = (penalty, val, weights)
        penalty, val, weights = best
        test_mse = float(((data["test"][0] @ weights - data["test"][1]) ** 2).mean())
        results[name] = {"penalty": penalty, "val_mse": val, "test_mse": test_mse}
    return results


def table(by_horizon: dict) -> str:
    horizons = list(by_horizon)
    head = "| inputs | " + " | ".join(f"H={h} val / test" for h in horizons) + " |"
    lines = [head, "|---" * (len(horizons) + 1) + "|"]
    for name in by_horizon[horizons[0]]:
        cells = [
            f"{by_horizon[h][name]['val_mse']:.4f} / {by_horizon[h][name]['test_mse']:.4f}"
            for h in horizons
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="ETTh1", help="registered datasets, a,b,...")
    parser.add_argument("--target", default="OT", help="the column to forecast")
    parser.add_argument("--lookback", type=int, default=96)
    parser.add_argument("--horizons", default="96,336,720")
    parser.add_argument("--penalties", default="1,10,100,1000,10000")
    parser.add_argument("--train-stride", type=int, default=1, help="rows between train windows")
    parser.add_argument("--out", default="benchmarks/results/forecasting/covariate_signal.json")
    args = parser.parse_args()

    penalties = [float(p) for p in args.penalties.split(",")]
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_commit(),
        "args": vars(args),
        "datasets": {},
    }
    for dataset in args.datasets.split(","):
        start = time.perf_counter()
        frame = load_timeseries(dataset, target=args.target)
        # features of each row's own timestamp (Weather repeats one; its rows stay as they are)
        calendar = one_hot_calendar(frame.index)
        protocol = get_dataset(dataset).protocol
        by_horizon = {
            int(h): probe(
                frame, calendar, args.target, protocol, args.lookback, int(h), penalties,
                args.train_stride,
            )
            for h in args.horizons.split(",")
        }  # fmt: skip
        text = table(by_horizon)
        print(f"{dataset}\n{text}\n")
        record["datasets"][dataset] = {
            "seconds": round(time.perf_counter() - start, 1),
            "results": {str(h): r for h, r in by_horizon.items()},
            "table": text,
        }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
