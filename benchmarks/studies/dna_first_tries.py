"""The DNA classifier beside what a user tries first on a small labelled set: k-mer counts
with a logistic regression, the GenomicsBenchmarks CNN, and the sequence length alone.

    TITANS_SEQ_DATA=../shared/data python benchmarks/studies/dna_first_tries.py --jobs 2
    python benchmarks/studies/dna_first_tries.py --train 200 --test 100 --models kmer length \
        --seeds 0                                                           # smoke run

On the two mirrored GenomicsBenchmarks tasks (their test splits, re-split 70/10/20 with a
fixed seed, as `benchmarks/grids/genomics.py` does: the numbers are not comparable with
published results), for each training size in `--train` (a seeded subsample of the
re-split's training part; 0 = all of it), each model is fitted with its defaults and scored
on the same `--test` held-out sequences:

  titans   DNAClassifier() (its defaults, random_state=seed)
  cnn      DNAClassifier(architecture="cnn"): the GenomicsBenchmarks CNN, trained the same way
  kmer     6-mer counts of both strands, L2-normalised, scikit-learn's LogisticRegression
  length   a depth-3 decision tree on the sequence length alone: a sanity row, since a
           task whose classes differ in length rewards any model that sees the padding

Every fit runs in its own process with one torch thread, `--jobs` side by side. Prints a
Markdown table (accuracy per size, mean over seeds; fit seconds) and writes it with every
run to `--out`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness

DATASETS = ("human_enhancers_cohn", "human_nontata_promoters")
MODELS = ("titans", "cnn", "kmer", "length")
KMER = 6


def reverse_complement(sequence: str) -> str:
    return sequence.translate(str.maketrans("ACGTacgt", "TGCAtgca"))[::-1]


def fit_model(model: str, sequences: list[str], labels, seed: int, options: dict | None = None):
    """A fitted model with `predict(sequences)`; `options`: further DNAClassifier parameters
    of the titans row."""
    import numpy as np

    if model in ("titans", "cnn"):
        from titans_seq.domains.genomics import DNAClassifier

        options = {"architecture": "cnn"} if model == "cnn" else dict(options or {})
        clf = DNAClassifier(random_state=seed, device="cpu", **options)
        return clf.fit(sequences, labels)
    if model == "kmer":
        from sklearn.feature_extraction.text import CountVectorizer
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import FunctionTransformer, Normalizer

        both = FunctionTransformer(lambda xs: [s + " " + reverse_complement(s) for s in xs])
        pipe = make_pipeline(
            both,
            CountVectorizer(analyzer="char", ngram_range=(KMER, KMER), lowercase=False),
            Normalizer(),
            LogisticRegression(max_iter=2000, random_state=seed),
        )
        return pipe.fit(sequences, labels)
    if model == "length":
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import FunctionTransformer
        from sklearn.tree import DecisionTreeClassifier

        lengths = FunctionTransformer(lambda xs: np.asarray([[len(s)] for s in xs], float))
        tree = DecisionTreeClassifier(max_depth=3, random_state=seed)
        return make_pipeline(lengths, tree).fit(sequences, labels)
    raise ValueError(f"unknown model {model!r}; choose from {MODELS}")


def run_one(dataset: str, model: str, train_size: int, seed: int, args) -> dict:
    """One fit and its test accuracy (in this process)."""
    import warnings

    import numpy as np
    import torch

    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    parts = benchmark_parts(dataset, "test", resplit=True, seed=0)
    train = subsample(parts["train"], train_size or None, seed)
    test = subsample(parts["test"], args.test, 0)
    start = time.perf_counter()
    options = json.loads(args.titans_options)
    fitted = fit_model(model, list(train.sequences), np.asarray(train.labels), seed, options)
    seconds = time.perf_counter() - start
    accuracy = float((fitted.predict(list(test.sequences)) == np.asarray(test.labels)).mean())
    chosen = {name: getattr(fitted, name + "_", None) for name in ("member", "member_accuracies")}
    return {
        "dataset": dataset, "model": model, "train": len(train), "seed": seed,
        "test": len(test), "accuracy": accuracy, "fit_seconds": seconds,
        **({"chosen": chosen} if model in ("titans", "cnn") else {}),
    }  # fmt: skip


def table(runs: list[dict]) -> str:
    from harness import mean_with_spread

    trained = sorted({(r["dataset"], r["train"]) for r in runs})
    lines = [
        "| dataset | training sequences | model | test accuracy | fit seconds |",
        "|---|---|---|---|---|",
    ]
    for dataset, size in trained:
        for model in MODELS:
            rows = [
                r for r in runs if (r["dataset"], r["train"], r["model"]) == (dataset, size, model)
            ]
            if not rows:
                continue
            acc = [r["accuracy"] for r in rows]
            seconds = statistics.mean(r["fit_seconds"] for r in rows)
            lines.append(
                f"| {dataset} | {size} | {model} | {mean_with_spread(acc)} "
                f"({len(acc)} seed{'s' if len(acc) > 1 else ''}) | {seconds:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    p.add_argument("--train", type=int, nargs="+", default=[500, 1000, 0],
                   help="training sizes (0: the whole training part)")  # fmt: skip
    p.add_argument("--test", type=int, default=1000, help="test sequences")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--titans-options", default="{}",
                   help="JSON of further DNAClassifier parameters of the titans row")  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side")
    p.add_argument("--out", default="runs/dna_first_tries", help="folder for the table and runs")
    p.add_argument("--_one", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        dataset, model, size, seed = args._one
        print(json.dumps(run_one(dataset, model, int(size), int(seed), args)))
        return 0

    from harness import run_jobs_side_by_side, write_study_report

    argv = sys.argv[1:] if argv is None else argv
    # the slow fits first, so that side by side they finish together
    jobs = [
        (d, m, n, s)
        for m in args.models
        for n in sorted(args.train, key=lambda n: -(n or 10**9))
        for d in args.datasets
        for s in args.seeds
    ]

    runs = run_jobs_side_by_side(__file__, argv, jobs, args.threads, args.jobs)
    write_study_report(__file__, argv, args, table(runs), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
