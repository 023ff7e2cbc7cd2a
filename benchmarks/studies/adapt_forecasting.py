"""SVF self-adaptation of one pretrained forecaster (Transformer² on time series).

    python benchmarks/studies/adapt_forecasting.py --out-dir runs/adapt_forecasting

One LMM forecaster (recipe `forecasting/etth1_lmm`, univariate OT, lookback 96, horizon 96)
is pretrained on the pooled training windows of ETTh1 + ETTm1 + Weather. It gets one SVF
expert per source dataset (z only, trained on that dataset's windows). On the unseen
ETTh2 and ETTm2 it is then evaluated (test MSE on z-scored values, every test window):

- zero-shot (the base model), every source expert alone;
- few-shot, from k labelled training windows of the new dataset: the best single expert on
  them, and the CEM search of mixture weights α over the experts on them;
- two-pass dispatch: an expert classifier (a logistic regression of the base model's features,
  or Transformer²'s classification expert: an SVF z_c and a linear head) trained to tell the
  source datasets apart picks an expert per test window;
- trained on the new dataset's full training split, at the same step budget: an SVF expert,
  LoRA (peft, rank 8, the same linear layers), full fine-tuning, and a fresh model trained
  from scratch.

Every model is selected on its validation split; the trainable parameter count is listed.
Results go to `<out-dir>/adapt_forecasting.md` and `.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from cells import mean_and_spread  # noqa: E402
from harness import provenance  # noqa: E402

SOURCES = ("ETTh1", "ETTm1", "Weather")
TARGETS = ("ETTh2", "ETTm2")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=Path("runs/adapt_forecasting"))
    p.add_argument("--pretrain-steps", type=int, default=1500)
    p.add_argument("--adapt-steps", type=int, default=400)
    p.add_argument("--shots", type=int, default=32, help="labelled windows for few-shot")
    p.add_argument("--seeds", default="0", help="comma-separated seeds")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--horizon", type=int, default=96)
    return p.parse_args(argv)


def splits(dataset: str, horizon: int):
    from titans_seq.data import forecast_splits
    from titans_seq.domains.forecasting.task import WindowTensors

    train, val, test, _ = forecast_splits(
        dataset, lookback=96, horizon=horizon, features="S", target="OT"
    )
    return tuple(WindowTensors.from_windows(s) for s in (train, val, test))


def pooled(parts):
    from titans_seq.domains.forecasting.task import WindowTensors

    return WindowTensors(torch.cat([p.x for p in parts]), torch.cat([p.y for p in parts]))


def config(out_dir: Path, name: str, steps: int, seed: int, horizon: int, lr: float):
    from titans_seq.training.config import load_config

    return load_config(
        "forecasting/etth1_lmm",
        [
            f"name={name}",
            "data.features=S",
            f"data.horizon={horizon}",
            f"train.max_steps={steps}",
            f"train.seed={seed}",
            f"train.out_dir={out_dir / name}",
            "train.progress=false",
            f"train.checkpoint_every={steps}",
            f"eval.every={max(50, steps // 8)}",
            "eval.patience=0",
            f"optim.lr={lr}",
            f"optim.warmup_steps={min(100, steps // 10)}",
        ],
    )


@torch.no_grad()
def test_mse(model, data, batch_size: int = 1024) -> float:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        x, y = data.x[start : start + batch_size], data.y[start : start + batch_size]
        total += float(((model(x) - y) ** 2).sum())
        count += y.numel()
    return total / count


def fit(cfg, task):
    """Train with the shared loop; returns (the run's best model, seconds)."""
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS, train

    start = time.perf_counter()
    train(cfg, task=task, quiet=True)
    model = task.model if getattr(task, "model", None) is not None else task.build_model(cfg)
    model.load_state_dict(load_weights(cfg.run_dir() / BEST_WEIGHTS))
    return model.eval(), time.perf_counter() - start


def run_seed(args, seed: int, data) -> dict:
    from titans_seq.adapt import (
        SVF,
        AdaptationTask,
        AdaptConfig,
        ExpertClassifier,
        SVFTaskClassifier,
        cem_mixture,
        count_trainable,
        loss_score,
        run_with_experts,
    )
    from titans_seq.domains.forecasting.task import InMemoryForecastTask, build_forecaster
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS

    out = args.out_dir / f"seed{seed}"
    H = args.horizon
    results: dict = {"seed": seed, "rows": {}}

    def fresh(cfg):
        return build_forecaster(cfg.model, 1, 96, H)

    # 1. the base: pretrained on the pooled sources
    cfg = config(out, "base", args.pretrain_steps, seed, H, 1e-3)
    train_pool = pooled([data[s][0] for s in SOURCES])
    val_pool = pooled([data[s][1] for s in SOURCES])
    base_weights = cfg.run_dir() / BEST_WEIGHTS
    if not base_weights.is_file():
        fit(cfg, InMemoryForecastTask(train_pool, val_pool, 1))
    base_state = load_weights(base_weights)

    def base_model(cfg):
        model = fresh(cfg)
        model.load_state_dict(base_state)
        return model

    def adapt(name, dataset, method, steps, lr):
        acfg = config(out, name, steps, seed, H, lr)
        task = AdaptationTask(
            InMemoryForecastTask(data[dataset][0], data[dataset][1], 1),
            base_model,
            AdaptConfig(method=method, task_name=dataset),
            base_name="adapt_forecasting/base",
        )
        if (acfg.run_dir() / BEST_WEIGHTS).is_file():
            model = task.build_model(acfg)
            model.load_state_dict(load_weights(acfg.run_dir() / BEST_WEIGHTS))
            return task, model.eval(), 0.0
        model, seconds = fit(acfg, task)
        return task, model, seconds

    # 2. one SVF expert per source dataset
    experts = {}
    for dataset in SOURCES:
        task, _model, _ = adapt(f"expert_{dataset}", dataset, "svf", args.adapt_steps, 2e-3)
        experts[dataset] = task.svf.expert(task=dataset)
    num_z = task.svf.num_parameters
    svf = SVF(base_model(cfg), base_name="adapt_forecasting/base")
    expert_list = [experts[s] for s in SOURCES]

    # the dispatcher: which source does a window come from (base features, 256 windows each)
    generator = torch.Generator().manual_seed(seed)
    picks = {s: torch.randperm(len(data[s][0]), generator=generator)[:256] for s in SOURCES}
    shots = [[(data[s][0].x[picks[s]], data[s][0].y[picks[s]])] for s in SOURCES]
    classifiers = {
        "two-pass: expert classifier": (
            ExpertClassifier(forward=lambda m, b: m(b[0])).fit(svf, shots),
            "a logistic regression",
        ),
        "two-pass: SVF classification expert": (
            SVFTaskClassifier(forward=lambda m, b: m(b[0]), seed=seed).fit(svf, shots),
            "z_c and a linear head",
        ),
    }

    for target in TARGETS:
        train_set, val_set, test_set = data[target]
        rows = {}
        svf.reset()
        rows["zero-shot (base)"] = (test_mse(svf.model, test_set), "0")
        for s in SOURCES:
            svf.load_expert(experts[s])
            rows[f"expert {s} alone"] = (test_mse(svf.model, test_set), f"{num_z:,} (z)")
        # few-shot: k windows of the new dataset's training split
        shots = torch.randperm(len(train_set), generator=generator)[: args.shots]
        few = [(train_set.x[shots], train_set.y[shots])]
        task = InMemoryForecastTask(train_set, val_set, 1)
        search = cem_mixture(svf, expert_list, loss_score(task, few), seed=seed)
        rows[f"few-shot CEM mixture (k={args.shots})"] = (
            test_mse(svf.model, test_set),
            f"{len(SOURCES)} (α) over {len(SOURCES)} experts",
        )
        best_single = int(torch.tensor(search.single_expert_scores).argmin())
        svf.load_expert(expert_list[best_single])
        rows[f"few-shot best single expert (k={args.shots})"] = (
            test_mse(svf.model, test_set),
            f"{num_z:,} (z)",
        )
        results.setdefault("mixtures", {})[target] = {
            "weights": dict(zip(SOURCES, search.weights.tolist())),
            "shots_mse": search.score,
            "single_expert_shots_mse": dict(zip(SOURCES, search.single_expert_scores)),
            "best_single_on_shots": SOURCES[best_single],
        }
        for label, (classifier, extra) in classifiers.items():
            choice = classifier.predict(svf, (test_set.x, test_set.y))
            prediction = run_with_experts(
                svf, expert_list, choice, (test_set.x, test_set.y), lambda m, b: m(b[0])
            )
            rows[label] = (
                float(((prediction - test_set.y) ** 2).mean()),
                f"{num_z:,} (z) + {extra}",
            )
            results.setdefault("dispatch", {}).setdefault(label, {})[target] = {
                s: int((choice == i).sum()) for i, s in enumerate(SOURCES)
            }
        svf.reset()
        # trained on the new dataset's full training split, same step budget
        for label, method, lr in (
            ("SVF expert on its train split", "svf", 2e-3),
            ("LoRA r=8 (peft) on its train split", "lora", 1e-3),
            ("full fine-tuning on its train split", "full", 3e-4),
        ):
            _task, model, _ = adapt(f"{method}_{target}", target, method, args.adapt_steps, lr)
            rows[label] = (test_mse(model, test_set), f"{count_trainable(model):,}")
        scratch_cfg = config(out, f"scratch_{target}", args.pretrain_steps, seed, H, 1e-3)
        if (scratch_cfg.run_dir() / BEST_WEIGHTS).is_file():
            scratch = fresh(scratch_cfg)
            scratch.load_state_dict(load_weights(scratch_cfg.run_dir() / BEST_WEIGHTS))
        else:
            scratch, _ = fit(scratch_cfg, InMemoryForecastTask(train_set, val_set, 1))
        rows[f"trained from scratch ({args.pretrain_steps} steps)"] = (
            test_mse(scratch, test_set),
            f"{count_trainable(scratch):,}",
        )
        results["rows"][target] = rows
    results["num_z"] = num_z
    results["num_base"] = sum(p.numel() for p in fresh(cfg).parameters())
    return results


def table(all_results: list[dict]) -> str:
    """Mean (± std over seeds) test MSE per strategy and unseen dataset."""
    rows = all_results[0]["rows"]
    lines = [
        "| strategy | trainable parameters | "
        + " | ".join(f"{t} test MSE" for t in TARGETS)
        + " |",
        "|---|---|" + "---|" * len(TARGETS),
    ]
    for label, (_mse, params) in rows[TARGETS[0]].items():
        cells = [mean_and_spread([r["rows"][t][label][0] for r in all_results]) for t in TARGETS]
        lines.append(f"| {label} | {params} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = {name: splits(name, args.horizon) for name in SOURCES + TARGETS}
    seeds = [int(s) for s in args.seeds.split(",")]
    all_results = [run_seed(args, seed, data) for seed in seeds]
    md = table(all_results)
    meta = provenance(torch.device("cpu"))
    meta["seconds"] = time.perf_counter() - start
    (args.out_dir / "adapt_forecasting.json").write_text(
        json.dumps(
            {
                "meta": meta,
                "args": vars(args) | {"out_dir": str(args.out_dir)},
                "results": all_results,
            },
            indent=2,
        )
    )
    (args.out_dir / "adapt_forecasting.md").write_text(md + "\n")
    print(md)
    for r in all_results:
        print("seed", r["seed"], "mixtures", json.dumps(r["mixtures"]), "dispatch", r["dispatch"])
    print(
        f"base parameters {all_results[0]['num_base']:,}; z per expert {all_results[0]['num_z']:,}"
    )
    print(f"total {meta['seconds']:.0f} s; {meta}")


if __name__ == "__main__":
    main()
