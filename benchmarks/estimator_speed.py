"""Wall time of the scikit-learn estimators' fit on mirrored data, per memory backend.

    TITANS_SEQ_DATA=../shared/data python benchmarks/estimator_speed.py
    TITANS_SEQ_DATA=../shared/data python benchmarks/estimator_speed.py --before 87091be \
        --before-backends torch --backends torch,compiled --dna-sequences 1125 --dna-epochs 5

Fits, in one process each, with the memory backend as the only difference:

  DNAClassifier(random_state=0, max_epochs=E, mixer_options={"backend": B}) on N
      GenomicsBenchmarks sequences (--dna-dataset: nontata, 251 bp, or cohn, 500 bp), each
      cut to a random length from 113 bases to its own; then predict() on --dna-score
      other sequences, timed apart (N = --dna-sequences, 400; E = --dna-epochs, 2)
  TitansForecaster(lookback=96, horizon=96, max_epochs=E, random_state=0,
      mixer_options={"backend": B}) on the first R rows of ETTh1
      (R = --forecaster-rows, 4,000; E = --forecaster-epochs, 1)

for B in chunked (the dual form under autograd), torch (the hand-written backward) and
compiled (torch.compile'd chunk steps; compilation included in the wall time, and the
seconds of a second fit in the same process reported beside it). With --before COMMIT, the
rows B@COMMIT (B from --before-backends) fit with the library as it was at COMMIT, exported
with git archive, in the same run. --cold gives every fit process an empty Inductor cache
(TORCHINDUCTOR_CACHE_DIR), so that a compiled row's first fit includes all its
compilation, as on a fresh machine; otherwise compiled graphs that earlier runs left in the
cache load from disk. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from harness import export_commit, row_env


def fit_once(which: str, backend: str, args) -> dict:
    import warnings

    import numpy as np
    import pandas as pd
    import torch

    from titans_seq.data.files import data_dirs

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    root = next(d for d in data_dirs() if (d / "genomics").exists())
    options = {"backend": backend}
    if which == "dna":
        from titans_seq.domains.genomics import DNAClassifier

        name = {"nontata": "human_nontata_promoters", "cohn": "human_enhancers_cohn"}
        frame = pd.read_csv(root / f"genomics/{name[args.dna_dataset]}.test.csv.gz")
        frame = frame.sample(args.dna_sequences + args.dna_score, random_state=0)
        rng = np.random.default_rng(0)
        X = [s[: rng.integers(113, len(s) + 1)] for s in frame.seq]
        n = args.dna_sequences
        fitted = {}

        def fit():
            fitted["model"] = DNAClassifier(
                random_state=0, max_epochs=args.dna_epochs, mixer_options=options, device="cpu"
            ).fit(X[:n], frame.label.to_numpy()[:n])
    else:
        from titans_seq.domains.forecasting import TitansForecaster

        series = pd.read_csv(root / "timeseries/ETTh1.csv.gz", parse_dates=["date"])
        series = series.set_index("date").iloc[: args.forecaster_rows]

        def fit():
            TitansForecaster(
                lookback=96, horizon=96, max_epochs=args.forecaster_epochs, random_state=0,
                mixer_options=options, device="cpu",
            ).fit(series)  # fmt: skip

    start = time.perf_counter()
    fit()
    first = time.perf_counter() - start
    predict = None
    if which == "dna" and args.dna_score:
        start = time.perf_counter()
        fitted["model"].predict(X[n:])
        predict = time.perf_counter() - start
    if not args.second:
        return {"first": first, "second": None, "predict": predict}
    start = time.perf_counter()
    fit()
    return {"first": first, "second": time.perf_counter() - start, "predict": predict}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backends", default="chunked,torch,compiled")
    p.add_argument("--estimators", default="dna,forecaster")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--before", help="a commit whose backends fit as extra rows backend@COMMIT")
    p.add_argument("--before-backends", default="torch", help="backends of the @COMMIT rows")
    p.add_argument("--dna-sequences", type=int, default=400)
    p.add_argument("--dna-epochs", type=int, default=2)
    p.add_argument("--dna-dataset", choices=("nontata", "cohn"), default="nontata")
    p.add_argument("--dna-score", type=int, default=0, help="sequences predict() is timed on")
    p.add_argument("--forecaster-rows", type=int, default=4000)
    p.add_argument("--forecaster-epochs", type=int, default=1)
    p.add_argument(
        "--no-second", dest="second", action="store_false",
        help="fit once per process (no second fit after compilation)",
    )  # fmt: skip
    p.add_argument("--cold", action="store_true", help="an empty Inductor cache per fit process")
    p.add_argument("--single", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:
        print(json.dumps(fit_once(*args.single, args)))
        return 0
    rows = args.backends.split(",")
    exports = {}
    if args.before:
        rows = [f"{b}@{args.before}" for b in args.before_backends.split(",")] + rows
        exports[args.before] = export_commit(args.before)
    passthrough = [
        f"--threads={args.threads}", f"--dna-sequences={args.dna_sequences}",
        f"--dna-epochs={args.dna_epochs}", f"--dna-dataset={args.dna_dataset}",
        f"--dna-score={args.dna_score}", f"--forecaster-rows={args.forecaster_rows}",
        f"--forecaster-epochs={args.forecaster_epochs}",
    ]  # fmt: skip
    if not args.second:
        passthrough.append("--no-second")
    print(
        f"{args.threads} torch threads{', cold Inductor cache' if args.cold else ''}; seconds "
        f"per fit (first fit / second fit in one process); DNA: {args.dna_sequences} "
        f"sequences x {args.dna_epochs} epochs, "
        f"forecaster: {args.forecaster_rows} rows x {args.forecaster_epochs} epochs"
    )
    print(f"\n| estimator | row | first fit s | second fit s | x {rows[0]} | predict s |")
    print("|---|---|---|---|---|---|")
    for which in args.estimators.split(","):
        base = None
        for row in rows:
            backend = row.partition("@")[0]
            cmd = [sys.executable, __file__, "--single", which, backend, *passthrough]
            env = row_env(row, exports) or dict(os.environ)
            with tempfile.TemporaryDirectory(prefix="inductor_") as cache:
                if args.cold:
                    env["TORCHINDUCTOR_CACHE_DIR"] = cache
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if out.returncode:
                error = out.stderr.strip().splitlines()[-1][:80]
                print(f"| {which} | {row} | error: {error} | | | |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            # the steady-state time of a row: its second fit, or its only one
            seconds = r["second"] if r["second"] is not None else r["first"]
            base = base or seconds
            second = f"{r['second']:.1f}" if r["second"] is not None else "-"
            predict = f"{r['predict']:.1f}" if r.get("predict") is not None else "-"
            print(
                f"| {which} | {row} | {r['first']:.1f} | {second} | {base / seconds:.2f} | "
                f"{predict} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
