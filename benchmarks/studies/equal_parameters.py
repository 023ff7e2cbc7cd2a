"""Equal parameters and tokens: validation bits per byte at the training length for the six
mixers (the Titans paper's Table 1, at a CPU's scale).

    python benchmarks/studies/equal_parameters.py --seeds 0 1 2 --jobs 2 \
        --json benchmarks/results/long_memory/<date>-equal-parameters-<commit>.json

Every run is one mixer of `benchmarks/grids/lm_tinyshakespeare.py` (recipes
`lm/tinyshakespeare_<mixer>`: Transformer++ attention, sliding-window attention, LMM, MAC,
MAG, MAL) at width --dim, --depth layers and --heads heads, trained on the first 90% of
tinyshakespeare's bytes in --seq-len windows for --steps steps of --batch-size windows (the
same tokens for every mixer), and scored on the last 10% in windows of the same length. The
windowed mixers see a quarter of the window (SWA, MAG and MAL windows, MAC segments: --seq-len
/ 4), as the recipes do at 512 bytes. Each mixer's MLP ratio is chosen so that its parameter
count is the closest to the LMM's (ratios in eighths from 1 to 8); the counts are reported.

Prints the mean and spread over seeds of the final validation bits per byte; writes every run
as a row {"model", "task": "validation", "length", "seed", "metric": "bpb", "value"} with
`train_length` at the top to --json, and the table to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCHMARKS / "grids"))  # the grids: the runs' harness and its sizes
from lm_study import WINDOW_OPTION, count_parameters  # noqa: E402
from lm_tinyshakespeare import LABELS, MIXERS  # noqa: E402

GRID = BENCHMARKS / "grids" / "lm_tinyshakespeare.py"
MLP_RATIOS = [r / 8 for r in range(8, 65)]


def size_overrides(args, mixer: str) -> list[str]:
    """The recipe overrides that set a run's size (without its MLP ratio)."""
    overrides = [
        "model.preset=null",
        f"model.dim={args.dim}",
        f"model.depth={args.depth}",
        f"model.heads={args.heads}",
    ]
    if mixer in WINDOW_OPTION:
        overrides.append(f"model.mixer_options.{WINDOW_OPTION[mixer]}={args.seq_len // 4}")
    return overrides


def parameters(args, mixer: str, mlp_ratio: float) -> int:
    """Parameters of the model `mixer`'s recipe builds at this size and MLP ratio."""
    from titans_seq.training import load_config

    overrides = [*size_overrides(args, mixer), f"model.mlp_ratio={mlp_ratio}"]
    return count_parameters(load_config(f"lm/tinyshakespeare_{mixer}", overrides))


def matched_ratios(args, mixers: list[str]) -> dict[str, tuple[float, int]]:
    """mixer -> (MLP ratio, parameters): the ratio whose count is the closest to the LMM's at
    its recipe's ratio."""
    from titans_seq.training import load_config

    lmm_ratio = load_config("lm/tinyshakespeare_lmm").model.mlp_ratio
    target = parameters(args, "lmm", lmm_ratio)
    chosen = {}
    for mixer in mixers:
        if mixer == "lmm":
            chosen[mixer] = (lmm_ratio, target)
            continue
        counts = [(ratio, parameters(args, mixer, ratio)) for ratio in MLP_RATIOS]
        chosen[mixer] = min(counts, key=lambda pair: abs(pair[1] - target))
    return chosen


def run_one(mixer: str, seed: int, mlp_ratio: float, args) -> dict:
    """Train and score one mixer at one seed in a child process of the grid; a run folder
    that holds its result is read back instead."""
    out_dir = Path(args.out_dir) / f"{mixer}_seed{seed}"
    result = out_dir / "lm_tinyshakespeare.json"
    seconds = None
    if not result.is_file():
        overrides = [
            *size_overrides(args, mixer),
            f"model.mlp_ratio={mlp_ratio}",
            f"train.threads={args.threads}",
            "eval.batch_size=32",
            *args.set,
        ]
        cmd = [
            sys.executable, str(GRID), "--device", "cpu", "--mixers", mixer,
            "--seed", str(seed), "--max-steps", str(args.steps),
            "--eval-every", str(args.steps // args.evals),
            "--log-every", str(max(1, args.steps // 10)),
            "--seq-len", str(args.seq_len), "--batch-size", str(args.batch_size),
            "--lr", str(args.lr), "--out-dir", str(out_dir), "--fresh",
        ] + [item for o in overrides for item in ("--override", o)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{mixer} seed {seed} failed: {done.stderr[-3000:]}")
        seconds = round(time.perf_counter() - start, 1)
        print(f"{mixer} seed {seed}: {seconds} s", flush=True)
    (row,) = json.loads(result.read_text())["results"]
    return {"mixer": mixer, "seed": seed, "params": row["params"], "mlp_ratio": mlp_ratio,
            "final_val_bpb": row["final_val_bpb"], "best_val_bpb": row["best_val_bpb"],
            "train_tokens": row["train_tokens"], "train_seconds": seconds}  # fmt: skip


def rows(runs: list[dict], seq_len: int) -> list[dict]:
    """One row per run: the final validation bits per byte at the training length."""
    return [
        {"model": r["mixer"], "task": "validation", "length": seq_len, "seed": r["seed"],
         "metric": "bpb", "value": r["final_val_bpb"]}
        for r in runs
    ]  # fmt: skip


def table(runs: list[dict]) -> str:
    """Mean ± spread over seeds of the final validation bits per byte, best first."""
    by_mixer: dict[str, list[dict]] = {}
    for run in runs:
        by_mixer.setdefault(run["mixer"], []).append(run)

    def mean_bpb(mixer):
        return statistics.mean(r["final_val_bpb"] for r in by_mixer[mixer])

    lines = [
        "| mixer | parameters | MLP ratio | val bpb (mean ± sd) | seeds |",
        "|---|---:|---:|---:|---:|",
    ]
    for mixer in sorted(by_mixer, key=mean_bpb):
        values = [r["final_val_bpb"] for r in by_mixer[mixer]]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        first = by_mixer[mixer][0]
        lines.append(
            f"| {LABELS.get(mixer, mixer)} | {first['params']:,} | {first['mlp_ratio']:g} | "
            f"{statistics.mean(values):.3f} ± {spread:.3f} | {len(values)} |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mixers", nargs="+", default=list(MIXERS), choices=MIXERS)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=256, help="training length, bytes")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--evals", type=int, default=4, help="validations during training")
    p.add_argument("--set", nargs="*", default=[], help="more recipe overrides, applied last")
    p.add_argument("--threads", type=int, default=1, help="threads per run")
    p.add_argument("--jobs", type=int, default=1, help="runs at once")
    p.add_argument("--out-dir", default="runs/equal_parameters")
    p.add_argument("--json", default=None, help="rows as JSON (benchmarks/results/...)")
    p.add_argument("--out", default=None, help="the table as markdown")
    args = p.parse_args(argv)
    if args.steps < args.evals:
        p.error(f"--steps ({args.steps}) must be at least --evals ({args.evals})")
    if args.seq_len < 4:
        p.error(f"--seq-len must be at least 4, got {args.seq_len}")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    ratios = matched_ratios(args, args.mixers)
    for mixer, (ratio, count) in ratios.items():
        print(f"{mixer}: MLP ratio {ratio:g}, {count:,} parameters", flush=True)
    jobs = [(m, s, ratios[m][0]) for s in args.seeds for m in args.mixers]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(lambda job: run_one(*job, args), jobs))
    text = table(runs)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        record = {"study": "equal_parameters", "train_length": args.seq_len,
                  "steps": args.steps, "batch_size": args.batch_size,
                  "data": "tinyshakespeare", "command": " ".join(sys.argv),
                  "runs": runs, "rows": rows(runs, args.seq_len)}  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
