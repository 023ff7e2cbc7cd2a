"""Does a model trained on short segments read whole documents better with its state carried?
Loss by position over WikiText-2 test articles, state carried and reset, per training way.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/long_documents.py \
        --variants fresh streams --mixers lmm swa --seeds 0 1 2 --jobs 2

Every run trains a byte-level `TitansLM` (width 64, 2 layers, 2 heads; LMM chunk 16 with 2
persistent tokens, SWA window 64) on WikiText-2 valid through the shared training loop, at
256-byte segments, for the same number of steps and bytes (4,096 a step), then scores the
first --max-documents WikiText-2 test articles with `titans-seq evaluate-lm --window 256
--compare-reset`: the state carried from window to window through each article, and reset
at every window. The training ways (--variants):

* fresh: every 256-byte window from a fresh state (16 windows a step), as without `streams:`;
* streams: 4 streams a step, each 4 consecutive segments of one article read with the state
  carried and back-propagated through all 4, half of the steps starting from the states the
  previous step's streams left (`streams.segments=4 streams.state_passing=0.5`);
* streams_noforget: as streams, the memory without its forgetting gate
  (`memory.use_forgetting=false`);
* streams_long: as streams with 16 segments of one stream a step (4K bytes);
* fresh_initial, streams_initial: as fresh and streams, the memory forgetting toward its
  initial weights instead of toward zero (`memory.forget_toward=initial`).

Prints the mean over seeds of bits per byte by position bucket, carried / reset, and the
validation bits per byte at the training length; writes every row as
{"model", "task", "length", "seed", "metric", "value"} (task long_documents:carried or
long_documents:reset, length the end of the position bucket in bytes, metric bpb) with
`train_length` at the top to --json, and the table to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

LN2 = math.log(2.0)
SEGMENT = 256
MIXER_OPTIONS = {
    "lmm": '{"num_persistent":2,"memory":{"chunk_size":16}}',
    "swa": '{"window":64}',
    "mag": '{"window":64,"num_persistent":2,"memory":{"chunk_size":16}}',
}
RECIPE = [
    "lm/tiny",
    "data.train=wikitext2-valid",
    "model.preset=null",
    "model.dim=64",
    "model.depth=2",
    "model.heads=2",
    "optim.warmup_steps=50",
    "train.progress=false",
    "train.plot=false",
]
VARIANTS = {
    "fresh": ["train.batch_size=16"],
    "streams": ["train.batch_size=4", "streams.segments=4", "streams.state_passing=0.5"],
    "streams_noforget": ["train.batch_size=4", "streams.segments=4", "streams.state_passing=0.5",
                         "model.mixer_options.memory.use_forgetting=false"],
    "streams_long": ["train.batch_size=1", "streams.segments=16", "streams.bptt=4",
                     "streams.state_passing=0.5"],
    "fresh_initial": ["train.batch_size=16", "model.mixer_options.memory.forget_toward=initial"],
    "streams_initial": ["train.batch_size=4", "streams.segments=4", "streams.state_passing=0.5",
                        "model.mixer_options.memory.forget_toward=initial"],
}  # fmt: skip


def run_one(variant: str, mixer: str, seed: int, args) -> dict:
    """Train one model in a child process of the CLI, then score the test articles."""
    from titans_seq.training.logs import read_csv

    run = Path(args.out_dir) / f"{mixer}_{variant}_seed{seed}"
    cmd = [
        sys.executable, "-m", "titans_seq.cli", "train", *RECIPE,
        f"model.mixer={mixer}", f"model.mixer_options={MIXER_OPTIONS[mixer]}", *VARIANTS[variant],
        f"train.max_steps={args.steps}", f"eval.every={args.steps}",
        f"train.checkpoint_every={args.steps}", f"train.seed={seed}", f"train.out_dir={run}",
        f"train.threads={args.threads}", f"data.seq_len={args.segment}", *args.set,
    ]  # fmt: skip
    seconds = None  # a run folder that holds its model was trained before: not timed
    if not (run / "model").is_dir():
        start = time.perf_counter()
        _check(subprocess.run(cmd, capture_output=True, text=True), f"train {run.name}")
        seconds = round(time.perf_counter() - start, 1)
    scored = run / "long_eval"
    if not (scored / "long_eval.json").is_file():
        evaluate = [
            sys.executable, "-m", "titans_seq.cli", "evaluate-lm", "--model", str(run / "model"),
            "--data", "wikitext2-test", "--window", str(args.segment), "--max-documents",
            str(args.max_documents), "--compare-reset", "--quiet", "--out", str(scored),
        ]  # fmt: skip
        # as many threads as the training had: runs side by side share the cores
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        done = subprocess.run(evaluate, capture_output=True, text=True, env=env)
        _check(done, f"score {run.name}")
    record = json.loads((scored / "long_eval.json").read_text())
    val_bpb = float(read_csv(run / "eval_log.csv")[-1]["bpb"])
    return {"variant": variant, "mixer": mixer, "seed": seed, "train_seconds": seconds,
            "val_bpb": val_bpb, "results": record["results"]}  # fmt: skip


def _check(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed: {done.stderr[-3000:]}")


def rows(runs: list[dict], segment: int = SEGMENT) -> list[dict]:
    """One row per (model, carried or reset, position bucket, seed): bits per byte."""
    out = []
    for run in runs:
        model = f"{run['mixer']}/{run['variant']}"
        out.append({"model": model, "task": "validation", "length": segment, "seed": run["seed"],
                    "metric": "bpb", "value": run["val_bpb"]})  # fmt: skip
        for result in run["results"]:
            task = "long_documents:" + ("carried" if result["carry_state"] else "reset")
            for bucket in result["buckets"]:
                if bucket["loss"] is not None:  # byte-level tokens: nats per byte
                    out.append({"model": model, "task": task, "length": bucket["end"],
                                "seed": run["seed"], "metric": "bpb",
                                "value": bucket["loss"] / LN2})  # fmt: skip
    return out


def table(table_rows: list[dict], segment: int = SEGMENT) -> str:
    """Mean over seeds of bits per byte by position bucket, carried / reset, per model."""

    def mean(model, task, length):
        values = [r["value"] for r in table_rows
                  if (r["model"], r["task"], r["length"]) == (model, task, length)]  # fmt: skip
        return statistics.mean(values) if values else None

    models = sorted({r["model"] for r in table_rows})
    ends = sorted({r["length"] for r in table_rows if r["task"].startswith("long_documents")})
    head = f"| model | val bpb at {segment} | " + " | ".join(f"to {e:,}" for e in ends) + " |"
    lines = [head, "|" + "---|" * (len(ends) + 2)]
    for model in models:
        cells = []
        for end in ends:
            carried = mean(model, "long_documents:carried", end)
            reset = mean(model, "long_documents:reset", end)
            cells.append("" if carried is None else f"{carried:.3f} / {reset:.3f}")
        val = mean(model, "validation", segment)
        lines.append(f"| {model} | {val:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variants", nargs="+", default=["fresh", "streams"], choices=VARIANTS)
    parser.add_argument("--mixers", nargs="+", default=["lmm"], choices=MIXER_OPTIONS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--max-documents", type=int, default=20)
    parser.add_argument("--segment", type=int, default=SEGMENT, help="segment length, bytes")
    parser.add_argument(
        "--set", nargs="*", default=[], help="more recipe overrides (KEY=VALUE), applied last"
    )
    parser.add_argument("--threads", type=int, default=1, help="threads per run")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once")
    parser.add_argument("--out-dir", default="runs/long_documents")
    parser.add_argument("--json", default=None, help="rows as JSON (benchmarks/results/...)")
    parser.add_argument("--out", default=None, help="the table as markdown")
    args = parser.parse_args()
    jobs = [(v, m, s) for m in args.mixers for v in args.variants for s in args.seeds]
    with ThreadPoolExecutor(args.jobs) as pool:
        runs = list(pool.map(lambda job: run_one(*job, args), jobs))
    all_rows = rows(runs, args.segment)
    text = table(all_rows, args.segment)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        record = {"study": "long_documents", "train_length": args.segment, "steps": args.steps,
                  "documents": args.max_documents, "command": " ".join(sys.argv),
                  "runs": [{"model": f"{r['mixer']}/{r['variant']}", "seed": r["seed"],
                            "train_seconds": r["train_seconds"]} for r in runs],
                  "rows": all_rows}  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
