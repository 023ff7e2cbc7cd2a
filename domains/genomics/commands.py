"""CLI subcommand `titans-seq classify`: label the sequences of a FASTA/FASTQ file."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "classify",
        help="classify the sequences of a FASTA/FASTQ file with a saved DNAClassifier",
        description="Write one CSV row per sequence: id, predicted class, class probabilities.",
    )
    p.add_argument("--model", required=True, help="folder written by DNAClassifier.save")
    p.add_argument(
        "--allow-unverified-model",
        action="store_true",
        help="load a --model folder that has no model_manifest.json, trusting its files",
    )
    p.add_argument("--fasta", required=True, help="FASTA/FASTQ file (plain or .gz)")
    p.add_argument("--out", default="predictions.csv", help="CSV of the predictions")
    p.add_argument("--device", default=None, help="default: the model's own setting")
    p.set_defaults(handler=run_classify)


def run_classify(args: argparse.Namespace) -> int:
    import pandas as pd

    from titans_seq.training.checkpoint import atomic_write_text, prepare_output_file

    from .estimator import DNAClassifier, as_sequences

    out = prepare_output_file(args.out, "--out")
    clf = DNAClassifier.load(
        args.model, device=args.device, allow_unverified=args.allow_unverified_model
    )
    sequences, names = as_sequences(args.fasta)
    proba = clf.predict_proba(sequences)
    table = pd.DataFrame(proba, columns=[f"p_{c}" for c in clf.classes_])
    table.insert(0, "prediction", clf.classes_[proba.argmax(axis=1)])
    table.insert(0, "id", names)
    atomic_write_text(out, table.to_csv(index=False))
    print(f"{len(table)} sequences classified; predictions written to {args.out}")
    return 0
