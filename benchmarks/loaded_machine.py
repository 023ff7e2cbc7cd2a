"""A forecaster's training step on a quiet machine and beside other CPU-bound work.

    python benchmarks/loaded_machine.py                     # every load x every setting
    python benchmarks/loaded_machine.py --loads quiet spinners --settings auto pinned
    TITANS_SEQ_DATA=../shared/data python benchmarks/loaded_machine.py --job   # whole job
    TITANS_SEQ_DATA=../shared/data python benchmarks/loaded_machine.py --job --workload dna
    TITANS_SEQ_DATA=../shared/data python benchmarks/loaded_machine.py --job --settings auto \
        --loads quiet --before 99c2cbe --rounds 3                # today beside a commit
    TITANS_SEQ_DATA=../shared/data python benchmarks/loaded_machine.py --job --settings auto \
        --loads quiet --reference-mixer attention --rounds 3     # beside a Transformer

The step is one of the README job's model: `SimbaForecaster` at the `forecasting/etth1_lmm`
size (dim 64, 2 blocks, 4 heads, patch 16, stride 8, lookback 96, horizon 96), a batch of 32
windows of 7 channels without covariates (so eager memory steps), forward + backward +
AdamW, through the training loop's thread choice. --job times the job itself (batches of 64
windows; its training plan compiles the memory steps). Loads, each started before the
measurement and stopped after it:

  quiet      nothing else running
  spinners   two single-threaded busy loops (`while True: pass`)
  torch      two processes multiplying 512 x 512 matrices with 2 torch threads each

Settings of the measured process:

  auto       `train.threads: auto` (the default): the free cores when the run starts
  pinned     torch's own thread count (one per core): what runs before `auto` existed
  passive    pinned, with `OMP_WAIT_POLICY=PASSIVE` (waiting threads sleep, not spin)

Each (load, setting) runs in a fresh process; prints seconds per step (median of --steps
after 3 warm-up steps) and the ratio to the same setting on the quiet machine.

With --job, each (load, setting) runs the README job itself instead, `titans-seq forecast
--data ETTh1 --horizon 96 --epochs E` (E = --job-epochs, 3) from start to written forecast,
and the table gives its wall seconds (settings auto and passive; the command has no thread
option). Its compiled memory steps come from Inductor's on-disk cache, which the quiet run,
always first, leaves warm for the loaded ones. --workload dna times a DNA fit the same way
instead: `DNAClassifier(random_state=0, max_epochs=E)` with its defaults on 1,125
mirrored Cohn enhancers cut to 113-500 bases, then predict() on 375 others
(`estimator_speed.py`'s fit, in a process of its own; E = --job-epochs, default 5).

With --job --before COMMIT the job also runs as it was at COMMIT (its titans_seq/, domains,
data and recipes exported with `git archive`, imported through PYTHONPATH; the `forecast`
command is found through this install's entry points, so COMMIT must have the same command
modules), alternating with today's code over --rounds rounds under each load; each cell is
then the median of the rounds after the first (the first warms Inductor's cache for both),
and a row `today / COMMIT` gives their ratio. With --job --reference-mixer M the README job
runs with `--mixer M` (attention: the same forecaster as a Transformer) in turns with the
default job instead, and a row `today / M` gives the default job's time as a ratio to it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from harness import export_commit, median_seconds

LOADS = {
    "quiet": [],
    "spinners": [[sys.executable, "-c", "while True: pass"]] * 2,
    "torch": [
        [
            sys.executable, "-c",
            "import torch; torch.set_num_threads(2); a = torch.randn(512, 512)\n"
            "while True: a = (a @ a).tanh()",
        ]
    ] * 2,
}  # fmt: skip
SETTINGS = ("auto", "pinned", "passive")
JOB_SETTINGS = ("auto", "passive")


def measure(setting: str, steps: int) -> dict:
    """Child process: seconds per step of the README job's training step."""
    import torch

    from titans_seq.domains.forecasting.model import SimbaForecaster
    from titans_seq.training.cpu_threads import cpu_threads

    torch.manual_seed(0)
    model = SimbaForecaster(7, 96, 96, dim=64, depth=2, mixer="lmm", heads=4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(32, 96, 7), torch.randn(32, 96, 7)
    requested = "auto" if setting == "auto" else torch.get_num_threads()

    def step():
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with cpu_threads(requested, torch.device("cpu")) as (threads, _):
        seconds, _ = median_seconds(step, warmup=3, repeat=steps)
    return {"seconds": seconds, "threads": threads}


def job_command(
    epochs: int, folder: str, workload: str = "readme", mixer: str | None = None
) -> list[str]:
    """The README job, writing its forecast into `folder` (with `mixer` instead of the
    default one when given); or (workload "dna") a DNA classifier's default fit and
    prediction."""
    if workload == "dna":
        estimator_speed = os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "estimator_speed.py"
        )
        return [
            sys.executable, estimator_speed, "--single", "dna", "auto",
            "--dna-dataset=cohn", "--dna-sequences=1125", f"--dna-epochs={epochs}",
            "--dna-score=375", "--no-second", f"--threads={os.cpu_count()}",
        ]  # fmt: skip
    return [
        sys.executable, "-c", "import sys; from titans_seq.cli import main; sys.exit(main())",
        "forecast", "--data", "ETTh1", "--horizon", "96", "--epochs", str(epochs),
        "--out", os.path.join(folder, "forecast.csv"), "--quiet",
        *(["--mixer", mixer] if mixer else []),
    ]  # fmt: skip


def run(
    load: str, setting: str, args, pythonpath: str | None = None, mixer: str | None = None
) -> dict:
    """One measurement beside `load`: {"seconds", "threads"} (threads None for a job).
    pythonpath: an exported commit the job imports instead of this checkout; mixer: the
    job's mixer instead of its default."""
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    others = [subprocess.Popen(cmd, env=dict(os.environ)) for cmd in LOADS[load]]
    try:
        time.sleep(1.0 if others else 0.0)  # the load is running before the run starts
        if args.job:
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                out = subprocess.run(
                    job_command(args.job_epochs, folder, args.workload, mixer),
                    capture_output=True,
                    text=True,
                    env=env,
                )
                seconds = time.perf_counter() - start
        else:
            out = subprocess.run(
                [sys.executable, __file__, "--_one", setting, "--steps", str(args.steps)],
                capture_output=True, text=True, env=env,
            )  # fmt: skip
    finally:
        for proc in others:
            proc.kill()
            proc.wait()
    if out.returncode:
        raise RuntimeError((out.stderr.strip().splitlines() or ["(no output)"])[-1])
    if args.job:
        return {"seconds": seconds, "threads": None}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--loads", nargs="+", choices=list(LOADS), default=list(LOADS))
    p.add_argument("--settings", nargs="+", choices=SETTINGS, help="default: every one")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--job", action="store_true", help="time a whole job (--workload) instead")
    p.add_argument("--job-epochs", type=int, help="epochs of the job (readme 3, dna 5)")
    p.add_argument(
        "--workload", choices=("readme", "dna"), default="readme",
        help="--job: the README job or a DNA classifier's fit",
    )  # fmt: skip
    p.add_argument("--before", help="--job: also run the job as it was at this commit")
    p.add_argument(
        "--reference-mixer",
        help="--job: also run the README job with this mixer (attention: the same forecaster "
        "as a Transformer), in turns",
    )
    p.add_argument("--rounds", type=int, default=1, help="--job: rounds of runs in turns")
    p.add_argument("--_one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        print(json.dumps(measure(args._one, args.steps)))
        return 0
    if args.settings is None:
        args.settings = list(JOB_SETTINGS if args.job else SETTINGS)
    if args.job:
        unknown = sorted(set(args.settings) - set(JOB_SETTINGS))
        if unknown:
            p.error(f"--job takes the settings {list(JOB_SETTINGS)}, not {unknown}")
        if args.job_epochs is None:
            args.job_epochs = 5 if args.workload == "dna" else 3
        job = "the README job" if args.workload == "readme" else "a DNA fit + predict"
        what = f"wall seconds of {job} ({args.job_epochs} epochs)"
    else:
        if args.before or args.reference_mixer or args.rounds != 1 or args.workload != "readme":
            p.error(
                "--before, --reference-mixer, --rounds and --workload time a whole job: add --job"
            )
        what = "seconds per step (threads)"
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    if args.before and args.reference_mixer:
        p.error("--before and --reference-mixer: one reference at a time")
    if args.reference_mixer and args.workload != "readme":
        p.error("--reference-mixer runs the README job (--workload readme)")
    if args.reference_mixer:
        versions = {args.reference_mixer: (None, args.reference_mixer), "today": (None, None)}
        return _compare_jobs(args, what, versions, args.reference_mixer)
    if args.before:
        return compare_jobs(args, what)
    print(f"{os.cpu_count()} cores; {what}, x the quiet machine\n")
    print("| load | " + " | ".join(args.settings) + " |")
    print("|---" * (len(args.settings) + 1) + "|")
    quiet = {}
    for load in (["quiet"] if "quiet" not in args.loads else []) + args.loads:
        cells = []
        for setting in args.settings:
            r = run(load, setting, args)
            if load == "quiet":
                quiet[setting] = r["seconds"]
            ratio = r["seconds"] / quiet[setting]
            threads = "" if r["threads"] is None else f" ({r['threads']})"
            cells.append(f"{r['seconds']:.3f}{threads}, {ratio:.1f}x")
        if load in args.loads:
            print(f"| {load} | " + " | ".join(cells) + " |", flush=True)
    return 0


def round_median(seconds: list[float]) -> float:
    """A cell's seconds over its rounds: the median of those after the first, which warms
    Inductor's on-disk cache (all of them when there are fewer than three)."""
    return statistics.median(seconds[1:] if len(seconds) >= 3 else seconds)


def compare_jobs(args, what: str) -> int:
    """The job at --before and today, in turns, under each load: one row each and their
    ratio, per setting."""
    exported = export_commit(args.before)
    try:
        versions = {args.before: (exported, None), "today": (None, None)}
        return _compare_jobs(args, what, versions, args.before)
    finally:
        shutil.rmtree(exported, ignore_errors=True)


def _compare_jobs(args, what: str, versions: dict[str, tuple], reference: str) -> int:
    """versions: row name -> (pythonpath or None, mixer or None), run in turns; the last
    row is today's, given as a ratio to `reference`'s."""
    median_of = "median of rounds 2+" if args.rounds >= 3 else "median of the rounds"
    print(f"{os.cpu_count()} cores; {what}, {median_of} ({args.rounds}), in turns\n")
    print("| load | code | " + " | ".join(args.settings) + " |")
    print("|---" * (len(args.settings) + 2) + "|")
    for load in args.loads:
        seconds = {(name, s): [] for name in versions for s in args.settings}
        for _ in range(args.rounds):
            for name, (path, mixer) in versions.items():
                for setting in args.settings:
                    r = run(load, setting, args, path, mixer)
                    seconds[name, setting].append(r["seconds"])
        cells = {key: round_median(values) for key, values in seconds.items()}
        for name in versions:
            row = [f"{cells[name, s]:.1f}" for s in args.settings]
            print(f"| {load} | {name} | " + " | ".join(row) + " |", flush=True)
        ratios = [f"{cells['today', s] / cells[reference, s]:.2f}x" for s in args.settings]
        print(f"| {load} | today / {reference} | " + " | ".join(ratios) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
