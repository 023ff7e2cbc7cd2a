"""Does a language model train as well when the memory's products read bf16 or tf32
operands, as the Triton kernels' faster dot precisions do? Studied on a CPU.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/operand_precision.py \
        --precisions fp32 bf16 tf32 --seeds 0 1 2 --jobs 2

Each run trains the byte-level tinyshakespeare LMM of `lm/tiny` (width 32, 2 layers, 2 heads
of 16) at sequences of 512 bytes, batch 16, for --steps steps through the shared training
loop, with `memory.operand_precision` set (`titans_seq/ops/lmm/operand_precision.py`): every
product of the memory with its inputs, states and their gradients rounds its operands as
the GPU kernels' dot precision of that name does, the products accumulated and the state
kept in float32, the rest of the model in float32. The memory runs the eager "torch" steps
in every run, fp32 included, so the precisions differ in their rounding only.

Prints, per precision, each seed's validation bits per byte at the last step, their mean
and range, whether every run lies within the fp32 runs' range, and each seed's difference
from the fp32 run of the same seed (same initial weights, same batches); writes the table and
every run's evaluations to --out (operand_precision.md / .json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness

PRECISIONS = ("fp32", "bf16", "tf32")

RECIPE = [
    "lm/tiny",
    "data.seq_len=512",
    "train.batch_size=16",
    "optim.warmup_steps=100",
    "eval.max_batches=16",
    "train.progress=false",
    "model.mixer_options.backend=torch",
]


def run_one(precision: str, seed: int, args) -> dict:
    """One training run in a child process of the CLI; its last evaluation."""
    from titans_seq.training.logs import read_csv

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "run"
        cmd = [
            sys.executable, "-m", "titans_seq.cli", "train", *RECIPE,
            f"train.max_steps={args.steps}", f"eval.every={args.eval_every}",
            f"train.seed={seed}", f"train.out_dir={out}", f"train.threads={args.threads}",
            f"model.mixer_options.memory.operand_precision={precision}", *args.set,
        ]  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{precision} seed {seed}: {done.stderr[-2000:]}")
        evals = read_csv(out / "eval_log.csv")
    return {
        "precision": precision, "seed": seed, "seconds": round(seconds, 1),
        "step": int(evals[-1]["step"]), "val_bpb": float(evals[-1]["bpb"]),
        "evals": [{"step": int(r["step"]), "val_bpb": float(r["bpb"])} for r in evals],
    }  # fmt: skip


def table(runs: list[dict]) -> str:
    """Per precision: each seed's last validation bits per byte, mean, range, and whether
    all of them lie within the fp32 runs' range."""
    seeds = sorted({r["seed"] for r in runs})
    by = {(r["precision"], r["seed"]): r["val_bpb"] for r in runs}
    reference = [by[("fp32", s)] for s in seeds if ("fp32", s) in by]
    low, high = (min(reference), max(reference)) if reference else (None, None)
    lines = [
        "| memory products' operands | "
        + " | ".join(f"seed {s}" for s in seeds)
        + " | mean | min-max | inside the fp32 range | minus fp32, same seed |",
        "|---|" + "---|" * (len(seeds) + 4),
    ]
    for precision in PRECISIONS:
        values = [by[(precision, s)] for s in seeds if (precision, s) in by]
        if not values:
            continue
        cells = [f"{by[(precision, s)]:.4f}" if (precision, s) in by else "-" for s in seeds]
        inside = "-" if low is None else f"{sum(low <= v <= high for v in values)} of {len(values)}"
        # the same seed starts from the same weights and reads the same batches: the
        # difference is the rounding's alone (and what training makes of it)
        paired = [by[(precision, s)] - by[("fp32", s)] for s in seeds
                  if (precision, s) in by and ("fp32", s) in by]  # fmt: skip
        shift = " ".join(f"{d:+.4f}" for d in paired) if precision != "fp32" and paired else "-"
        lines.append(
            f"| {precision} | " + " | ".join(cells)
            + f" | {statistics.mean(values):.4f} | {min(values):.4f}-{max(values):.4f} | {inside}"
            + f" | {shift} |"
        )  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=1500, help="training steps of each run")
    p.add_argument("--eval-every", type=int, default=500, help="steps between evaluations")
    p.add_argument("--set", nargs="*", default=[], help="further recipe overrides KEY=VALUE")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--jobs", type=int, default=1, help="runs side by side")
    p.add_argument("--out", default="runs/operand_precision", help="folder for table and runs")
    p.add_argument("--_one", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        precision, seed = args._one
        print(json.dumps(run_one(precision, int(seed), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    jobs = [(precision, seed) for seed in args.seeds for precision in args.precisions]
    runs = run_jobs_side_by_side(__file__, argv, jobs, args.threads, args.jobs)
    write_study_report(__file__, argv, args, table(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
