"""A forecaster's training step on a quiet machine and beside other CPU-bound work.

    python benchmarks/loaded_machine.py                     # every load x every setting
    python benchmarks/loaded_machine.py --loads quiet spinners --settings auto pinned

The step is the README job's: `SimbaForecaster` at the `forecasting/etth1_lmm` size (dim 64,
2 blocks, 4 heads, patch 16, stride 8, lookback 96, horizon 96), a batch of 32 windows of 7
channels, forward + backward + AdamW, through the training loop's thread choice. Loads, each
started before the measurement and stopped after it:

  quiet      nothing else running
  spinners   two single-threaded busy loops (`while True: pass`)
  torch      two processes multiplying 512 x 512 matrices with 2 torch threads each

Settings of the measured process:

  auto       `train.threads: auto` (the default): the free cores when the run starts
  pinned     torch's own thread count (one per core): what runs before `auto` existed
  passive    pinned, with `OMP_WAIT_POLICY=PASSIVE` (waiting threads sleep, not spin)

Each (load, setting) runs in a fresh process; prints seconds per step (median of --steps
after 3 warm-up steps) and the ratio to the same setting on the quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
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


def run(load: str, setting: str, steps: int) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    others = [subprocess.Popen(cmd, env=dict(os.environ)) for cmd in LOADS[load]]
    try:
        time.sleep(1.0 if others else 0.0)  # the load is running before the run starts
        out = subprocess.run(
            [sys.executable, __file__, "--_one", setting, "--steps", str(steps)],
            capture_output=True, text=True, env=env,
        )  # fmt: skip
    finally:
        for proc in others:
            proc.kill()
            proc.wait()
    if out.returncode:
        raise RuntimeError(out.stderr.strip().splitlines()[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--loads", nargs="+", choices=list(LOADS), default=list(LOADS))
    p.add_argument("--settings", nargs="+", choices=SETTINGS, default=list(SETTINGS))
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--_one", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._one:
        print(json.dumps(measure(args._one, args.steps)))
        return 0
    print(f"{os.cpu_count()} cores; seconds per step (threads), x the quiet machine\n")
    print("| load | " + " | ".join(args.settings) + " |")
    print("|---" * (len(args.settings) + 1) + "|")
    quiet = {}
    for load in (["quiet"] if "quiet" not in args.loads else []) + args.loads:
        cells = []
        for setting in args.settings:
            r = run(load, setting, args.steps)
            if load == "quiet":
                quiet[setting] = r["seconds"]
            ratio = r["seconds"] / quiet[setting]
            cells.append(f"{r['seconds']:.3f} ({r['threads']}), {ratio:.1f}x")
        if load in args.loads:
            print(f"| {load} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
