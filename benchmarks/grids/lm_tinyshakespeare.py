"""Byte-level language models on tinyshakespeare: six mixers side by side, one harness.

    python benchmarks/grids/lm_tinyshakespeare.py --device cuda          # the ~21M models (GPU)
    python benchmarks/grids/lm_tinyshakespeare.py --device cpu --preset tiny --max-steps 20 \
        --seq-len 64 --batch-size 8 --eval-batches 2                # CPU smoke run

Every mixer trains from its recipe `lm/tinyshakespeare_<mixer>` (attention = Transformer++,
swa, lmm, mac, mag, mal) with the same data (the first 90% of tinyshakespeare, bytes), the
same crops in the same order (same data seed and train seed), the same step budget and the
same optimizer; the recipes set per-mixer MLP ratios so that the ~21M models have the same
parameter count within 1% (reported). Validation bits per byte is measured on the last 10%
of the text (every byte scored once unless --eval-batches limits it); the table reports the
best and the final value, training tokens/s (median over log windows, the first one, which
includes warm-up, left out) and, on a known GPU in bf16, the model-FLOPs utilization.

Writes `<out-dir>/lm_tinyshakespeare.md` (a Markdown table) and `.json` with the command,
device and date.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from harness import device_name  # noqa: E402

MIXERS = ("attention", "swa", "lmm", "mac", "mag", "mal")
LABELS = {"attention": "attention (Transformer++)", "swa": "sliding-window attention"}


def run_one(mixer: str, args) -> dict:
    from titans_seq.domains.lm import TitansLM
    from titans_seq.training import load_config, train
    from titans_seq.training.logs import read_csv

    out_dir = Path(args.out_dir) / mixer
    overrides = [
        f"train.device={args.device}",
        f"train.max_steps={args.max_steps}",
        f"train.seed={args.seed}",
        f"train.out_dir={out_dir}",
        "train.progress=false",
        "train.plot=false",
        f"train.log_every={args.log_every}",
        f"train.checkpoint_every={args.max_steps}",
        f"eval.every={args.eval_every}",
        *args.override,
    ]
    if args.preset:
        overrides.append(f"model.preset={args.preset}")
    if args.seq_len:
        overrides.append(f"data.seq_len={args.seq_len}")
    if args.batch_size:
        overrides += [f"train.batch_size={args.batch_size}", f"eval.batch_size={args.batch_size}"]
    if args.eval_batches:
        overrides.append(f"eval.max_batches={args.eval_batches}")
    if args.lr:
        overrides.append(f"optim.lr={args.lr}")
    cfg = load_config(f"lm/tinyshakespeare_{mixer}", overrides)
    if out_dir.exists() and args.fresh:
        import shutil

        shutil.rmtree(out_dir)
    start = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - start
    model = TitansLM.load(out_dir / "model")
    log = read_csv(out_dir / "train_log.csv")
    steady = log[1:] or log
    row = {
        "mixer": mixer,
        "params": model.num_parameters(),
        "params_non_embedding": model.num_parameters(exclude_embeddings=True),
        "best_val_bpb": result.best_metric,
        "best_step": result.best_step,
        "final_val_bpb": result.last_eval.get("bpb"),
        "final_val_loss": result.last_eval.get("loss"),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steady),
        "mfu": statistics.median(r["mfu"] for r in steady) if "mfu" in steady[0] else None,
        "train_tokens": cfg.train.max_steps * cfg.train.batch_size * cfg.data.seq_len,
        "wall_s": wall,
        "config": cfg.to_dict(),
    }
    print(
        f"{mixer}: params {row['params']:,}  best val bpb {row['best_val_bpb']:.4f} "
        f"(step {row['best_step']})  {row['tokens_per_s']:,.0f} tok/s  {wall:.0f} s",
        flush=True,
    )
    return row


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Byte-level LMs on tinyshakespeare",
        "",
        f"- command: `{meta['command']}`",
        f"- device: {meta['device']}; torch {meta['torch']}; date {meta['date']}",
        f"- tokens per model: {rows[0]['train_tokens']:,} (same crops, same order, seed "
        f"{meta['seed']}); validation: last 10% of the text, bits per byte",
        "",
        "| mixer | params | best val bpb (step) | final val bpb | train tokens/s | MFU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a"
        lines.append(
            f"| {LABELS.get(r['mixer'], r['mixer'])} | {r['params']:,} | "
            f"{r['best_val_bpb']:.4f} ({r['best_step']}) | {r['final_val_bpb']:.4f} | "
            f"{r['tokens_per_s']:,.0f} | {mfu} |"
        )
    params = [r["params"] for r in rows]
    lines += [
        "",
        f"Parameter counts differ by at most {100 * (max(params) / min(params) - 1):.1f}%.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--mixers", default=",".join(MIXERS))
    parser.add_argument("--device", default="cuda", help="cuda (default), cpu or auto")
    parser.add_argument("--max-steps", type=int, default=3000)
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", default=None, help="override the size (e.g. tiny)")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--eval-batches", type=int, default=None, help="limit validation")
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--override", action="append", default=[], help="extra key=value")
    parser.add_argument("--out-dir", default="runs/benchmark_lm_tinyshakespeare")
    parser.add_argument(
        "--fresh", action="store_true", help="delete an existing run folder of a mixer first"
    )
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda but CUDA is not available (use --device cpu for a smoke run)")

    rows = [run_one(m.strip(), args) for m in args.mixers.split(",") if m.strip()]
    meta = {
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "device": device_name(args.device),
        "torch": torch.__version__,
        "date": date.today().isoformat(),
        "seed": args.seed,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown(rows, meta)
    (out / "lm_tinyshakespeare.md").write_text(table)
    (out / "lm_tinyshakespeare.json").write_text(json.dumps({**meta, "results": rows}, indent=1))
    print(table)


if __name__ == "__main__":
    main()
