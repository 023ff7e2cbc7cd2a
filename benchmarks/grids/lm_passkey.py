"""Passkey retrieval beyond the training length: Titans mixers vs. attention baselines.

    # the target run (GPU): trained at 1K tokens, evaluated at 1K ... 16K
    python benchmarks/grids/lm_passkey.py --device cuda

    # a CPU smoke run: tiny model, 128-token sequences, 800 steps (minutes per mixer)
    python benchmarks/grids/lm_passkey.py --device cpu --threads 1 --train-length 128 --dim 64 \
        --depth 2 --heads 2 --window 16 --chunk-size 8 --steps 800 --batch-size 16 \
        --lr 3e-3 --warmup 40 --samples 50 --val-samples 64 --mixers swa,mag,lmm,mac,mal \
        --no-match-params --out-dir runs/lm_passkey_smoke

Every mixer is trained by the shared training loop from its recipe `lm/passkey_<mixer>`
with the same data (seed, length), steps, batch, learning rate and seed; the widths are
adjusted per mixer so that every model has (about) the same parameter count as the
`--match-to` mixer at `--dim` (`--no-match-params` keeps one width). Each model (the weights of
its best validation loss) is then evaluated with `evaluate_passkey` (greedy decoding, streaming
state, prompt chunks of `--eval-chunk-len` tokens) at `--factors` times the training
length. Writes `<out-dir>/passkey.md` (a Markdown table) and `<out-dir>/passkey.json` with the
command, device, library versions and date.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from harness import device_name  # noqa: E402
from lm_study import (  # noqa: E402
    MIXERS,
    chosen_mixers,
    matched_dim,
    overrides_for,
    parameter_target,
    result_device,
)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mixers", default=",".join(MIXERS), help="comma-separated mixers")
    p.add_argument("--train-length", type=int, default=1024)
    p.add_argument("--factors", default="1,2,4,8,16", help="evaluation lengths / train length")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: steps/20)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument(
        "--window", type=int, default=64, help="attention window (swa/mag/mal), MAC segment"
    )
    p.add_argument("--chunk-size", type=int, default=16, help="memory chunk size")
    p.add_argument("--match-to", default="mag", help="mixer whose parameter count all match")
    p.add_argument("--no-match-params", dest="match_params", action="store_false")
    p.add_argument("--samples", type=int, default=100, help="evaluation examples per length")
    p.add_argument("--val-samples", type=int, default=256, help="validation examples")
    p.add_argument("--evals", type=int, default=8, help="validations during training")
    p.add_argument("--depths", default=None, help="depth grid (default: uniform depths)")
    p.add_argument("--digits", type=int, default=5)
    p.add_argument("--eval-chunk-len", type=int, default=None, help="default: train length")
    p.add_argument("--eval-batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0, help="training seed (model init, data order)")
    p.add_argument("--eval-seed", type=int, default=0, help="seed of the evaluation examples")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda")
    p.add_argument("--precision", default="auto", help="train.precision (auto: bf16 on GPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out-dir", default="runs/lm_passkey_benchmark")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def run_mixer(args, mixer: str, dim: int, lengths: list[int], depths) -> dict:
    from titans_seq.domains.lm.evals.passkey import evaluate_passkey
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.config import load_config
    from titans_seq.training.loop import BEST_WEIGHTS, train
    from titans_seq.training.tasks import get_task

    cfg = load_config(f"lm/passkey_{mixer}", overrides_for(args, mixer, dim))
    run_dir = cfg.run_dir()
    if (run_dir / "checkpoints").exists():
        raise FileExistsError(f"{run_dir} holds a previous run; choose another --out-dir")
    start = time.perf_counter()
    result = train(cfg)
    train_seconds = time.perf_counter() - start

    model = get_task(cfg.task).build_model(cfg)
    model.load_state_dict(load_weights(run_dir / BEST_WEIGHTS))
    device = torch.device(result_device(args.device))
    model.to(device)
    evaluation = evaluate_passkey(
        model,
        lengths,
        args.samples,
        depths=depths,
        seed=args.eval_seed,
        device=device,
        chunk_len=args.eval_chunk_len or args.train_length,
        digits=args.digits,
        batch_size=args.eval_batch_size,
        progress=not args.quiet,
    )
    return {
        "mixer": mixer,
        "dim": dim,
        "parameters": sum(p.numel() for p in model.parameters()),
        "mixer_options": cfg.model.mixer_options,
        "train_seconds": train_seconds,
        "best_step": result.best_step,
        "best_val_loss": result.best_metric,
        "best_val_accuracy": next(
            (h.get("accuracy") for h in result.history if h["step"] == result.best_step), None
        ),
        "final_val": result.last_eval,
        "eval_seconds": evaluation.seconds,
        "evaluation": evaluation.to_dict(),
    }


def markdown(rows: list[dict], lengths: list[int], train_length: int) -> str:
    header = ["mixer", "params", "dim", "val acc (train len)"]
    header += [f"{n // train_length}x = {n}" for n in lengths]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        acc = row["evaluation"]["accuracy"]
        cells = [
            row["mixer"],
            f"{row['parameters'] / 1e6:.2f}M",
            str(row["dim"]),
            f"{row['best_val_accuracy']:.3f}" if row["best_val_accuracy"] is not None else "-",
        ]
        cells += [f"{acc[str(n)]:.3f}" for n in lengths]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from titans_seq.domains.lm.evals.passkey import parse_depths

    mixers = chosen_mixers(args.mixers)
    factors = [int(f) for f in args.factors.split(",")]
    lengths = [f * args.train_length for f in factors]
    depths = parse_depths(args.depths)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    target = parameter_target(args, "passkey", overrides_for)
    rows = []
    for mixer in mixers:
        dim = matched_dim(args, mixer, target, "passkey", overrides_for)[0] if target else args.dim
        print(f"== {mixer}: dim {dim}", flush=True)
        row = run_mixer(args, mixer, dim, lengths, depths)
        rows.append(row)
        print(
            f"{mixer}: {row['parameters']} parameters, trained in {row['train_seconds']:.0f} s, "
            f"accuracy per length {row['evaluation']['accuracy']}",
            flush=True,
        )

    device = result_device(args.device)
    device_label = device_name(device)
    meta = {
        "command": " ".join(
            ["python benchmarks/grids/lm_passkey.py", *(sys.argv[1:] if argv is None else argv)]
        ),
        "device": f"{device} ({device_label})",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "train_length": args.train_length,
        "lengths": lengths,
        "steps": args.steps,
        "batch_size": args.batch_size,
        "samples_per_length": args.samples * (len(depths) if depths else 1),
        "depths": depths,
        "digits": args.digits,
        "parameter_target": target,
    }
    table = markdown(rows, lengths, args.train_length)
    text = (
        f"Passkey retrieval ({args.digits} digits, chance {10.0**-args.digits:.0e}), trained at "
        f"{args.train_length} tokens for {args.steps} steps x {args.batch_size}; accuracy = all "
        f"digits right under greedy decoding, {meta['samples_per_length']} examples per length.\n"
        f"Command: `{meta['command']}`\nDevice: {meta['device']}, torch {meta['torch']}, "
        f"{meta['date']}\n\n{table}\n"
    )
    (out_dir / "passkey.md").write_text(text)
    (out_dir / "passkey.json").write_text(json.dumps({**meta, "results": rows}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
