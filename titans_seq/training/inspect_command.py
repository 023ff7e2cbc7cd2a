"""CLI subcommand `titans-seq inspect-memory`: the memory's surprise, gates and clip over
validation examples of a training run (any task whose model holds a Titans memory)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..cli_types import non_negative_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "inspect-memory",
        help="plot the Titans memory's per-token surprise, gates and clip for a trained run",
        description=(
            "Run a training run's model over examples of its validation (or training) split "
            "inside titans_seq.record_memory and write a plot of the per-token surprise "
            "||u_t||, inner loss, theta/eta/alpha and clip factor of every memory, plus a JSON "
            "summary (mean surprise, share of clipped writes, ...) per memory."
        ),
    )
    p.add_argument("run", help="a training run folder (holds config.yaml)")
    p.add_argument(
        "--weights",
        choices=("best", "last"),
        default="best",
        help="the best validation weights (best_model.safetensors) or the newest checkpoint",
    )
    p.add_argument("--split", choices=("val", "train"), default="val", help="examples to run")
    p.add_argument("--examples", type=positive_int, default=8, help="examples to run (one batch)")
    p.add_argument("--plot-example", type=non_negative_int, default=0, help="which of them to plot")
    p.add_argument("--out", default=None, help="plot file (default: RUN/memory_trace.png)")
    p.add_argument("--json", default=None, help="also write the summary as JSON here")
    p.set_defaults(handler=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    import torch

    from titans_seq.inspection import plot_memory_trace, record_memory

    from .tasks import fetch_batch

    run = Path(args.run)
    from .run_model import load_run_model

    cfg, task, model = load_run_model(run, args.weights)
    train_set, val_set = task.build_datasets(cfg)
    dataset = val_set if args.split == "val" else train_set
    if len(dataset) == 0:
        raise ValueError(f"the {args.split} split of {run} is empty")
    count = max(1, min(args.examples, len(dataset)))
    if not 0 <= args.plot_example < count:
        raise ValueError(f"--plot-example must be in [0, {count}), got {args.plot_example}")
    batch = fetch_batch(dataset, range(count))
    with torch.no_grad(), record_memory(model) as recording:
        task.loss(model, batch)
    out = Path(args.out) if args.out else run / "memory_trace.png"
    title = f"{cfg.name}: {args.split} example {args.plot_example} ({args.weights} weights)"
    plot_memory_trace(recording, out, example=args.plot_example, title=title)
    summary = recording.summary()
    text = json.dumps(summary, indent=1)
    if args.json:
        from .checkpoint import atomic_write_text

        atomic_write_text(Path(args.json), text + "\n")
    print(text)
    print(f"plot: {out}")
    return 0
