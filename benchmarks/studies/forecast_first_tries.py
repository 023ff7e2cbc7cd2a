"""The forecaster beside what a forecasting user tries first: neuralforecast's NHITS and
PatchTST, statsforecast's AutoETS, AutoARIMA, SeasonalNaive and Naive, on the same
rolling-origin windows.

    # the peers, in an environment of their own (neuralforecast 3.3 needs pandas 2)
    python -m venv .venv-peers && . .venv-peers/bin/activate
    pip install torch==2.13.0 -e . neuralforecast statsforecast sktime "torch==2.13.0"
    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/forecast_first_tries.py --jobs 2
    python benchmarks/studies/forecast_first_tries.py --datasets airline \
        --models titans naive --seeds 0                                     # smoke run

Each dataset is a long frame (`unique_id`, `ds`, `y`): two monthly, two yearly, a weekly
and a quarterly series bundled with statsmodels and sktime (a hundred to two thousand
points each, a panel of twelve for the quarterly one), ETTh1 (17,420 hourly rows) and ETTm1
(69,680 15-minute rows), seven series each, Weather (21 series of 52,704 10-minute rows: a
repeated timestamp dropped, a gap of nine rows interpolated), ILI (seven weekly influenza
series of 966 rows, counts and shares) and Exchange (eight daily exchange rates of 7,588
rows), from the data mirror (the last two download from Time-Series-Library's bundle when
absent). For each, the dataset's
`windows` forecast origins, `step` rows apart, end the data: every model is fitted once on
the rows before the first origin (no refit) and forecasts the `horizon` rows after each
origin from the history up to it, as neuralforecast's and statsforecast's
`cross_validation(refit=False)` do (the script checks that their origins are these). Errors
are in units of each series' standard deviation over the fitting rows, so series of
different scales weigh alike; MSE and MAE average over series, origins and steps.

Every model runs at the defaults a user starts from, given only what it requires:

  titans      TitansForecaster(horizon=h) (random_state=seed)
  attention   TitansForecaster(horizon=h, mixer="attention")
  nhits       NHITS(h, input_size=2h, max_steps=500), neuralforecast's usual first settings
  patchtst    PatchTST(h, input_size=2h, max_steps=500)
  autoets     AutoETS(season_length=m)
  autoarima   AutoARIMA(season_length=m)
  seasonal    SeasonalNaive(season_length=m)
  naive       Naive(): the last value

Every fit runs in its own process with `--threads` torch threads, `--jobs` side by side.
Prints a Markdown table (per dataset: MSE, MAE, fit seconds, mean over seeds) and writes it
with every run to `--out`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness

MODELS = ("titans", "attention", "nhits", "patchtst", "autoets", "autoarima", "seasonal", "naive")
LEARNED = ("titans", "attention", "nhits", "patchtst")
TITANS_ROWS = ("titans", "attention")  # the rest are the peers
PEER_STEPS = 500


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A benchmark series: where it comes from and how it is forecast."""

    name: str
    regime: str  # what a reader should take it for
    freq: str  # pandas frequency of `ds`
    horizon: int
    season: int  # the season length the statistical models are given
    windows: int
    step: int


DATASETS = {
    d.name: d
    for d in (
        Dataset("airline", "monthly, 1 series x 144", "MS", 12, 12, 3, 12),
        Dataset("elnino", "monthly, 1 series x 732", "MS", 12, 12, 4, 12),
        Dataset("lynx", "yearly, 1 series x 114", "YS", 8, 1, 3, 8),
        Dataset("sunspots", "yearly, 1 series x 309", "YS", 10, 1, 4, 10),
        Dataset("co2", "weekly, 1 series x 2,284", "W-SAT", 26, 52, 4, 26),
        Dataset("macro", "quarterly, 12 series x 203", "QS", 8, 4, 4, 4),
        Dataset("ETTh1", "hourly, 7 series x 17,420", "h", 24, 24, 5, 24),
        Dataset("ETTm1", "15-minute, 7 series x 69,680", "15min", 24, 96, 5, 24),
        Dataset("weather", "10-minute, 21 series x 52,704", "10min", 24, 144, 5, 24),
        Dataset("ili", "weekly, 7 series x 966", "W-TUE", 24, 52, 4, 24),
        Dataset("exchange", "daily, 8 series x 7,588", "D", 24, 7, 5, 24),
    )
}


def _long(frame):
    """A wide frame [T, C] with a DatetimeIndex as a long frame (unique_id, ds, y)."""
    long = frame.rename_axis("ds").reset_index().melt("ds", var_name="unique_id", value_name="y")
    long["unique_id"] = long["unique_id"].astype(str)
    return (
        long[["unique_id", "ds", "y"]]
        .sort_values(["unique_id", "ds"])
        .reset_index(drop=True)
        .astype({"y": float, "ds": "datetime64[ns]"})
    )


def load(name: str):
    """The dataset as a long frame (unique_id, ds, y) on a regular grid."""
    import pandas as pd

    if name in ("airline", "lynx"):
        from sktime import datasets

        loader = {"airline": datasets.load_airline, "lynx": datasets.load_lynx}[name]
        series = loader()
        series.index = series.index.to_timestamp(how="start")
        return _long(series.to_frame(name))
    if name == "elnino":
        import statsmodels.api as sm

        # sea surface temperatures, a row per year and a column per month
        data = sm.datasets.elnino.load_pandas().data
        values = data.drop(columns="YEAR").to_numpy().reshape(-1)
        index = pd.date_range(f"{int(data['YEAR'].iloc[0])}-01-01", periods=len(values), freq="MS")
        return _long(pd.DataFrame({"elnino": values}, index=index))
    if name == "sunspots":
        import statsmodels.api as sm

        data = sm.datasets.sunspots.load_pandas().data
        index = pd.to_datetime(data["YEAR"].astype(int).astype(str), format="%Y")
        return _long(pd.DataFrame({"sunspots": data["SUNACTIVITY"].to_numpy()}, index=index))
    if name == "co2":
        import statsmodels.api as sm

        # weekly Mauna Loa readings; the few missing weeks interpolated
        data = sm.datasets.co2.load_pandas().data.asfreq("W-SAT").interpolate()
        return _long(data)
    if name == "macro":
        import statsmodels.api as sm

        data = sm.datasets.macrodata.load_pandas().data
        index = pd.PeriodIndex.from_fields(
            year=data["year"].astype(int), quarter=data["quarter"].astype(int), freq="Q"
        ).to_timestamp(how="start")
        return _long(data.drop(columns=["year", "quarter"]).set_index(index))
    if name in ("ETTh1", "ETTm1", "ili", "exchange"):
        from titans_seq.data import load_timeseries

        return _long(load_timeseries(name))  # registered names are case-insensitive
    if name == "weather":
        from titans_seq.data import load_timeseries

        # one timestamp repeats and nine 10-minute rows are missing: a regular grid, the
        # repeat dropped and the gap interpolated
        data = load_timeseries("weather")
        return _long(data[~data.index.duplicated()].asfreq("10min").interpolate())
    raise ValueError(f"unknown dataset {name!r}; choose from {list(DATASETS)}")


def origins(frame, spec: Dataset) -> list:
    """The forecast origins: the last `windows` cutoffs, `step` rows apart, the last one
    `horizon` rows before the end (every series of a dataset ends on the same date)."""
    dates = sorted(frame["ds"].unique())
    last = len(dates) - spec.horizon - 1
    return [dates[last - spec.step * i] for i in reversed(range(spec.windows))]


def up_to(frame, origin):
    """The rows of every series up to and including `origin`."""
    return frame[frame["ds"] <= origin]


def forecast_titans(model: str, frame, spec: Dataset, cuts: list, seed: int, options: dict):
    """(forecasts: unique_id, ds, cutoff, yhat; fit seconds). `options`: further
    TitansForecaster parameters."""
    import pandas as pd

    from titans_seq.domains.forecasting import TitansForecaster

    options = {**options, "mixer": "attention"} if model == "attention" else options
    f = TitansForecaster(horizon=spec.horizon, random_state=seed, device="cpu", **options)
    start = time.perf_counter()
    f.fit(up_to(frame, cuts[0]))
    seconds = time.perf_counter() - start
    parts = []
    for cut in cuts:
        out = f.predict(y_context=up_to(frame, cut))
        parts.append(out.rename(columns={"TitansForecaster": "yhat"}).assign(cutoff=cut))
    chosen = {"lookback": f.lookback_, "loss": f.loss_, "center": f.center_,
              "mixer": f.mixer_, "mixer_losses": f.mixer_losses_,
              "baseline_weight": f.baseline_weight_}  # fmt: skip
    return pd.concat(parts, ignore_index=True), seconds, chosen


def forecast_neural(model: str, frame, spec: Dataset, seed: int):
    from harness import neuralforecast_model
    from neuralforecast import NeuralForecast

    net = neuralforecast_model(model, spec.horizon, seed, PEER_STEPS)
    nf = NeuralForecast(models=[net], freq=spec.freq)
    start = time.perf_counter()
    out = nf.cross_validation(df=frame, n_windows=spec.windows, step_size=spec.step, refit=False)
    seconds = time.perf_counter() - start  # the one fit and its forecasts
    return out.rename(columns={type(net).__name__: "yhat"}), seconds


def forecast_statistical(model: str, frame, spec: Dataset):
    from statsforecast import StatsForecast
    from statsforecast.models import AutoARIMA, AutoETS, Naive, SeasonalNaive

    make = {
        "autoets": lambda: AutoETS(season_length=spec.season),
        "autoarima": lambda: AutoARIMA(season_length=spec.season),
        "seasonal": lambda: SeasonalNaive(season_length=spec.season),
        "naive": Naive,
    }[model]
    sf = StatsForecast(models=[make()], freq=spec.freq, n_jobs=1)
    start = time.perf_counter()
    out = sf.cross_validation(
        df=frame, h=spec.horizon, n_windows=spec.windows, step_size=spec.step, refit=False
    )
    seconds = time.perf_counter() - start
    column = [c for c in out.columns if c not in ("unique_id", "ds", "cutoff", "y")][0]
    return out.rename(columns={column: "yhat"}), seconds


def errors(frame, forecasts, cuts: list) -> dict:
    """MSE and MAE in units of each series' standard deviation over the fitting rows."""
    import numpy as np

    scale = up_to(frame, cuts[0]).groupby("unique_id")["y"].std().replace(0.0, 1.0)
    truth = frame[["unique_id", "ds", "y"]]
    joined = forecasts[["unique_id", "ds", "cutoff", "yhat"]].merge(
        truth, on=["unique_id", "ds"], how="left", validate="many_to_one"
    )
    found = sorted({np.datetime64(c, "ns") for c in joined["cutoff"]})
    wanted = sorted(np.datetime64(c, "ns") for c in cuts)
    if found != wanted:
        raise RuntimeError(f"forecast origins {found} differ from the harness's {wanted}")
    if joined["y"].isna().any() or joined["yhat"].isna().any():
        raise RuntimeError("a forecast has no matching truth, or is NaN")
    err = (joined["yhat"] - joined["y"]) / joined["unique_id"].map(scale)
    return {"mse": float((err**2).mean()), "mae": float(err.abs().mean()), "points": len(err)}


def run_one(dataset: str, model: str, seed: int, args) -> dict:
    """One model fitted on one dataset, and its errors (in this process)."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    spec = DATASETS[dataset]
    frame = load(dataset)
    cuts = origins(frame, spec)
    if model in TITANS_ROWS:
        options = json.loads(args.titans_options)
        forecasts, seconds, chosen = forecast_titans(model, frame, spec, cuts, seed, options)
    elif model in ("nhits", "patchtst"):
        forecasts, seconds = forecast_neural(model, frame, spec, seed)
    else:
        forecasts, seconds = forecast_statistical(model, frame, spec)
    record = {
        "dataset": dataset, "model": model, "seed": seed, "horizon": spec.horizon,
        "windows": spec.windows, "fit_seconds": seconds, **errors(frame, forecasts, cuts),
    }  # fmt: skip
    if model in TITANS_ROWS:
        record["chosen"] = chosen  # what the "auto" settings became
    return record


def as_run(record: dict) -> dict:
    """A job's record; a job cut at the time limit as a run without errors."""
    if "cut_at_seconds" not in record:
        return record
    dataset, model, seed = record["job"]
    return {"dataset": dataset, "model": model, "seed": int(seed),
            "cut_at_seconds": record["cut_at_seconds"]}  # fmt: skip


def means_by_model(ours: list[dict]) -> dict[str, dict]:
    """{model: {"mse": [per seed], "mean_mse", "mae", "seconds"}} for the models of one
    dataset's runs that finished, in MODELS order."""
    means = {}
    for model in MODELS:
        rows = [r for r in ours if r["model"] == model and "mse" in r]
        if rows:
            means[model] = {
                "mse": [r["mse"] for r in rows],
                "mean_mse": statistics.mean(r["mse"] for r in rows),
                "mae": statistics.mean(r["mae"] for r in rows),
                "seconds": statistics.mean(r["fit_seconds"] for r in rows),
            }
    return means


def table(runs: list[dict]) -> str:
    """Per dataset and model: mean MSE (± seed spread), MAE, fit seconds; the best MSE of
    each dataset in bold, and each model's MSE as a ratio to the best peer's. A fit cut at
    the time limit is listed with its limit."""
    lines = [
        "| dataset | model | MSE | MAE | vs best peer | fit seconds |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, spec in DATASETS.items():
        name = f"{dataset} ({spec.regime}, h {spec.horizon})"
        ours = [r for r in runs if r["dataset"] == dataset]
        means = means_by_model(ours)
        best = min((m["mean_mse"] for m in means.values()), default=None)
        peers = [m["mean_mse"] for name_, m in means.items() if name_ not in TITANS_ROWS]
        best_peer = min(peers) if peers else None
        for model, m in means.items():
            spread = f" ± {statistics.stdev(m['mse']):.2g}" if len(m["mse"]) > 1 else ""
            text = f"{m['mean_mse']:.3g}{spread}"
            text = f"**{text}**" if m["mean_mse"] == best else text
            ratio = f"{m['mean_mse'] / best_peer:.2f}x" if best_peer else "-"
            lines.append(
                f"| {name} | {model} | {text} | {m['mae']:.3g} | {ratio} | {m['seconds']:.1f} |"
            )
        for r in ours:
            if "cut_at_seconds" in r:
                lines.append(
                    f"| {name} | {r['model']} | - | - | - | cut at {r['cut_at_seconds']:.0f} |"
                )
    return "\n".join(lines)


def leaderboard(runs: list[dict]) -> str:
    """One row per dataset: each model's MSE (mean over seeds; the best in bold, a cut fit
    as "cut"), and the fit seconds of Titans and NHITS."""
    lines = [
        "| dataset | " + " | ".join(MODELS) + " | fit s: titans / nhits |",
        "|---|" + "---|" * (len(MODELS) + 1),
    ]
    for dataset, spec in DATASETS.items():
        ours = [r for r in runs if r["dataset"] == dataset]
        if not ours:
            continue
        means = means_by_model(ours)
        best = min((m["mean_mse"] for m in means.values()), default=None)
        cells = []
        for model in MODELS:
            if model in means:
                text = f"{means[model]['mean_mse']:.3g}"
                cells.append(f"**{text}**" if means[model]["mean_mse"] == best else text)
            else:
                cut = any(r["model"] == model for r in ours)
                cells.append("cut" if cut else "")
        fit = " / ".join(
            f"{means[m]['seconds']:.0f}" if m in means else "-" for m in ("titans", "nhits")
        )
        lines.append(f"| {dataset} ({spec.regime}, h {spec.horizon}) | " + " | ".join(cells)
                     + f" | {fit} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0],
                   help="seeds of the learned models (the statistical ones run once)")  # fmt: skip
    p.add_argument("--titans-options", default="{}",
                   help="JSON of further TitansForecaster parameters (default: none)")  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side")
    p.add_argument("--fit-limit", type=float, default=1200.0,
                   help="seconds after which a fit is stopped and reported as cut")  # fmt: skip
    p.add_argument("--out", default="runs/forecast_first_tries", help="folder for the results")
    p.add_argument("--_one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        dataset, model, seed = args._one
        print(json.dumps(run_one(dataset, model, int(seed), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    # the learned models first (the slow fits), so that side by side they finish together
    jobs = [
        (d, m, s)
        for m in args.models
        for d in args.datasets
        for s in (args.seeds if m in LEARNED else args.seeds[:1])
    ]
    finished = run_jobs_side_by_side(
        __file__, argv, jobs, args.threads, args.jobs, limit=args.fit_limit
    )
    runs = [as_run(record) for record in finished]
    write_study_report(__file__, argv, args, leaderboard(runs) + "\n\n" + table(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
