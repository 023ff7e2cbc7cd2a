"""Ablation of the memory's update parametrisation: inner-gradient clip on/off x theta scales.

    # the CPU ablation of benchmarks/results/NOTES.md (about an hour on 2 cores)
    python benchmarks/studies/memory_parametrisation.py --out-dir runs/memory_parametrisation
    # the chunk size alone: a fixed step bound against the one that moves with C
    python benchmarks/studies/memory_parametrisation.py --chunk-sizes 1,4,16,64 \
        --variants damped0.0625-clipauto,damped-1/C-clipauto --out-dir runs/chunk_sizes

Each variant is a set of memory options (`theta_max`, `damped_momentum`, `inner_grad_clip`);
each task trains the same small model from its built-in recipe with the variant's options
through the shared training loop (same data, seed, steps):

  recall    synthetic associative recall (`synthetic/associative_recall_lmm`, shrunk): val
            accuracy of recalling 8 values 64+ tokens after their keys
  passkey   passkey retrieval at 128 tokens (`lm/passkey_lmm`, shrunk): val accuracy (all
            digits right) and the answer loss
  etth1     ETTh1 forecasting, horizon 96 (`forecasting/etth1_lmm`): val MSE (z-scored)

After training, the best weights are run over validation batches inside
`titans_seq.record_memory`: the table reports how often the inner-gradient clip scaled a
write (`clip active`), the surprise ||u_t|| median and 99th percentile, and for every variant
the share of writes a clip at 10 would touch (what a safety bound would cost). A run whose
loss or gradients became non-finite is reported as diverged (the loop stops it).

Each cell trains with every seed of `--seeds` (initialisation and batch order; the data are
the same): passkey accuracy in particular jumps when retrieval "clicks", so one seed decides
little. Writes `<out-dir>/parametrisation.json` (every number per seed, the command, device,
date, commit) and `<out-dir>/parametrisation.md` (the table of benchmarks/results/NOTES.md: mean and
range over seeds). Finished cells are kept in the JSON and skipped on a rerun.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from harness import git_commit  # noqa: E402

VARIANTS = {
    # key: memory options. "plain": theta_t = theta_max * sigmoid(.) as in the paper's update;
    # "damped": theta_t = theta_max * sigmoid(.) * (1 - eta_t), the same update with the
    # learning rate scaled by the momentum's (1 - eta) (an exponential moving average)
    "plain1-clip1": {"theta_max": 1.0, "inner_grad_clip": 1.0, "damped_momentum": False},
    "plain1": {"theta_max": 1.0, "inner_grad_clip": None, "damped_momentum": False},
    "plain0.1": {"theta_max": 0.1, "inner_grad_clip": None, "damped_momentum": False},
    "damped1": {"theta_max": 1.0, "inner_grad_clip": None, "damped_momentum": True},
    "damped0.25": {"theta_max": 0.25, "inner_grad_clip": None, "damped_momentum": True},
    "damped0.25-clip10": {"theta_max": 0.25, "inner_grad_clip": 10.0, "damped_momentum": True},
    "damped0.1": {"theta_max": 0.1, "inner_grad_clip": None, "damped_momentum": True},
    # theta_max = 1/(2C): a chunk of C identical keys writes at most one delta-rule step
    "damped-half/C": {"theta_max": "1/2C", "inner_grad_clip": None, "damped_momentum": True},
    "damped-half/C-clip10": {"theta_max": "1/2C", "inner_grad_clip": 10.0, "damped_momentum": True},
    "damped-1/C": {"theta_max": "1/C", "inner_grad_clip": None, "damped_momentum": True},
    "damped-1/C-clip10": {"theta_max": "1/C", "inner_grad_clip": 10.0, "damped_momentum": True},
    # the defaults: theta_max None = 1/C, inner_grad_clip "auto" = 2 sqrt(head dim)
    "damped-1/C-clipauto": {"theta_max": None, "inner_grad_clip": "auto", "damped_momentum": True},
    # a step bound that does not move with the chunk size (1/16, the default's value at C = 16)
    "damped0.0625-clipauto": {
        "theta_max": 0.0625,
        "inner_grad_clip": "auto",
        "damped_momentum": True,
    },
}
SAFETY_CLIP = 10.0


def task_overrides(task: str, steps: int | None) -> tuple[str, dict]:
    """(built-in recipe, overrides) of one task, shrunk to minutes on a CPU."""
    common = {"train.progress": False, "train.plot": False, "train.tensorboard": False}
    common["train.precision"] = "fp32"
    if task == "recall":
        return "synthetic/associative_recall_lmm", common | {
            "model.dim": 64,
            "model.heads": 4,
            "data.vocab_size": 64,
            "data.num_pairs": 8,
            "data.gap": 64,
            "data.num_train": 20000,
            "data.num_val": 256,
            "train.max_steps": steps or 600,
            "train.batch_size": 32,
            "train.checkpoint_every": 10**6,
            "eval.every": 100,
            "eval.patience": 0,
            "optim.lr": 3e-3,
            "optim.warmup_steps": 50,
        }
    if task == "passkey":
        return "lm/passkey_lmm", common | {
            "model.dim": 64,
            "model.depth": 2,
            "model.heads": 2,
            "model.mixer_options.memory.chunk_size": 8,
            "data.train_length": 128,
            "data.num_train": 100000,
            "data.num_val": 64,
            "train.max_steps": steps or 600,
            "train.batch_size": 16,
            "train.checkpoint_every": 10**6,
            "eval.every": 100,
            "eval.batch_size": 64,
            "optim.lr": 3e-3,
            "optim.warmup_steps": 40,
        }
    if task == "etth1":
        return "forecasting/etth1_lmm", common | {
            "train.max_steps": steps or 600,
            "train.checkpoint_every": 10**6,
            "eval.every": 100,
            "eval.patience": 0,
        }
    raise ValueError(f"unknown task {task!r}")


def memory_statistics(task, model, val_set, batches: int, batch_size: int, clip) -> dict:
    """Surprise and clip statistics of the trained model over validation batches."""
    from titans_seq import record_memory
    from titans_seq.training.tasks import fetch_batch

    model.eval()
    surprise = []
    with torch.no_grad(), record_memory(model) as recording:
        for b in range(batches):
            start = b * batch_size
            if start >= len(val_set):
                break
            indices = range(start, min(len(val_set), start + batch_size))
            task.loss(model, fetch_batch(val_set, indices))
    for record in recording.traces:
        surprise.append(record.trace.surprise.flatten())
    s = torch.cat(surprise).double()
    q = torch.quantile(s, torch.tensor([0.5, 0.99], dtype=s.dtype))
    return {
        "clip_active": recording.clip_active(),
        "surprise_median": float(q[0]),
        "surprise_p99": float(q[1]),
        "surprise_max": float(s.max()),
        "share_above_safety_clip": float((s > SAFETY_CLIP).double().mean()),
        "theta_mean": float(
            torch.cat([r.trace.theta.flatten() for r in recording.traces]).double().mean()
        ),
        "eta_mean": float(
            torch.cat([r.trace.eta.flatten() for r in recording.traces]).double().mean()
        ),
    }


def run_cell(
    task_name: str, name: str, steps: int | None, out_dir: Path, seed: int, chunk: int | None = None
) -> dict:
    """Train one (task, variant, seed), with the memory's chunk size `chunk` (None: the
    task's own), and measure the best weights."""
    from titans_seq.training import TrainingDiverged, load_config, train
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS
    from titans_seq.training.tasks import get_task

    variant = dict(VARIANTS[name])
    recipe, overrides = task_overrides(task_name, steps)
    # the memory's options go under `memory:`, as the recipes write them
    if chunk is not None:
        overrides["model.mixer_options.memory.chunk_size"] = chunk
    if variant["theta_max"] in ("1/C", "1/2C"):  # the chunk size this cell runs with
        C = overrides.get("model.mixer_options.memory.chunk_size")
        if C is None:
            memory = load_config(recipe).model.mixer_options.get("memory") or {}
            C = memory.get("chunk_size", 16)
        variant["theta_max"] = 1.0 / (C if variant["theta_max"] == "1/C" else 2 * C)
    for key, value in variant.items():
        overrides[f"model.mixer_options.memory.{key}"] = value
    overrides["train.seed"] = seed  # initialisation and batch order; the data stay the same
    label = name.replace("/", "_") + ("" if chunk is None else f"-C{chunk}")
    run_dir = out_dir / "runs" / f"{task_name}-{label}-seed{seed}"
    overrides["train.out_dir"] = str(run_dir)
    if run_dir.exists():
        import shutil

        shutil.rmtree(run_dir)
    cfg = load_config(recipe, overrides)
    start = time.perf_counter()
    try:
        result = train(cfg)
    except TrainingDiverged as err:
        return {"diverged_at": err.step, "what": err.what, "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    task = get_task(cfg.task)
    model = task.build_model(cfg)
    model.load_state_dict(load_weights(run_dir / BEST_WEIGHTS))
    _, val_set = task.build_datasets(cfg)
    stats = memory_statistics(
        task, model, val_set, 2, cfg.eval.batch_size or 64, variant["inner_grad_clip"]
    )
    last = {k: v for k, v in result.history[-1].items() if k != "step"}
    best = next(h for h in result.history if h["step"] == result.best_step)
    return {
        "best_step": result.best_step,
        "best": {k: v for k, v in best.items() if k != "step"},
        "last": last,
        "seconds": seconds,
        **stats,
    }


METRICS = {"recall": ("accuracy",), "passkey": ("accuracy", "loss"), "etth1": ("mse",)}


def metric_text(task: str, cell: dict) -> str:
    if "diverged_at" in cell:
        return f"diverged (step {cell['diverged_at']})"
    return ", ".join(f"{m} {cell['best'][m]:.4g}" for m in METRICS[task])


def seeds_text(task: str, cells: list[dict]) -> str:
    """Mean (min-max) of each metric over the seeds, divergences, clip share, surprise."""
    ok = [c for c in cells if "diverged_at" not in c]
    parts = []
    diverged = [c["diverged_at"] for c in cells if "diverged_at" in c]
    if diverged:
        parts.append(
            f"diverged in {len(diverged)}/{len(cells)} (steps {', '.join(map(str, diverged))})"
        )
    if ok:
        for metric in METRICS[task]:
            values = [c["best"][metric] for c in ok]
            spread = f" ({min(values):.3f}-{max(values):.3f})" if len(values) > 1 else ""
            parts.append(f"{metric} {sum(values) / len(values):.3f}{spread}")
        clip = sum(c["clip_active"] for c in ok) / len(ok)
        p99 = sum(c["surprise_p99"] for c in ok) / len(ok)
        parts.append(f"clip active {100 * clip:.1f}%, surprise p99 {p99:.3g}")
    return "; ".join(parts)


def cell_key(name: str, chunk: int | None) -> str:
    """A result's key: the variant, and `@C<chunk>` when the chunk size was set."""
    return name if chunk is None else f"{name}@C{chunk}"


def write_table(results: dict, tasks: list[str], path: Path, header: str) -> None:
    lines = [header, ""]
    lines.append("| variant | " + " | ".join(tasks) + " |")
    lines.append("|---|" + "---|" * len(tasks))
    for key in sorted(results, key=_table_order):
        name, _, chunk = key.partition("@C")
        cells = []
        for task in tasks:
            per_seed = results[key].get(task) or {}
            cells.append(seeds_text(task, list(per_seed.values())) if per_seed else "–")
        options = ", ".join(f"{k}={v}" for k, v in VARIANTS[name].items())
        options = options.replace("theta_max=None", "theta_max=1/C (default)")
        if chunk:
            options += f", chunk_size={chunk}"
        lines.append(f"| {name} ({options}) | " + " | ".join(cells) + " |")
    path.write_text("\n".join(lines) + "\n")


def _table_order(key: str):
    name, _, chunk = key.partition("@C")
    return (list(VARIANTS).index(name), int(chunk or 0))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tasks", default="recall,passkey,etth1")
    p.add_argument("--variants", default=None, help="comma-separated variant names (default all)")
    p.add_argument("--steps", type=int, default=None, help="override every task's step count")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seeds", default="0", help="comma-separated training seeds")
    p.add_argument(
        "--chunk-sizes",
        default=None,
        help="comma-separated memory chunk sizes, each run for every variant (default: each "
        "task's own)",
    )
    p.add_argument("--out-dir", default="runs/memory_parametrisation")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = args.tasks.split(",")
    names = list(VARIANTS) if args.variants is None else args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; choose from {list(VARIANTS)}")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / "parametrisation.json"
    payload = json.loads(store.read_text()) if store.exists() else {"results": {}}
    commit = git_commit()
    payload.update(
        command="python " + " ".join([sys.argv[0], *(argv or sys.argv[1:])]),
        device=f"cpu ({platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads)",
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        commit=commit,
        torch=torch.__version__,
        variants=VARIANTS,
    )
    results = payload["results"]
    seeds = [int(x) for x in args.seeds.split(",")]
    chunks = [None] if args.chunk_sizes is None else [int(c) for c in args.chunk_sizes.split(",")]
    for seed in seeds:
        for chunk in chunks:
            for name in names:
                key = cell_key(name, chunk)
                for task in tasks:
                    done = results.setdefault(key, {}).setdefault(task, {})
                    if str(seed) in done:
                        continue
                    print(f"[{key}] {task} seed {seed} ...", flush=True)
                    cell = run_cell(task, name, args.steps, out_dir, seed, chunk)
                    done[str(seed)] = cell
                    text = metric_text(task, cell)
                    print(f"[{key}] {task} seed {seed}: {text} ({cell['seconds']:.0f}s)")
                    store.write_text(json.dumps(payload, indent=1, default=str))
    header = (
        f"Memory parametrisation ablation; `{payload['command']}`; {payload['device']}; "
        f"{payload['date']}; commit {payload['commit']}"
    )
    write_table(results, tasks, out_dir / "parametrisation.md", header)
    print((out_dir / "parametrisation.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
