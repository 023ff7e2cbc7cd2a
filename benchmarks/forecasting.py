"""Long-horizon forecasting benchmark: Titans forecasters vs. baselines, one harness.

    python benchmarks/forecasting.py          # all 5 datasets x 4 horizons x 5 models
    python benchmarks/forecasting.py --datasets ETTh1 --horizons 96 --models lmm,dlinear \
        --max-steps 500

Every (dataset, horizon, model) is trained with the same recipe (`forecasting/etth1_lmm`,
with the dataset, horizon and model overridden) and the same step budget by the shared
training loop; the checkpoint with the best validation MSE is evaluated on the test split
(protocol: titans_seq.data.forecast_splits; MSE/MAE on z-scored values). Prints one Markdown
table per metric with the average over horizons, beside the Titans paper's Table 3 (LMM).
"""

from __future__ import annotations

import argparse
import platform
import time
from datetime import date
from pathlib import Path

import torch

# model name -> recipe overrides (the same Simba harness; DLinear replaces the network)
MODELS = {
    "lmm": [],
    "mag": ["model.mixer=mag", "model.mixer_options={chunk_size: 16, window: 8}"],
    "mal": ["model.mixer=mal", "model.mixer_options={chunk_size: 16, window: 8}"],
    "attention": ["model.mixer=attention", "model.mixer_options={}"],
    "dlinear": ["model.architecture=dlinear", "optim.lr=5e-3", "optim.weight_decay=0"],
}
# Titans (LMM) averaged over horizons 96-720, Table 3 of Behrouz et al. 2025: (MSE, MAE)
PUBLISHED_LMM = {
    "ETTh1": (0.420, 0.421),
    "ETTh2": (0.336, 0.382),
    "ETTm1": (0.358, 0.387),
    "ETTm2": (0.261, 0.309),
    "Weather": (0.231, 0.265),
}


@torch.no_grad()
def evaluate_test(cfg, weights: Path, device: torch.device) -> tuple[float, float]:
    """MSE and MAE of the model in `weights` over every test window (z-scored values)."""
    from titans_seq.data import forecast_splits
    from titans_seq.domains.forecasting.task import WindowTensors, build_forecaster, point_forecast
    from titans_seq.training.checkpoint import load_weights

    d = cfg.data
    _, _, test, _ = forecast_splits(
        d.dataset, lookback=d.lookback, horizon=d.horizon, features=d.features, target=d.target
    )
    windows = WindowTensors.from_windows(test)
    model = build_forecaster(cfg.model, windows.x.shape[-1], d.lookback, d.horizon)
    model.load_state_dict(load_weights(weights))
    model.to(device).eval()
    sq, ab, n = 0.0, 0.0, 0
    for start in range(0, len(windows), 512):
        x, y = windows.get_batch(range(start, min(start + 512, len(windows))))
        pred = point_forecast(model(x.to(device)).float(), cfg.model.quantiles).cpu()
        sq += float(((pred - y) ** 2).sum())
        ab += float((pred - y).abs().sum())
        n += y.numel()
    return sq / n, ab / n


def run_one(dataset: str, horizon: int, model: str, args) -> tuple[float, float, float]:
    from titans_seq.training import load_config, train

    out_dir = Path(args.out_dir) / f"{dataset}_{horizon}_{model}_seed{args.seed}"
    overrides = [
        f"data.dataset={dataset}",
        f"data.horizon={horizon}",
        f"train.max_steps={args.max_steps}",
        f"train.seed={args.seed}",
        f"train.device={args.device}",
        f"train.out_dir={out_dir}",
        "train.progress=false",
        *MODELS[model],
    ]
    cfg = load_config(args.recipe, overrides)
    start = time.perf_counter()
    result = train(cfg)
    seconds = time.perf_counter() - start
    mse, mae = evaluate_test(
        cfg,
        result.run_dir / "best_model.safetensors",
        torch.device(
            "cuda" if args.device in ("auto", "cuda") and torch.cuda.is_available() else "cpu"
        ),
    )
    return mse, mae, seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--datasets", default="ETTh1,ETTh2,ETTm1,ETTm2,Weather")
    parser.add_argument("--horizons", default="96,192,336,720")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--recipe", default="forecasting/etth1_lmm")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out-dir", default="runs/benchmark_forecasting")
    args = parser.parse_args()

    datasets = args.datasets.split(",")
    horizons = [int(h) for h in args.horizons.split(",")]
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {sorted(MODELS)}")
    device = (
        torch.cuda.get_device_name()
        if torch.cuda.is_available() and args.device != "cpu"
        else f"CPU ({platform.machine()}, {torch.get_num_threads()} threads)"
    )
    print(
        f"# {date.today()} {device}; torch {torch.__version__}; "
        f"{args.max_steps} steps, seed {args.seed}"
    )

    results: dict[tuple[str, int, str], tuple[float, float, float]] = {}
    for dataset in datasets:
        for horizon in horizons:
            for model in models:
                mse, mae, seconds = run_one(dataset, horizon, model, args)
                results[(dataset, horizon, model)] = (mse, mae, seconds)
                print(
                    f"{dataset} H={horizon} {model}: MSE {mse:.3f} MAE {mae:.3f} ({seconds:.0f} s)",
                    flush=True,
                )

    header = "| dataset | H | " + " | ".join(f"{m} MSE | {m} MAE" for m in models) + " | time (s) |"
    print("\n" + header)
    print("|---|---|" + "---|---|" * len(models) + "---|")
    for dataset in datasets:
        for horizon in [*horizons, "avg"]:
            cells = []
            for model in models:
                rows = (
                    [results[(dataset, h, model)] for h in horizons]
                    if horizon == "avg"
                    else [results[(dataset, horizon, model)]]
                )
                cells += [
                    f"{sum(r[0] for r in rows) / len(rows):.3f}",
                    f"{sum(r[1] for r in rows) / len(rows):.3f}",
                ]
            secs = (
                sum(results[(dataset, h, m)][2] for h in horizons for m in models)
                if horizon == "avg"
                else sum(results[(dataset, horizon, m)][2] for m in models)
            )
            label = "**avg**" if horizon == "avg" else str(horizon)
            print(f"| {dataset} | {label} | " + " | ".join(cells) + f" | {secs:.0f} |")
        if dataset in PUBLISHED_LMM and horizons == [96, 192, 336, 720]:
            mse, mae = PUBLISHED_LMM[dataset]
            print(
                f"| {dataset} | Titans paper (LMM, avg) | {mse:.3f} | {mae:.3f} |"
                + " |" * (2 * len(models) - 1)
            )


if __name__ == "__main__":
    main()
