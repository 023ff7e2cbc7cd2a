"""One memory layer, forward + backward, beside titans-pytorch and SDPA attention, on CPU.

    python benchmarks/cpu_memory_speed.py                      # the grid of docs/benchmarks.md
    python benchmarks/cpu_memory_speed.py --threads 1 --grid 1x1024x64

Rows, each measured in a fresh subprocess (so that its peak resident memory is its own):

  titans-seq lmm, default (auto)      what a training loop gets without options: eager
                                      ("torch") steps until the layer's training work pays
                                      for compiling them, then "compiled"; its warm-up runs
                                      until that switch (reported: calls and seconds)
  titans-seq lmm, backend reference   token by token (only up to --reference-max-t tokens)
  titans-seq lmm, backend chunked     the dual form under autograd (the earlier torch path)
  titans-seq lmm, backend torch       the dual form with the hand-written backward
  titans-seq lmm, backend compiled    "torch" with torch.compile'd chunk steps (compilation
                                      happens in the warm-up and is reported separately)
  titans-pytorch NeuralMemory         0.5.5, default_model_kwargs=dict(depth=2,
                                      expansion_factor=1.0), chunk 16, heads of 64
  attention (SDPA)                    titans-seq's causal "attention" mixer (PyTorch SDPA)
  torch@COMMIT (--before COMMIT)      backend "torch" of titans-seq as it was at COMMIT
                                      (its titans_seq/ exported with `git archive`), the
                                      "before" column of a speed change, in the same run;
                                      --before-backends torch,compiled adds compiled@COMMIT

The titans-seq memory is the default `lmm` mixer at the same architecture (memory depth 2,
expansion 1, chunk 16, heads of 64, fp32). Throughput is tokens / median seconds of
--repeat forward+backward passes after two warm-up passes; peak memory is the subprocess's
peak RSS minus that of a process that only imports the libraries. titans-pytorch comes
from ../shared/wheels (`pip install titans-pytorch`); without it its rows are skipped.
Prints a Markdown table with the ratios that docs/benchmarks.md quotes.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
import warnings

from harness import export_commit, median_seconds, row_env

ROWS = ("reference", "chunked", "torch", "compiled", "auto", "titans-pytorch", "attention")
DEFAULT_GRID = "1x1024x64,4x1024x256,1x2048x256,1x4096x256"
AUTO_WARMUP_CAP_S = 900.0  # the default row's eager phase, at most


def build(row: str, D: int):
    """(forward, layer) of a row: forward maps x [B, T, D] to a tensor to back-propagate
    from; layer is the titans-seq mixer (None for titans-pytorch)."""
    import torch

    heads = max(1, D // 64)
    if row == "titans-pytorch":
        from titans_pytorch import NeuralMemory

        mem = NeuralMemory(
            dim=D,
            dim_head=64,
            heads=heads,
            chunk_size=16,
            default_model_kwargs=dict(depth=2, expansion_factor=1.0),
        )
        return (lambda x: mem(x)[0]), None
    import titans_seq as ts

    if row == "attention":
        layer = ts.build_mixer("attention", dim=D, heads=heads)
    else:
        backend = row.split("@")[0]  # torch@COMMIT: the torch backend of another checkout
        layer = ts.build_mixer("lmm", dim=D, heads=heads, chunk_size=16, backend=backend)
    torch.manual_seed(0)
    return (lambda x: layer(x)[0]), layer


def measure(row: str, B: int, T: int, D: int, repeat: int, threads: int) -> dict:
    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    forward, layer = build(row, D)
    x = torch.randn(B, T, D, requires_grad=True)

    def step():
        forward(x).square().mean().backward()

    start = time.perf_counter()
    step()  # warm-up (and compilation for the compiled backend)
    calls = 1
    if row == "auto":  # the default: train until the layer has switched, then once more
        tier = layer.memory.compile_tier
        while not tier.compiled and time.perf_counter() - start < AUTO_WARMUP_CAP_S:
            step()
            calls += 1
    warmup = time.perf_counter() - start
    seconds, _ = median_seconds(step, warmup=1, repeat=repeat)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    result = {"seconds": seconds, "tokens_per_s": B * T / seconds, "peak_mib": peak}
    result.update(warmup=warmup, warmup_calls=calls)
    if row == "auto":
        result["switched"] = layer.memory.compile_tier.compiled
    return result


def run_isolated(row: str, B: int, T: int, D: int, args, env: dict | None = None) -> dict:
    cmd = [sys.executable, __file__, "--single", row, str(B), str(T), str(D)]
    cmd += ["--repeat", str(args.repeat), "--threads", str(args.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_rss_mib(row: str, env: dict | None = None) -> float:
    module = "titans_pytorch" if row == "titans-pytorch" else "titans_seq"
    code = f"import resource, {module}; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return int(out.stdout.strip()) / 2**10 if out.returncode == 0 else 0.0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--grid", default=DEFAULT_GRID, help="comma-separated BxTxD")
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reference-max-t", type=int, default=1024)
    p.add_argument(
        "--before", help="a commit whose torch backend runs as the extra row torch@COMMIT"
    )
    p.add_argument(
        "--before-backends",
        default="torch",
        help="the backends run at --before's commit (comma-separated: torch, compiled)",
    )
    p.add_argument("--single", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:
        row, B, T, D = args.single
        print(json.dumps(measure(row, int(B), int(T), int(D), args.repeat, args.threads)))
        return 0

    import torch

    rows = args.rows.split(",")
    exports = {}
    if args.before:
        exports[args.before] = export_commit(args.before)
        rows += [f"{backend}@{args.before}" for backend in args.before_backends.split(",")]
    print(
        f"device: {platform.processor() or platform.machine()}, {args.threads} torch threads; "
        f"torch {torch.__version__}; forward+backward, median of {args.repeat}"
    )
    base = {row: baseline_rss_mib(row, row_env(row, exports)) for row in rows}
    print(
        "\n| B, T, D | row | tokens/s | x chunked | x titans-pytorch | peak MiB | warm-up s "
        "(calls) |"
    )
    print("|---|---|---|---|---|---|---|")
    for cell in args.grid.split(","):
        B, T, D = (int(v) for v in cell.split("x"))
        results = {}
        for row in rows:
            if row == "reference" and T > args.reference_max_t:
                continue
            results[row] = run_isolated(row, B, T, D, args, row_env(row, exports))
        chunked = results.get("chunked", {}).get("tokens_per_s")
        anchor = results.get("titans-pytorch", {}).get("tokens_per_s")
        for row, r in results.items():
            if "error" in r:
                print(f"| {B}, {T}, {D} | {row} | error: {r['error'][:80]} | | | | |")
                continue
            tps = r["tokens_per_s"]
            vs_chunked = f"{tps / chunked:.2f}" if chunked else "-"
            vs_anchor = f"{tps / anchor:.2f}" if anchor else "-"
            print(
                f"| {B}, {T}, {D} | {row} | {tps:,.0f} | {vs_chunked} | {vs_anchor} | "
                f"{r['peak_mib'] - base[row]:.0f} | {r['warmup']:.1f} ({r['warmup_calls']}"
                f"{'' if r.get('switched', True) else ', not switched'}) |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
