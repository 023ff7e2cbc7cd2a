"""Forward+backward time and peak memory of every registered mixer over a (B, T, D) grid.

    python benchmarks/mixer_speed.py                       # CPU, default grid
    python benchmarks/mixer_speed.py --device cuda --grid 4x4096x1024

Each measurement runs in a fresh subprocess so that the peak resident memory on CPU (or
the peak allocated CUDA memory) belongs to that configuration alone. The LMM is measured
once per backend ("reference" = token by token, "torch" = chunk-parallel); the reference
is skipped above --reference-max-t tokens because it is meant as a specification, not a
fast path. Prints a Markdown table (for benchmarks/results/NOTES.md, with the command).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys

from harness import median_seconds


def measure(
    mixer: str, backend: str | None, B: int, T: int, D: int, heads: int, device: str, repeat: int
) -> dict:
    """One configuration, in this process: median fwd+bwd seconds and peak memory (MiB)."""
    import torch

    import titans_seq as ts

    torch.manual_seed(0)
    options = {"backend": backend} if backend else {}
    model = ts.build_mixer(mixer, dim=D, heads=heads, **options).to(device)
    x = torch.randn(B, T, D, device=device, requires_grad=True)

    def step():
        y, _ = model(x)
        y.float().square().mean().backward()

    step()  # warm-up: allocator, kernels, lazy init
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    seconds, _ = median_seconds(step, warmup=0, repeat=repeat, device=device)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:  # ru_maxrss is KiB on Linux: the whole process, torch import included
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    return {"seconds": seconds, "tokens_per_s": B * T / seconds, "peak_mib": peak}


def run_isolated(
    args: argparse.Namespace, mixer: str, backend: str | None, B: int, T: int, D: int
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--single",
        mixer,
        backend or "-",
        str(B),
        str(T),
        str(D),
        "--heads",
        str(args.heads),
        "--device",
        args.device,
        "--repeat",
        str(args.repeat),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def baseline_rss_mib() -> float:
    """Peak RSS of a process that only imports torch + titans_seq (subtracted on CPU)."""
    code = "import resource, titans_seq; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 2**10


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--grid", default="1x256x64,1x1024x64,4x1024x128", help="comma-separated BxTxD"
    )
    parser.add_argument("--mixers", default="all", help="comma-separated names, or 'all'")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--reference-max-t", type=int, default=1024)
    parser.add_argument(
        "--single", nargs=5, metavar=("MIXER", "BACKEND", "B", "T", "D"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()

    if args.single:
        mixer, backend, B, T, D = args.single
        result = measure(
            mixer,
            None if backend == "-" else backend,
            int(B),
            int(T),
            int(D),
            args.heads,
            args.device,
            args.repeat,
        )
        print(json.dumps(result))
        return

    import torch

    import titans_seq as ts

    names = ts.list_mixers() if args.mixers == "all" else args.mixers.split(",")
    grid = [tuple(int(v) for v in cell.split("x")) for cell in args.grid.split(",")]
    base = baseline_rss_mib() if args.device == "cpu" else 0.0
    device_name = (
        torch.cuda.get_device_name()
        if args.device == "cuda"
        else f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
    )
    print(f"device: {device_name}; torch {torch.__version__}; fwd+bwd, median of {args.repeat}")
    memory_label = "peak MiB (RSS above import)" if args.device == "cpu" else "peak MiB (CUDA)"
    print(f"\n| mixer | backend | B | T | D | ms | tokens/s | {memory_label} |")
    print("|---|---|---|---|---|---|---|---|")
    for B, T, D in grid:
        timings = {}
        for name in names:
            backends = ["reference", "torch"] if name == "lmm" else [None]
            for backend in backends:
                if backend == "reference" and T > args.reference_max_t:
                    continue
                r = run_isolated(args, name, backend, B, T, D)
                if "error" in r:
                    print(
                        f"| {name} | {backend or '-'} | {B} | {T} | {D} | error: {r['error']} | | |"
                    )
                    continue
                timings[(name, backend)] = r["seconds"]
                print(
                    f"| {name} | {backend or '-'} | {B} | {T} | {D} | {r['seconds'] * 1e3:.1f} "
                    f"| {r['tokens_per_s']:,.0f} | {r['peak_mib'] - base:.0f} |",
                    flush=True,
                )
        ref, chunked = timings.get(("lmm", "reference")), timings.get(("lmm", "torch"))
        if ref and chunked:
            print(
                f"|  | lmm speed-up torch/reference at B={B}, T={T}, D={D}: "
                f"**{ref / chunked:.1f}x** | | | | | | |"
            )


if __name__ == "__main__":
    main()
