"""Seconds per training step of the LMM forecaster at the recipe's size, per memory backend,
beside the same backends at an earlier commit.

    python benchmarks/forecaster_step.py --before 7bdae88 --channels 7,21

One step: forward, backward and AdamW update of `SimbaForecaster` as the forecasting
recipes build it (`forecasting/etth1_lmm`: dim 64, 2 blocks, 4 heads, patch 16, stride 8,
lookback 96, horizon 96, dropout 0.1), a batch of 64 windows of C channels (7: ETT, 21:
Weather), so 64 x C sequences of 12 patches (16 tokens with the memory's 4 persistent
ones). Random inputs: the cost does not depend on the values. Each measurement runs in a
fresh process (`backend@COMMIT` imports titans_seq as it was at COMMIT, exported with git
archive); rows alternate over `--rounds` so that the noise of a shared machine falls on all
of them alike. Prints the median seconds per step of each row and its speed-up over the
first row.

`--memory-stub` adds the row `stub`: the same step with the memory op replaced by an
element-wise stand-in that reads the same inputs and passes gradients to all of them
(`q * k + v * (theta + eta + alpha)`), so that `torch` minus `stub` is what the memory op
costs in a step and `stub` is what no faster memory op can remove.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from harness import export_commit, median_seconds


def _stub_memory(q, k, v, theta, eta, alpha, weights, **options):
    """A stand-in for `lmm_memory` at next to no cost: y [B, T, H, d] from every input, no
    state. Its gradients reach every projection that feeds the memory."""
    gates = theta
    for gate in (eta, alpha):
        if gate is not None:
            gates = gates + gate
    return q * k + v * gates.unsqueeze(-1), None


def measure(backend: str, channels: int, steps: int, threads: int) -> dict:
    import torch

    from titans_seq.domains.forecasting.model import SimbaForecaster

    if backend == "stub":
        import titans_seq.mixers.neural_memory as neural_memory

        neural_memory.lmm_memory = _stub_memory
        backend = "torch"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = SimbaForecaster(
        channels, lookback=96, horizon=96, dim=64, depth=2, mixer="lmm", heads=4,
        mixer_options={"memory": {"chunk_size": 16}, "backend": backend},
        patch_len=16, stride=8, einfft_blocks=4, dropout=0.1,
    )  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 96, channels), torch.randn(64, 96, channels)

    def step():
        optimizer.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()

    start = time.perf_counter()
    step()  # includes compilation for "compiled"
    warmup = time.perf_counter() - start
    seconds, _ = median_seconds(step, warmup=1, repeat=steps)
    return {"seconds": seconds, "warmup": warmup}


def run_row(row: str, channels: int, args, exports: dict) -> dict:
    backend, _, commit = row.partition("@")
    env = {**os.environ, "PYTHONPATH": exports[commit]} if commit else None
    cmd = [sys.executable, __file__, "--single", backend, str(channels)]
    cmd += ["--steps", str(args.steps), "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backends", default="torch,compiled")
    p.add_argument("--before", help="a commit whose backends run as extra rows backend@COMMIT")
    p.add_argument("--channels", default="7", help="comma-separated channel counts")
    p.add_argument("--steps", type=int, default=8, help="timed steps per measurement")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds over the rows")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--memory-stub", action="store_true", help="add the row `stub` (see the docstring)"
    )
    p.add_argument("--single", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:
        backend, channels = args.single
        print(json.dumps(measure(backend, int(channels), args.steps, args.threads)))
        return 0

    backends = args.backends.split(",")
    rows = [f"{b}@{args.before}" for b in backends] if args.before else []
    rows += backends
    if args.memory_stub:
        rows.append("stub")
    exports = {args.before: export_commit(args.before)} if args.before else {}
    print(
        f"device: {platform.processor() or platform.machine()}, {args.threads} torch "
        f"thread(s); median s per step over {args.steps} steps x {args.rounds} rounds"
    )
    print("\n| channels | row | s / step | x first row | first step s |")
    print("|---|---|---|---|---|")
    for channels in (int(c) for c in args.channels.split(",")):
        seconds = {row: [] for row in rows}
        warmups = {row: [] for row in rows}
        errors = {}
        for _ in range(args.rounds):
            for row in rows:
                result = run_row(row, channels, args, exports)
                if "error" in result:
                    errors[row] = result["error"]
                    continue
                seconds[row].append(result["seconds"])
                warmups[row].append(result["warmup"])
        first = statistics.median(seconds[rows[0]]) if seconds[rows[0]] else None
        for row in rows:
            if row in errors:
                print(f"| {channels} | {row} | error: {errors[row][:80]} | | |")
                continue
            s = statistics.median(seconds[row])
            ratio = f"{first / s:.2f}" if first else "-"
            print(f"| {channels} | {row} | {s:.3f} | {ratio} | {max(warmups[row]):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
