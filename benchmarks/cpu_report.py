"""The CPU speed questions in one run: a memory layer beside titans-pytorch, the estimators'
fits, and the README job (its training step, and the whole job) on a quiet and on a loaded
machine.

    TITANS_SEQ_DATA=../shared/data python benchmarks/cpu_report.py --out runs/cpu_report.md
    TITANS_SEQ_DATA=../shared/data python benchmarks/cpu_report.py --before cc8288c

Runs, one after the other, each in its own processes, and prints one Markdown report
(device, date, commit and the exact command of every part):

  1. `cpu_memory_speed.py` at the three layer shapes of docs/benchmarks.md, rows `torch`,
     `compiled`, the default (`auto`, after it switches) and titans-pytorch;
  2. `estimator_speed.py`: DNAClassifier's default fit (--dna-epochs on --dna-sequences
     Cohn enhancers, then predict on 375) and TitansForecaster's fit on ETTh1 rows, with the
     default backend; with --before COMMIT the same fits at COMMIT beside them;
  3. `loaded_machine.py`: the README job's step, quiet and beside two busy processes, per
     thread setting;
  4. `loaded_machine.py --job`: the README job from start to forecast, likewise;
  5. `loaded_machine.py --job --workload dna`: a DNA classifier's fit and prediction, likewise;
  6. with --before COMMIT, `loaded_machine.py --job --loads quiet --before COMMIT --rounds 3`:
     the README job as it was at COMMIT and today's, in turns on the quiet machine.

Each part's own script documents its method; this one only runs them in sequence and keeps
their tables together, so that the ratios in each come from the same machine and hour.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "unknown"


def parts(args) -> list[tuple[str, list[str]]]:
    """(title, arguments of a benchmark script) for each part."""
    before = ["--before", args.before, "--before-backends", "torch"] if args.before else []
    result = [
        (
            "One memory layer, forward + backward",
            [
                "cpu_memory_speed.py",
                *("--grid", "1x1024x64,1x2048x256,4x1024x256"),
                *("--rows", "torch,compiled,auto,titans-pytorch", "--repeat", "7"),
            ],
        ),
        (
            "The estimators' fits, default backend",
            [
                "estimator_speed.py",
                *("--estimators", "dna,forecaster", "--backends", "auto"),
                *("--dna-dataset", "cohn", "--dna-sequences", "1125"),
                *("--dna-epochs", str(args.dna_epochs), "--dna-score", "375"),
                *("--forecaster-rows", "17420", "--forecaster-epochs", "3", "--no-second"),
                *before,
            ],
        ),
        ("The README job's step, quiet and loaded", ["loaded_machine.py"]),
        ("The README job, quiet and loaded", ["loaded_machine.py", "--job", "--settings", "auto"]),
        (
            "A DNA fit, quiet and loaded",
            ["loaded_machine.py", "--job", "--workload", "dna", "--settings", "auto"],
        ),
    ]
    if args.before:
        readme_job = ["loaded_machine.py", "--job", "--settings", "auto", "--loads", "quiet"]
        turns = ["--before", args.before, "--rounds", "3"]
        result.append((f"The README job at {args.before} and today, in turns", readme_job + turns))
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--before", help="a commit whose estimators and README job run beside today's")
    p.add_argument("--dna-epochs", type=int, default=20, help="max_epochs (its default)")
    p.add_argument(
        "--only", nargs="+", type=int, choices=(1, 2, 3, 4, 5, 6), help="run these parts"
    )
    p.add_argument("--out", help="also write the report to this file")
    args = p.parse_args(argv)
    command = " ".join(["python benchmarks/cpu_report.py", *(argv or sys.argv[1:])])
    lines = [
        "# CPU speed report",
        "",
        f"`{command}`",
        f"device: {platform.processor() or platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores; date "
        f"{datetime.date.today().isoformat()}; commit {commit()}",
    ]
    print("\n".join(lines), flush=True)
    for number, (title, command) in enumerate(parts(args), start=1):
        if args.only and number not in args.only:
            continue
        header = ["", f"## {number}. {title}", "", f"`python benchmarks/{' '.join(command)}`", ""]
        print("\n".join(header), flush=True)
        out = subprocess.run(
            [sys.executable, str(HERE / command[0]), *command[1:]], capture_output=True, text=True
        )
        body = out.stdout.rstrip() if out.returncode == 0 else f"failed: {out.stderr[-2000:]}"
        print(body, flush=True)
        lines += header + [body]
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
