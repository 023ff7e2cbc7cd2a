"""How many passes over each sequence the DNA classifier's default should make, at equal
training time: accuracy of both strands x both directions (4 passes) against 2 and 1.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/dna_passes.py --jobs 2
    python benchmarks/studies/dna_passes.py --train 256 --test 128 --epochs 1 --seeds 0  # smoke run

DNAClassifier(random_state=seed) on the two mirrored GenomicsBenchmarks tasks (their test
splits, re-split 70/10/20 with a fixed seed, as `benchmarks/grids/genomics.py` does: the numbers
are not comparable with published results), `--train` training sequences (default 1,125),
accuracy on `--test` held-out ones. The configurations and their passes per sequence:

  bidirectional + rc conjoin   4   (both directions and both strands in every step)
  bidirectional + rc augment   2   (random strand flips in training, one strand scored)
  forward only  + rc conjoin   2
  forward only  + rc augment   1
  forward only  + rc posthoc   1   (DNAClassifier's default: trained as "augment", both
                                    strands averaged for validation and predictions)

A "posthoc" fit is scored twice: with both strands averaged (its accuracy) and, the same
fitted model, on the given strand only (`one_strand_accuracy`): the gain of post-hoc
conjoining without the noise of a second fit.

Each gets the same budget of passes: `--epochs` for 4 passes, twice as many epochs for 2,
four times for 1 (early stopping on the validation share as usual). Every fit runs in its
own process, one torch thread each, `--jobs` side by side. Prints a Markdown table (accuracy
mean +- std over seeds, fit seconds) and writes it with every run to `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells

DATASETS = ("human_enhancers_cohn", "human_nontata_promoters")
CONFIGS = {
    "bidirectional + conjoin": (dict(bidirectional=True, rc_mode="conjoin"), 4),
    "bidirectional + augment": (dict(bidirectional=True, rc_mode="augment"), 2),
    "forward + conjoin": (dict(bidirectional=False, rc_mode="conjoin"), 2),
    "forward + augment": (dict(bidirectional=False, rc_mode="augment"), 1),
    "forward + posthoc": (dict(bidirectional=False, rc_mode="posthoc"), 1),
}


def run_one(dataset: str, config: str, seed: int, args) -> dict:
    """One fit and its test accuracy (in this process)."""
    import warnings

    import numpy as np
    import torch

    from titans_seq.domains.genomics import DNAClassifier
    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    parts = benchmark_parts(dataset, "test", resplit=True, seed=0)
    train = subsample(parts["train"], args.train, 0)
    test = subsample(parts["test"], args.test, 0)
    options, passes = CONFIGS[config]
    epochs = args.epochs * 4 // passes
    clf = DNAClassifier(random_state=seed, max_epochs=epochs, device="cpu", **options)
    start = time.perf_counter()
    clf.fit(train.sequences, np.asarray(train.labels))
    seconds = time.perf_counter() - start
    labels = np.asarray(test.labels)
    start = time.perf_counter()
    accuracy = float((clf.predict(test.sequences) == labels).mean())
    predict_seconds = time.perf_counter() - start
    run = {
        "dataset": dataset, "config": config, "passes": passes, "seed": seed,
        "epochs": epochs, "epochs_run": clf.history_[-1]["step"] if clf.history_ else None,
        "accuracy": accuracy, "fit_seconds": seconds, "predict_seconds": predict_seconds,
    }  # fmt: skip
    if options["rc_mode"] == "posthoc":
        clf.model_.rc_mode = "augment"  # the same weights, the given strand only
        run["one_strand_accuracy"] = float((clf.predict(test.sequences) == labels).mean())
    return run


def table(runs: list[dict]) -> str:
    from harness import mean_with_spread

    lines = [
        "| dataset | configuration | passes | epochs | test accuracy | fit seconds "
        "| same fit, one strand scored |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset in DATASETS:
        for config in CONFIGS:
            rows = [r for r in runs if r["dataset"] == dataset and r["config"] == config]
            if not rows:
                continue
            acc = [r["accuracy"] for r in rows]
            seconds = statistics.mean(r["fit_seconds"] for r in rows)
            one = [r["one_strand_accuracy"] for r in rows if "one_strand_accuracy" in r]
            paired = ""
            if len(one) == len(rows):  # rows is never empty here
                gain = statistics.mean(acc) - statistics.mean(one)
                paired = f"{statistics.mean(one):.3f} ({gain:+.3f})"
            lines.append(
                f"| {dataset} | {config} | {rows[0]['passes']} | {rows[0]['epochs']} | "
                f"{mean_with_spread(acc)} ({len(acc)} seeds) | {seconds:.0f} "
                f"| {paired} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--train", type=int, default=1125, help="training sequences")
    p.add_argument("--test", type=int, default=1000, help="test sequences")
    p.add_argument("--epochs", type=int, default=5, help="epochs of the 4-pass configuration")
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side")
    p.add_argument("--out", default="runs/dna_passes", help="folder for the table and runs")
    p.add_argument("--_one", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        dataset, config, seed = args._one
        print(json.dumps(run_one(dataset, config, int(seed), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    jobs = [(d, c, s) for d in args.datasets for c in args.configs for s in args.seeds]

    runs = run_jobs_side_by_side(__file__, argv, jobs, args.threads, args.jobs)
    write_study_report(
        __file__,
        argv,
        args,
        table(runs),
        runs,
        f"- {args.train} training sequences, {args.test} test sequences per dataset\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
