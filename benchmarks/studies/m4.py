"""M4 Hourly and Weekly scored as the competition scored them, the forecaster beside the
peers a user tries first and the competition's published entries.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/m4.py --jobs 2 --seeds 0 1 2
    # the statsforecast peers (a separate environment is fine: pip install statsforecast)
    python benchmarks/studies/m4.py --groups Hourly --models titans seasonal --seeds 0   # smoke

Each model fits on the competition's training rows of every series of a group at once and
forecasts the horizon after them (48 hours, 13 weeks); the errors are M4's: sMAPE, MASE
(period 24 for hourly, 1 for weekly) and OWA against Naive2 (`titans_seq.data.m4`).

  titans      TitansForecaster(horizon=h) (random_state=seed), its defaults
  attention   TitansForecaster(horizon=h, mixer="attention")
  nhits       neuralforecast NHITS(h, input_size=2h, max_steps=500), its usual first settings
  nhits_robust  the same with scaler_type="robust"
  patchtst    neuralforecast PatchTST(h, input_size=2h, max_steps=500)
  naive2      M4's Naive2 (seasonally adjusted naive), computed here
  seasonal    statsforecast SeasonalNaive(season_length=m)
  naive       statsforecast Naive()
  autoets     statsforecast AutoETS(season_length=m)
  autotheta   statsforecast AutoTheta(season_length=m)

Every fit runs in its own process with `--threads` torch threads, `--jobs` side by side.
Prints a Markdown table (per group and model: sMAPE, MASE, OWA and fit seconds, mean over
seeds) with the published entries below it, and writes every run to `--out` (JSON).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness

MODELS = (
    "titans", "attention", "nhits", "nhits_robust", "patchtst", "naive2", "seasonal", "naive",
    "autoets", "autotheta",
)  # fmt: skip
LEARNED = ("titans", "attention", "nhits", "nhits_robust", "patchtst")
NEURAL = ("nhits", "nhits_robust", "patchtst")
PEER_STEPS = 500
GROUPS = ("Hourly", "Weekly")

# sMAPE, MASE, OWA of published entries: the M4 competition's own evaluation
# (Mcompetitions/M4-methods, "Evaluation and Ranks.xlsx") and GIFT-Eval's runs
# (SalesforceAIResearch/gift-eval, results/*/all_results.csv, rows m4_hourly/H/short and
# m4_weekly/W/short; OWA from its sMAPE and MASE with M4's Naive2)
PUBLISHED = {
    "Hourly": (
        ("best hourly entry (Doornik et al.)", 8.913, 0.801, 0.410),
        ("ES-RNN (Smyl), the winner", 9.328, 0.893, 0.440),
        ("N-BEATS (GIFT-Eval)", 12.00, 1.34, 0.606),
        ("statsforecast AutoARIMA (GIFT-Eval)", 13.70, 1.03, 0.588),
    ),
    "Weekly": (
        ("best weekly entry (Darin and Stellwagen)", 6.582, 2.107, 0.739),
        ("ES-RNN (Smyl), the winner", 7.817, 2.356, 0.851),
        ("N-BEATS (GIFT-Eval)", None, None, 0.709),
    ),
}


def forecast_titans(model: str, m4, seed: int, options: dict):
    """({unique_id: [H]}, fit seconds, the fitted estimator's choices)."""
    from titans_seq.domains.forecasting import TitansForecaster

    options = {**options, "mixer": "attention"} if model == "attention" else options
    f = TitansForecaster(horizon=m4.horizon, random_state=seed, device="cpu", **options)
    start = time.perf_counter()
    f.fit(m4.train)
    seconds = time.perf_counter() - start
    out = f.predict()
    forecasts = {u: g.to_numpy() for u, g in out.groupby("unique_id", sort=False)[out.columns[-1]]}
    chosen = {
        name: getattr(f, name + "_", None)
        for name in (
            "lookback",
            "max_epochs",
            "n_epochs",
            "ensemble_size",
            "dim",
            "loss",
            "center",
            "mixer",
            "baseline_weight",
        )
    }
    chosen["plan"] = f.plan_.as_dict()
    return forecasts, seconds, chosen


def forecast_neural(model: str, m4, seed: int):
    """neuralforecast's model at its first settings: ({unique_id: [H]}, fit seconds)."""
    from harness import neuralforecast_model
    from neuralforecast import NeuralForecast

    name = "patchtst" if model == "patchtst" else "nhits"
    extra = {"scaler_type": "robust"} if model == "nhits_robust" else {}
    net = neuralforecast_model(name, m4.horizon, seed, PEER_STEPS, **extra)
    nf = NeuralForecast(models=[net], freq=m4.group.freq)
    start = time.perf_counter()
    nf.fit(df=m4.train)
    out = nf.predict()
    seconds = time.perf_counter() - start
    out = out.reset_index() if "unique_id" not in out.columns else out
    column = type(net).__name__
    return {u: g.to_numpy() for u, g in out.groupby("unique_id", sort=False)[column]}, seconds


def forecast_naive2(m4):
    from titans_seq.data.m4 import naive2_forecast

    start = time.perf_counter()
    out = {
        u: naive2_forecast(g.to_numpy(), m4.horizon, m4.season)
        for u, g in m4.train.groupby("unique_id", sort=False)["y"]
    }
    return out, time.perf_counter() - start


def forecast_statistical(model: str, m4):
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS, AutoTheta, Naive, SeasonalNaive

    m = m4.season
    make = {
        "autoets": lambda: AutoETS(season_length=m),
        "autotheta": lambda: AutoTheta(season_length=m),
        "seasonal": lambda: SeasonalNaive(season_length=m),
        "naive": Naive,
    }[model]
    sf = StatsForecast(models=[make()], freq=m4.group.freq, n_jobs=1)
    start = time.perf_counter()
    out = sf.forecast(df=m4.train, h=m4.horizon)
    seconds = time.perf_counter() - start
    out = out.reset_index() if "unique_id" not in out.columns else out
    column = [c for c in out.columns if c not in ("unique_id", "ds", "cutoff", "y")][0]
    return {u: g.to_numpy() for u, g in out.groupby("unique_id", sort=False)[column]}, seconds


def run_one(group: str, model: str, seed: int, args) -> dict:
    """One model fitted on one group, and its scores (in this process)."""
    import warnings

    import torch

    from titans_seq.data.m4 import load_m4, score_arrays

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    m4 = load_m4(group, series=args.series)
    chosen = {}
    if model in ("titans", "attention"):
        options = json.loads(args.titans_options)
        forecasts, seconds, chosen = forecast_titans(model, m4, seed, options)
    elif model in NEURAL:
        forecasts, seconds = forecast_neural(model, m4, seed)
    elif model == "naive2":
        forecasts, seconds = forecast_naive2(m4)
    else:
        forecasts, seconds = forecast_statistical(model, m4)
    scores = score_arrays(forecasts, m4)
    return {"group": group, "model": model, "seed": seed, "series": len(forecasts),
            "fit_seconds": seconds, **scores.as_dict(), "chosen": chosen}  # fmt: skip


def table(runs: list[dict]) -> str:
    """Per group and model: mean sMAPE, MASE, OWA (± seed spread) and fit seconds; the
    published entries below each group's."""
    lines = ["| group | model | sMAPE | MASE | OWA | fit s |", "|---|---|---|---|---|---|"]
    for group in GROUPS:
        ours = [r for r in runs if r.get("group") == group and "owa" in r]
        if not ours:
            continue
        for model in MODELS:
            rows = [r for r in ours if r["model"] == model]
            if not rows:
                continue
            owa = [r["owa"] for r in rows]
            spread = f" ± {statistics.stdev(owa):.3f}" if len(owa) > 1 else ""
            lines.append(
                f"| {group} | {model} | {statistics.mean(r['smape'] for r in rows):.2f} | "
                f"{statistics.mean(r['mase'] for r in rows):.3f} | "
                f"{statistics.mean(owa):.3f}{spread} | "
                f"{statistics.mean(r['fit_seconds'] for r in rows):.0f} |"
            )
        for name, s, m, o in PUBLISHED[group]:
            cells = [f"{s:.2f}" if s else "", f"{m:.3f}" if m else "", f"{o:.3f}"]
            lines.append(f"| {group} | {name} (published) | " + " | ".join(cells) + " | |")
    for r in runs:
        if "cut_at_seconds" in r:
            group, model = r["job"][:2]
            lines.append(f"| {group} | {model} | cut at {r['cut_at_seconds']:.0f} s | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--groups", nargs="+", default=list(GROUPS), choices=GROUPS)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0],
                   help="seeds of the learned models (the statistical ones run once)")  # fmt: skip
    p.add_argument("--series", type=int, default=None, help="the first n series only (smoke runs)")
    p.add_argument("--titans-options", default="{}",
                   help="JSON of further TitansForecaster parameters (default: none)")  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side")
    p.add_argument("--fit-limit", type=float, default=1800.0,
                   help="seconds after which a fit is stopped and reported as cut")  # fmt: skip
    p.add_argument("--out", default="runs/m4", help="folder for the results")
    p.add_argument("--_one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        group, model, seed = args._one
        print(json.dumps(run_one(group, model, int(seed), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    jobs = [
        (g, m, s)
        for m in args.models
        for g in args.groups
        for s in (args.seeds if m in LEARNED else args.seeds[:1])
    ]
    runs = run_jobs_side_by_side(__file__, argv, jobs, args.threads, args.jobs, args.fit_limit)
    write_study_report(__file__, argv, args, table(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
