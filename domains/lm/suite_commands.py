"""CLI subcommand `titans-seq long-context`: a byte-level LM on the synthetic long-context
suite (RULER-style needles, variable tracking, BABILong-style bAbI questions) over lengths
and depths, with a table and a heat map."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from .long_context_suite import TASKS

    p = subparsers.add_parser(
        "long-context",
        help="score a byte-level LM on the synthetic long-context suite per length and depth",
        description=(
            "Generate the seeded suite offline (tasks: " + ", ".join(TASKS) + "), feed each "
            "prompt with the model's streaming state, decode the answer greedily and report "
            "the score per task and length (mean over depths), plus a heat map of score by "
            "length x depth per task."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument(
        "--lengths", default="1024,2048,4096", help="sequence lengths in bytes (prompt + answer)"
    )
    p.add_argument("--tasks", default="all", help="comma-separated task names, or all")
    p.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="key-statement depths")
    p.add_argument("--samples", type=int, default=10, help="examples per (task, length, depth)")
    p.add_argument(
        "--haystack",
        default="noise",
        help="noise, or a text source (wikitext2-test, tinyshakespeare, a file or folder)",
    )
    p.add_argument("--seed", type=int, default=0, help="data seed")
    p.add_argument("--chunk-len", type=int, default=1024, help="tokens per streamed call")
    p.add_argument("--batch-size", type=int, default=8, help="examples decoded together")
    p.add_argument(
        "--weights",
        choices=["best", "last"],
        default="best",
        help="for a training run folder: its best validation weights or its newest checkpoint",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.add_argument("--out", default=None, help="folder for suite.json / suite.md / suite.png")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_suite)


def run_suite(args: argparse.Namespace) -> int:
    from titans_seq.devices import resolve_device

    from .long_context_suite import TASKS
    from .passkey_commands import load_passkey_model
    from .passkey_eval import parse_depths, parse_lengths
    from .suite_eval import evaluate_suite, plot_heatmaps

    lengths = parse_lengths(args.lengths)
    depths = parse_depths(args.depths)
    tasks = list(TASKS) if args.tasks == "all" else [t.strip() for t in args.tasks.split(",")]
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise ValueError(f"unknown --tasks {unknown}; choose from {list(TASKS)} or all")
    if args.samples < 1 or args.chunk_len < 1 or args.batch_size < 1:
        raise ValueError("--samples, --chunk-len and --batch-size must be positive integers")
    device = resolve_device(args.device)
    model, _ = load_passkey_model(args.model, args.weights)  # byte-level models only
    model.to(device)
    result = evaluate_suite(
        model,
        lengths,
        tasks,
        depths=depths,
        samples=args.samples,
        haystack=args.haystack,
        seed=args.seed,
        chunk_len=args.chunk_len,
        batch_size=args.batch_size,
        device=device,
        progress=not args.quiet,
    )
    print(
        f"long-context suite, {args.samples} examples per task, length and depth, haystack "
        f"{args.haystack}, model {args.model}, {device}, {result.seconds:.1f} s"
    )
    table = result.table()
    print(table)
    if args.out:
        from titans_seq.training.checkpoint import atomic_write_text

        from .cli_records import write_record

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_record(out / "suite.json", args, device, **result.to_dict())
        atomic_write_text(out / "suite.md", table + "\n")
        plot_heatmaps(result, out / "suite.png", title=str(args.model))
        print(f"results written to {out}")
    return 0
