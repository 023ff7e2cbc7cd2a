"""CLI subcommand `titans-seq evaluate-lm`: a saved LM's loss over whole documents with its
state carried across windows, per position bucket (`long_eval.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate-lm",
        help="loss of a language model over whole documents, state carried, per position",
        description=(
            "Feed every document of DATA through the model in windows of --window tokens with "
            "the streaming state carried from one window to the next, and report the loss per "
            "position bucket (0-128, 128-256, ... doubling), overall loss and bits per byte. "
            "With --compare-reset the same documents are also scored with the state restarted "
            "at every window, side by side. DATA is a registered corpus (wikitext2-test is "
            "read as its 62 articles), a text file / folder / glob (one document per file), "
            "or a prepared folder (its val split, cut at its document starts)."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument("--data", required=True, help="documents to score")
    p.add_argument("--window", type=int, default=1024, help="tokens per forward call")
    p.add_argument("--max-documents", type=int, default=None, help="score the first N only")
    p.add_argument("--max-tokens", type=int, default=None, help="cut documents to N tokens")
    p.add_argument(
        "--compare-reset", action="store_true", help="also score with the state reset per window"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.add_argument("--out", default=None, help="folder for long_eval.json / .md / .png")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_evaluate_lm)


def document_tokens(source: str, tokenizer) -> tuple[list[torch.Tensor], int]:
    """(one 1-D id tensor per document, UTF-8 bytes of their text) of a text source or a
    prepared folder's val split (its train split when it has no val)."""
    from .data import load_source_split

    split = load_source_split(source, tokenizer)
    documents = []
    for i, array in enumerate(split.arrays):
        cuts = [0, *split.document_starts(i, 0, array.shape[0]).tolist(), array.shape[0]]
        documents += [
            torch.from_numpy(np.asarray(array[a:b], dtype=np.int64)) for a, b in zip(cuts, cuts[1:])
        ]
    return documents, split.num_bytes


def run_evaluate_lm(args: argparse.Namespace) -> int:
    from titans_seq.devices import resolve_device

    from .loading import load_lm_and_tokenizer
    from .long_eval import bucket_table, evaluate_long_documents, plot_bucket_losses

    for name in ("window", "max_documents", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    device = resolve_device(args.device)
    model, tokenizer = load_lm_and_tokenizer(args.model, map_location=device)
    documents, num_bytes = document_tokens(args.data, tokenizer)
    total = sum(d.numel() for d in documents)
    if args.max_documents is not None:
        documents = documents[: args.max_documents]
    if args.max_tokens is not None:
        documents = [d[: args.max_tokens] for d in documents]
    # bytes in proportion to the tokens kept (exact for byte-level tokens without cuts)
    num_bytes = num_bytes * sum(d.numel() for d in documents) / max(total, 1)
    modes = [True, False] if args.compare_reset else [True]
    results = [
        evaluate_long_documents(
            model,
            documents,
            window=args.window,
            carry_state=carry,
            num_bytes=num_bytes,
            device=device,
            progress=not args.quiet,
        )
        for carry in modes
    ]
    lengths = [d.numel() for d in documents]
    print(
        f"{len(documents)} documents of {min(lengths)}-{max(lengths)} tokens (median "
        f"{int(np.median(lengths))}) from {args.data}, model {args.model}, window "
        f"{args.window}, {device}"
    )
    table = bucket_table(results)
    print(table)
    if args.out:
        from titans_seq.training.checkpoint import atomic_write_text

        from .cli_records import write_record

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_record(out / "long_eval.json", args, device, results=[r.to_dict() for r in results])
        atomic_write_text(out / "long_eval.md", table + "\n")
        plot_bucket_losses(results, out / "long_eval.png", title=f"{args.model} on {args.data}")
        print(f"results written to {out}")
    return 0
