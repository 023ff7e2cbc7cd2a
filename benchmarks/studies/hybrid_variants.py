"""Ablation of the MAC and MAL variants: today's defaults against the paper's wiring.

    # the CPU ablation of benchmarks/results/NOTES.md (two processes side by side, 1 thread each)
    python benchmarks/studies/hybrid_variants.py --out-dir runs/hybrid_variants \
        --variants mac,mac-segment,mac-attention-input &
    python benchmarks/studies/hybrid_variants.py --out-dir runs/hybrid_variants \
        --variants mac-paper,mal,mal-two-layers &
    wait; python benchmarks/studies/hybrid_variants.py --out-dir runs/hybrid_variants --table

Variants (`mixer_options` on top of each task's settings):

  mac                  retrieval="learned", memory_input="residual" (the default)
  mac-segment          retrieval="segment": each token reads the memory with its own query
                       (eq. 21-22, causal mask over the retrieved block)
  mac-attention-input  memory_input="attention": the memory absorbs the attention output
  mac-paper            both: the paper's MAC
  mal                  layout="one_block": memory and SWA in one block
  mal-two-layers       layout="two_layers" (the default): the paper's memory layer +
                       pre-norm SWA layer

Tasks, each trained through the shared training loop with the same data, steps and seeds:

  recall   associative recall (`associative_recall` task: 4 pairs, 16 filler tokens, T = 32,
           vocabulary 32; D = 32, 2 blocks, one head, attention window / MAC segment 8,
           memory chunk 4 and depth 1: every answer lies beyond the attention), 300 steps.
           Evaluated on 512 held-out sequences whose gap is stretched so that T is 1, 2, 4
           and 8 times the training length (the same pairs, a longer stretch of filler).
  passkey  passkey retrieval (`lm/passkey_<mixer>`, shrunk: byte level, 128 tokens, D = 64,
           2 blocks, 2 heads, window / segment 16, chunk 8), 800 steps; evaluated with
           `evaluate_passkey` (greedy, streaming state) at 128, 256, 512 and 1,024 tokens.

Every cell (task, variant, seed) is written to `<out-dir>/cells/*.json` as it finishes and
skipped when present, so the work can be split over processes and resumed; `--table` writes
`<out-dir>/hybrid_variants.md` (mean and range over seeds) with the command, device, date and
commit.
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
from cells import CellStore  # noqa: E402
from harness import git_commit  # noqa: E402

VARIANTS = {
    "mac": ("mac", {}),
    "mac-segment": ("mac", {"retrieval": "segment"}),
    "mac-attention-input": ("mac", {"memory_input": "attention"}),
    "mac-paper": ("mac", {"retrieval": "segment", "memory_input": "attention"}),
    "mal": ("mal", {"layout": "one_block"}),
    "mal-two-layers": ("mal", {"layout": "two_layers"}),
}
FACTORS = (1, 2, 4, 8)
PASSKEY_LENGTH = 128


def recall_config(variant: str, seed: int, steps: int, out_dir: Path) -> dict:
    """The recall recipe of one cell: the learning check of tests/test_recall_learning.py."""
    from titans_seq.synthetic.learning_check import LEARNING_CHECK_WINDOW, learning_check_recipe

    mixer, options = VARIANTS[variant]
    size = {"segment_size": LEARNING_CHECK_WINDOW, "num_memory_tokens": 4}
    if mixer == "mal":
        size = {"window": LEARNING_CHECK_WINDOW}
    mixer_options = {"memory": {"chunk_size": 4, "depth": 1}, **size, **options}
    name = f"recall_{variant}_seed{seed}"
    return learning_check_recipe(mixer, mixer_options, out_dir, steps, seed, name=name)


def best_model(cfg, run_dir: Path) -> torch.nn.Module:
    """The model of a finished run with its best validation weights, in eval mode."""
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS
    from titans_seq.training.tasks import get_task

    model = get_task(cfg.task).build_model(cfg)
    model.load_state_dict(load_weights(run_dir / BEST_WEIGHTS))
    return model.eval()


def run_recall(variant: str, seed: int, steps: int, run_dir: Path) -> dict:
    from titans_seq.synthetic import AssociativeRecall
    from titans_seq.synthetic.associative_recall import recall_accuracy
    from titans_seq.synthetic.learning_check import LEARNING_CHECK_TASK as task
    from titans_seq.training import from_dict, train

    cfg = from_dict(recall_config(variant, seed, steps, run_dir))
    start = time.perf_counter()
    result = train(cfg)
    seconds = time.perf_counter() - start
    model = best_model(cfg, run_dir)
    train_length = AssociativeRecall(**task).seq_len
    accuracy = {}
    for factor in FACTORS:  # as many pairs and queries, more filler between
        gap = task["gap"] + (factor - 1) * train_length
        stretched = AssociativeRecall(**{**task, "gap": gap})
        batch = stretched.sample(512, seed=10_000 + factor)  # held out: not the training seed
        with torch.no_grad():
            logits, _ = model(batch.inputs)
        accuracy[factor * train_length] = recall_accuracy(logits, batch.targets)
    return {"accuracy": accuracy, "best_step": result.best_step, "seconds": seconds}


def passkey_overrides(variant: str, seed: int, steps: int, run_dir: Path) -> dict:
    mixer, options = VARIANTS[variant]
    size_key = "segment_size" if mixer == "mac" else "window"
    overrides = {
        "model.dim": 64,
        "model.depth": 2,
        "model.heads": 2,
        f"model.mixer_options.{size_key}": 16,
        "model.mixer_options.memory.chunk_size": 8,
        "data.train_length": PASSKEY_LENGTH,
        "data.num_train": 100_000,
        "data.num_val": 64,
        "train.max_steps": steps,
        "train.batch_size": 16,
        "train.seed": seed,
        "train.precision": "fp32",
        "train.device": "cpu",
        "train.checkpoint_every": 10**6,
        "train.out_dir": str(run_dir),
        "train.progress": False,
        "train.plot": False,
        "train.tensorboard": False,
        "eval.every": 100,
        "eval.batch_size": 64,
        "optim.lr": 3e-3,
        "optim.warmup_steps": 40,
    }
    for key, value in options.items():
        overrides[f"model.mixer_options.{key}"] = value
    return overrides


def run_passkey(variant: str, seed: int, steps: int, run_dir: Path, samples: int) -> dict:
    from titans_seq.domains.lm.evals.passkey import evaluate_passkey
    from titans_seq.training.config import load_config
    from titans_seq.training.loop import train

    mixer, _ = VARIANTS[variant]
    cfg = load_config(f"lm/passkey_{mixer}", passkey_overrides(variant, seed, steps, run_dir))
    start = time.perf_counter()
    result = train(cfg)
    seconds = time.perf_counter() - start
    model = best_model(cfg, run_dir)
    lengths = [f * PASSKEY_LENGTH for f in FACTORS]
    evaluation = evaluate_passkey(model, lengths, samples, seed=1, chunk_len=PASSKEY_LENGTH)
    return {
        "accuracy": {int(k): v for k, v in evaluation.accuracy.items()},
        "best_step": result.best_step,
        "seconds": seconds,
    }


def run_cells(args) -> None:
    torch.set_num_threads(args.threads)
    store = CellStore(args.out_dir)
    for task in args.tasks.split(","):
        for variant in args.variants.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                name = f"{task}-{variant}-seed{seed}"
                if store.done(name):
                    continue
                run_dir = store.fresh_run_dir(name)  # an unfinished cell starts again
                if task == "recall":
                    cell = run_recall(variant, seed, args.recall_steps, run_dir)
                elif task == "passkey":
                    cell = run_passkey(variant, seed, args.passkey_steps, run_dir, args.samples)
                else:
                    raise SystemExit(f"unknown task {task!r}: recall or passkey")
                store.save(name, cell)
                print(f"{task} {variant} seed {seed}: {cell['accuracy']}", flush=True)


def summary(values: list[float]) -> str:
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} ({min(values):.2f}-{max(values):.2f})"


def write_table(out_dir: Path) -> str:
    cells: dict[tuple[str, str], list[dict]] = {}
    for path in sorted((out_dir / "cells").glob("*.json")):
        task, rest = path.stem.split("-", 1)
        variant = rest.rsplit("-seed", 1)[0]
        cells.setdefault((task, variant), []).append(json.loads(path.read_text()))
    commit = git_commit()
    lines = [
        f"Device: {platform.machine()} CPU, torch {torch.__version__}; date "
        f"{datetime.now(timezone.utc):%Y-%m-%d}; commit {commit}. Accuracy per evaluation "
        "length, mean (min-max) over seeds.",
        "",
    ]
    for task in ("recall", "passkey"):
        rows = [(v, cells[(task, v)]) for v in VARIANTS if (task, v) in cells]
        if not rows:
            continue
        lengths = sorted({int(n) for _, runs in rows for n in runs[0]["accuracy"]})
        lines.append(
            f"| {task} variant | seeds | " + " | ".join(f"T={n}" for n in lengths) + " | train s |"
        )
        lines.append("|---|---|" + "---|" * len(lengths) + "---|")
        for variant, runs in rows:
            accuracy = [summary([r["accuracy"][str(n)] for r in runs]) for n in lengths]
            seconds = sum(r["seconds"] for r in runs) / len(runs)
            lines.append(
                f"| {variant} | {len(runs)} | " + " | ".join(accuracy) + f" | {seconds:.0f} |"
            )
        lines.append("")
    text = "\n".join(lines)
    (out_dir / "hybrid_variants.md").write_text(text)
    return text


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=Path("runs/hybrid_variants"))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--tasks", default="recall,passkey")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--recall-steps", type=int, default=300)
    p.add_argument("--passkey-steps", type=int, default=800)
    p.add_argument("--samples", type=int, default=50, help="passkey examples per length")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--table", action="store_true", help="only write the table of the cells")
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {list(VARIANTS)}")
    if not args.table:
        run_cells(args)
    print(write_table(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
