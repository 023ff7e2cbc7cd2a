"""Wall time of the scikit-learn estimators' fit on mirrored data, per memory backend.

    TITANS_SEQ_DATA=../shared/data python benchmarks/estimator_speed.py

Fits, in one process each, with the memory backend as the only difference:

  DNAClassifier(random_state=0, max_epochs=2, mixer_options={"backend": B}) on 400
      GenomicsBenchmarks human_nontata_promoters sequences cut to 113-251 bp
  TitansForecaster(lookback=96, horizon=96, max_epochs=1, random_state=0,
      mixer_options={"backend": B}) on the first 4,000 rows of ETTh1

for B in chunked (the dual form under autograd), torch (the hand-written backward) and
compiled (torch.compile'd chunk steps; compilation included in the wall time, and the
seconds of a second fit in the same process reported beside it). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def fit_once(which: str, backend: str, threads: int) -> dict:
    import warnings

    import numpy as np
    import pandas as pd
    import torch

    from titans_seq.data.files import data_dirs

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    root = next(d for d in data_dirs() if (d / "genomics").exists())
    options = {"backend": backend}
    if which == "dna":
        from titans_seq.domains.genomics import DNAClassifier

        frame = pd.read_csv(root / "genomics/human_nontata_promoters.test.csv.gz")
        frame = frame.sample(400, random_state=0)
        rng = np.random.default_rng(0)
        X = [s[: rng.integers(113, len(s) + 1)] for s in frame.seq]

        def fit():
            DNAClassifier(random_state=0, max_epochs=2, mixer_options=options, device="cpu").fit(
                X, frame.label.to_numpy()
            )
    else:
        from titans_seq.domains.forecasting import TitansForecaster

        series = pd.read_csv(root / "timeseries/ETTh1.csv.gz", parse_dates=["date"])
        series = series.set_index("date").iloc[:4000]

        def fit():
            TitansForecaster(
                lookback=96, horizon=96, max_epochs=1, random_state=0, mixer_options=options,
                device="cpu",
            ).fit(series)  # fmt: skip

    start = time.perf_counter()
    fit()
    first = time.perf_counter() - start
    start = time.perf_counter()
    fit()
    return {"first": first, "second": time.perf_counter() - start}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backends", default="chunked,torch,compiled")
    p.add_argument("--estimators", default="dna,forecaster")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--single", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:
        print(json.dumps(fit_once(*args.single, args.threads)))
        return 0
    print(f"{args.threads} torch threads; seconds per fit (first fit / second fit in one process)")
    print("\n| estimator | backend | first fit s | second fit s | x chunked |")
    print("|---|---|---|---|---|")
    for which in args.estimators.split(","):
        base = None
        for backend in args.backends.split(","):
            cmd = [
                sys.executable,
                __file__,
                "--single",
                which,
                backend,
                "--threads",
                str(args.threads),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                error = out.stderr.strip().splitlines()[-1][:80]
                print(f"| {which} | {backend} | error: {error} | | |")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            base = base or r["second"]
            print(
                f"| {which} | {backend} | {r['first']:.1f} | {r['second']:.1f} | "
                f"{base / r['second']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
