"""Long-horizon forecasting grid: Titans forecasters beside baselines, the papers' protocol.

    # the whole grid: 5 datasets x 4 horizons x 5 models x 3 seeds, resumable
    python benchmarks/grids/forecasting.py --out-dir runs/benchmark_forecasting
    # part of it, two cells side by side (one thread each), then only the table
    python benchmarks/grids/forecasting.py --datasets ETTh1 --models lmm,dlinear --seeds 0 --jobs 2
    # a longer lookback (its cells are named ...-L512 and get their own rows)
    python benchmarks/grids/forecasting.py --lookback 512 --models lmm,attention,patchtst
    python benchmarks/grids/forecasting.py --table

Every (dataset, horizon, model, seed) cell is trained with the same recipe
(`forecasting/etth1_lmm`, with the dataset, horizon and model overridden) by the shared
training loop, early-stopped on validation MSE; the checkpoint with the best validation MSE
is evaluated on every test window (protocol: titans_seq.data.forecast_splits, lookback 96
unless --lookback says otherwise; MSE/MAE on z-scored values). Each finished cell is written
to `<out-dir>/cells/*.json` (config, seed, metrics, time, device, commit) and skipped on a
rerun, so a killed grid resumes where it stopped. The table (`<out-dir>/forecasting.md`)
gives mean ± std over seeds and the average over horizons beside the published averages.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from cells import CellStore, exit_with_parent, mean_and_spread  # noqa: E402
from harness import provenance  # noqa: E402

from titans_seq.training.checkpoint import atomic_write_text  # noqa: E402

DATASETS = ("ETTh1", "ETTh2", "ETTm1", "ETTm2", "Weather")
HORIZONS = (96, 192, 336, 720)
# model name -> recipe overrides (the same Simba harness; DLinear replaces the network)
MODELS = {
    "lmm": [],
    "mag": ["model.mixer=mag", "model.mixer_options={chunk_size: 16, window: 8}"],
    "mal": ["model.mixer=mal", "model.mixer_options={chunk_size: 16, window: 8}"],
    "attention": ["model.mixer=attention", "model.mixer_options={}"],
    "dlinear": ["model.architecture=dlinear", "optim.lr=5e-3", "optim.weight_decay=0"],
    "patchtst": ["model.architecture=patchtst"],
}
# the papers' protocol; cells at other lookbacks carry it in their names
DEFAULT_LOOKBACK = 96
# the models whose mixer holds a Titans memory (and so takes a memory backend)
MEMORY_MODELS = ("lmm", "mag", "mal")
# Averages of MSE over H in {96, 192, 336, 720} at lookback 96: Titans (LMM) from Table 3 of
# Behrouz et al. 2025; Simba, iTransformer and PatchTST as that table lists them.
# The last column: PatchTST/64 at lookback 512 (Nie et al. 2023, Table 3), the long-lookback
# reference.
PUBLISHED_MSE_COLUMNS = ("Titans (LMM)", "Simba", "iTransformer", "PatchTST", "PatchTST/64 L=512")
PUBLISHED_MSE = {
    "ETTh1": (0.420, 0.441, 0.454, 0.469, 0.413),
    "ETTh2": (0.336, 0.361, 0.383, 0.387, 0.331),
    "ETTm1": (0.358, 0.383, 0.407, 0.387, 0.353),
    "ETTm2": (0.261, 0.271, 0.288, 0.281, 0.256),
    "Weather": (0.231, 0.255, 0.258, 0.259, 0.226),
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


def run_cell(
    dataset: str,
    horizon: int,
    model: str,
    seed: int,
    lookback: int,
    args,
    run_dir: Path,
    resume: bool = False,
) -> dict:
    """Train one (dataset, horizon, model, seed, lookback) and evaluate its best checkpoint
    on test; resume: continue a killed cell from the newest checkpoint in run_dir."""
    from titans_seq.devices import resolve_device
    from titans_seq.training import load_config, train
    from titans_seq.training.loop import BEST_WEIGHTS

    torch.set_num_threads(args.threads)
    overrides = [
        f"data.dataset={dataset}",
        f"data.horizon={horizon}",
        f"data.lookback={lookback}",
        f"train.max_steps={args.max_steps}",
        f"train.seed={seed}",
        f"train.device={args.device}",
        f"train.out_dir={run_dir}",
        "train.progress=false",
        *MODELS[model],
        *args.overrides,
    ]
    if args.memory_backend != "auto" and model in MEMORY_MODELS:
        overrides.append(f"model.mixer_options.backend={args.memory_backend}")
    cfg = load_config(args.recipe, overrides)
    device = resolve_device(args.device)
    start = time.perf_counter()
    result = train(cfg, resume=resume)
    train_seconds = time.perf_counter() - start
    start = time.perf_counter()
    mse, mae = evaluate_test(cfg, result.run_dir / BEST_WEIGHTS, device)
    return {
        "dataset": dataset,
        "horizon": horizon,
        "model": model,
        "seed": seed,
        "lookback": lookback,
        "test_mse": mse,
        "test_mae": mae,
        "best_val_mse": result.best_metric,
        "best_step": result.best_step,
        "steps": result.step,
        "stopped_early": result.stopped_early,
        # a resumed cell counts only the seconds of the process that finished it
        "train_seconds": round(train_seconds, 1),
        "resumed": resume,
        "test_seconds": round(time.perf_counter() - start, 1),
        "recipe": args.recipe,
        "overrides": [o for o in overrides if not o.startswith(("train.out_dir", "train.pro"))],
        **provenance(device),
    }


def record_lookback(record: dict) -> int:
    """The lookback a cell ran at; cells written before records named it ran the protocol's."""
    return record.get("lookback", DEFAULT_LOOKBACK)


def cell_name(dataset: str, horizon: int, model: str, seed: int, lookback: int) -> str:
    suffix = "" if lookback == DEFAULT_LOOKBACK else f"-L{lookback}"
    return f"{dataset}-H{horizon}-{model}-seed{seed}{suffix}"


def _run_and_store(store: CellStore, key: tuple, args) -> str:
    name = cell_name(*key)
    run_dir, resume = store.resumable_run_dir(name)
    if resume:
        print(f"{name}: resuming from the newest checkpoint in {run_dir}", flush=True)
    record = run_cell(*key, args, run_dir, resume)
    store.save(name, record)
    return (
        f"{name}: MSE {record['test_mse']:.3f} MAE {record['test_mae']:.3f} "
        f"({record['train_seconds']:.0f} s, {record['steps']} steps)"
    )


def run_grid(args) -> None:
    store = CellStore(args.out_dir)
    todo = [
        key
        for seed in args.seeds
        for model in args.models
        for dataset in args.datasets
        for horizon in args.horizons
        if not store.done(cell_name(*(key := (dataset, horizon, model, seed, args.lookback))))
    ]
    print(f"{len(todo)} cells to run in {args.out_dir}", flush=True)
    if args.jobs == 1:
        for key in todo:
            print(_run_and_store(store, key, args), flush=True)
        return
    # spawn: each worker starts clean (no forked CUDA context, its own thread count)
    context = multiprocessing.get_context("spawn")
    # workers end with the grid, also when it is killed by a signal it cannot handle
    with ProcessPoolExecutor(
        max_workers=args.jobs,
        mp_context=context,
        initializer=exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        futures = [pool.submit(_run_and_store, store, key, args) for key in todo]
        for future in as_completed(futures):
            print(future.result(), flush=True)


def write_table(store: CellStore) -> str:
    """Markdown of every cell in the store: test MSE / MAE per dataset, lookback and horizon
    (mean ± std over seeds), the average over the four horizons per seed, and the papers'
    averages beside it. Written to `<store>/forecasting.md` and returned. It always covers
    every model in the store, so a run of one model does not shrink the table that the
    others' cells made."""
    cells: dict[tuple[str, int, int, str], list[dict]] = {}
    for record in store.load_all():
        key = (record["dataset"], record_lookback(record), record["horizon"], record["model"])
        cells.setdefault(key, []).append(record)
    models = [m for m in MODELS if any(k[3] == m for k in cells)]
    datasets = [d for d in DATASETS if any(k[0] == d for k in cells)]
    lookbacks = sorted({k[1] for k in cells})
    provenances = sorted({(r["device"], r["commit"]) for rs in cells.values() for r in rs})
    dates = sorted({r["date"] for rs in cells.values() for r in rs})
    lines = [
        f"Cells: {sum(len(rs) for rs in cells.values())}; dates {dates[0]} to {dates[-1]}; "
        + "; ".join(f"{dev}, commit {commit}" for dev, commit in provenances)
        + ". Test MSE / MAE on z-scored values, mean ± std over seeds; n: the seeds per "
        + f"model ({' / '.join(models)}; at avg, the seeds that finished all four horizons).",
        "",
        "| dataset | L | H | " + " | ".join(f"{m} MSE | {m} MAE" for m in models) + " | n |",
        "|---|---|---|" + "---|---|" * len(models) + "---|",
    ]
    for dataset, lookback in ((d, lb) for d in datasets for lb in lookbacks):
        if not any(k[:2] == (dataset, lookback) for k in cells):
            continue
        for horizon in HORIZONS:
            if not any((dataset, lookback, horizon, m) in cells for m in models):
                continue
            row, counts = [], []
            for m in models:
                runs = cells.get((dataset, lookback, horizon, m), [])
                counts.append(len({r["seed"] for r in runs}))
                row += [
                    mean_and_spread([r[f"test_{k}"] for r in runs]) if runs else "–"
                    for k in ("mse", "mae")
                ]
            n = " / ".join(map(str, counts))
            lines.append(f"| {dataset} | {lookback} | {horizon} | " + " | ".join(row) + f" | {n} |")
        # the average over horizons is taken per seed, over seeds that finished all four
        row, counts = [], []
        for m in models:
            per_seed: dict[int, list[dict]] = {}
            for h in HORIZONS:
                for r in cells.get((dataset, lookback, h, m), []):
                    per_seed.setdefault(r["seed"], []).append(r)
            complete = [rs for rs in per_seed.values() if len(rs) == len(HORIZONS)]
            counts.append(len(complete))
            for k in ("mse", "mae"):
                avgs = [sum(r[f"test_{k}"] for r in rs) / len(rs) for rs in complete]
                row.append(f"**{mean_and_spread(avgs)}**" if avgs else "–")
        if any(counts):  # no average of a part of the horizons
            n = " / ".join(map(str, counts))
            lines.append(f"| {dataset} | {lookback} | avg | " + " | ".join(row) + f" | {n} |")
    lines += [
        "",
        "Published averages over H ∈ {96, 192, 336, 720} (MSE): at lookback 96 Titans (LMM) "
        "from the Titans paper, Simba, iTransformer and PatchTST as the Titans paper lists "
        "them; PatchTST/64 at lookback 512 from the PatchTST paper.",
        "",
        "| dataset | " + " | ".join(PUBLISHED_MSE_COLUMNS) + " |",
        "|---|" + "---|" * len(PUBLISHED_MSE_COLUMNS),
    ]
    for dataset in datasets:
        values = PUBLISHED_MSE[dataset]
        lines.append(f"| {dataset} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
    text = "\n".join(lines) + "\n"
    # side-by-side runs each rewrite the table when they finish: replace, never half-write
    atomic_write_text(store.root / "forecasting.md", text)
    return text


def validation_table(store: CellStore) -> str:
    """Markdown of the best validation MSE of every (dataset, lookback, horizon, model) in the
    store, mean ± std over seeds: what hyper-parameters are chosen on (never the test MSE).
    Written to `<store>/validation.md` and returned."""
    cells: dict[tuple[str, int, int], dict[str, list[float]]] = {}
    for record in store.load_all():
        key = (record["dataset"], record_lookback(record), record["horizon"])
        cells.setdefault(key, {}).setdefault(record["model"], []).append(record["best_val_mse"])
    models = [m for m in MODELS if any(m in row for row in cells.values())]
    lines = [
        "| dataset | L | H | " + " | ".join(f"{m} val MSE" for m in models) + " |",
        "|---|---|---|" + "---|" * len(models),
    ]
    for (dataset, lookback, horizon), row in sorted(
        cells.items(), key=lambda item: (DATASETS.index(item[0][0]), item[0][1], item[0][2])
    ):
        values = [mean_and_spread(row[m]) if m in row else "–" for m in models]
        lines.append(f"| {dataset} | {lookback} | {horizon} | " + " | ".join(values) + " |")
    text = "\n".join(lines) + "\n"
    atomic_write_text(store.root / "validation.md", text)
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--horizons", default=",".join(map(str, HORIZONS)))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--lookback", type=int, default=DEFAULT_LOOKBACK, help="rows each forecast reads"
    )
    parser.add_argument("--recipe", default="forecasting/etth1_lmm")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda")
    parser.add_argument(
        "--memory-backend",
        default="auto",
        help="the memory op's backend for lmm/mag/mal (auto, torch, compiled, triton); "
        "'compiled' (torch.compile of the chunk step) is the fastest on CPU",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a recipe override for every cell, after the model's (repeatable; the cells'\n"
        "names do not show it, so give such a grid its own --out-dir)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="cells run side by side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per job")
    parser.add_argument("--out-dir", type=Path, default=Path("runs/benchmark_forecasting"))
    parser.add_argument(
        "--table",
        action="store_true",
        help="only write the tables (of every cell in the store): test MSE/MAE in\n"
        "forecasting.md, the best validation MSE (for choosing settings) in validation.md",
    )
    args = parser.parse_args(argv)
    args.datasets = args.datasets.split(",")
    args.horizons = [int(h) for h in args.horizons.split(",")]
    args.models = args.models.split(",")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    for name, chosen, known in (
        ("model", args.models, MODELS),
        ("dataset", args.datasets, DATASETS),
    ):
        unknown = sorted(set(chosen) - set(known))
        if unknown:
            parser.error(f"unknown {name}(s) {unknown}; choose from {list(known)}")
    if not args.table:
        run_grid(args)
    print(write_table(CellStore(args.out_dir)))
    print(validation_table(CellStore(args.out_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
