"""A forecaster's training step on a quiet machine and beside other CPU-bound work.

    python benchmarks/loaded_machine.py                     # every load x every setting
    python benchmarks/loaded_machine.py --loads quiet spinners --settings auto pinned
    TITANS_SEQ_DATA=../shared/data python benchmarks/loaded_machine.py --job   # whole job

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
always first, leaves warm for the loaded ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from harness import median_seconds

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


def job_command(epochs: int, folder: str) -> list[str]:
    """The README job, writing its forecast into `folder`."""
    return [
        sys.executable, "-c", "import sys; from titans_seq.cli import main; sys.exit(main())",
        "forecast", "--data", "ETTh1", "--horizon", "96", "--epochs", str(epochs),
        "--out", os.path.join(folder, "forecast.csv"), "--quiet",
    ]  # fmt: skip


def run(load: str, setting: str, args) -> dict:
    """One measurement beside `load`: {"seconds", "threads"} (threads None for a job)."""
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    others = [subprocess.Popen(cmd, env=dict(os.environ)) for cmd in LOADS[load]]
    try:
        time.sleep(1.0 if others else 0.0)  # the load is running before the run starts
        if args.job:
            with tempfile.TemporaryDirectory() as folder:
                start = time.perf_counter()
                out = subprocess.run(
                    job_command(args.job_epochs, folder), capture_output=True, text=True, env=env
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
    p.add_argument("--job", action="store_true", help="time the whole README job instead")
    p.add_argument("--job-epochs", type=int, default=3)
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
        what = f"wall seconds of the README job ({args.job_epochs} epochs)"
    else:
        what = "seconds per step (threads)"
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


if __name__ == "__main__":
    sys.exit(main())
