"""CLI subcommand `titans-seq prepare-text`: tokenize a corpus into memory-mapped shards."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare-text",
        help="tokenize a text corpus into binary shards for language-model training",
        description=(
            "Tokenize SOURCE (a registered corpus such as tinyshakespeare, a text file, a "
            "folder of .txt files, a glob, or hf:NAME[:CONFIG] to stream a Hugging Face "
            "dataset) into uint16/uint32 shards + meta.json under --out; train on the folder "
            "with `titans-seq train lm/... data.train=DIR`."
        ),
    )
    p.add_argument("source", help="registered corpus, file, folder, glob or hf:NAME[:CONFIG]")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--tokenizer",
        default="byte",
        help="byte (default), a tokenizer.json, a SentencePiece .model or a saved folder",
    )
    p.add_argument("--val", default=None, help="a separate validation text source")
    p.add_argument(
        "--val-fraction",
        type=float,
        default=0.1,
        help="without --val: the last fraction of a local corpus is the validation split "
        "(0: none; default 0.1)",
    )
    p.add_argument(
        "--val-documents",
        type=int,
        default=1000,
        help="hf: sources without --val: the first N streamed documents are the validation "
        "split (default 1000)",
    )
    p.add_argument(
        "--max-tokens", type=int, default=None, help="stop each split after about N tokens"
    )
    p.add_argument("--shard-tokens", type=int, default=None, help="ids per shard file")
    p.add_argument("--hf-split", default="train", help="hf: sources: the split to stream")
    p.add_argument("--text-field", default="text", help="hf: sources: the text column")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_prepare_text)


def run_prepare_text(args: argparse.Namespace) -> int:
    import json

    from .data import META_FILE
    from .prepare import DEFAULT_SHARD_TOKENS, prepare_text

    out = prepare_text(
        args.source,
        args.tokenizer,
        args.out,
        val=args.val,
        val_fraction=args.val_fraction,
        val_documents=args.val_documents,
        max_tokens=args.max_tokens,
        hf_split=args.hf_split,
        hf_text_field=args.text_field,
        shard_tokens=args.shard_tokens or DEFAULT_SHARD_TOKENS,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    meta = json.loads((out / META_FILE).read_text())
    parts = [
        f"{name}: {info['tokens']} tokens from {info['bytes']} bytes in {len(info['shards'])} "
        f"shard(s)"
        for name, info in meta["splits"].items()
    ]
    print(f"prepared {out} ({meta['dtype']}, vocab {meta['vocab_size']}): " + "; ".join(parts))
    return 0
