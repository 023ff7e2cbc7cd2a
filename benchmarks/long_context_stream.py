"""Long-context inference with an LMM layer: constant memory however long the stream.

    python benchmarks/long_context_stream.py --device cuda --tokens 1048576        # 1M tokens
    python benchmarks/long_context_stream.py --device cuda --mode decode --steps 2000
    python benchmarks/long_context_stream.py --device cpu --tokens 65536 --dim 128 --heads 2

Mode `stream` (default): feeds one sequence of --tokens tokens through an `lmm` mixer in
pieces of --piece tokens under torch.no_grad(), passing the state along, and prints every
--report tokens the throughput so far and the memory in use (CUDA: allocated and peak
allocated since the previous report; CPU: the process's resident set). The state is a
fixed-size set of fast weights, so memory must stay flat while the position grows; the
script fails if the last report's memory exceeds the first by more than --tolerance-mib,
and also checks that the output stays finite.

Mode `decode`: after a --prefill-token prompt, one token per call (B = --batch), as an
autoregressive decoder would; prints the median and 95th-percentile latency per token.
The state finishes partial chunks itself (offset, chunk-entry weights), so single-token
calls equal one-shot processing.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time


def memory_mib(device: str) -> float:
    import torch

    if device == "cuda":
        return torch.cuda.memory_allocated() / 2**20
    with open("/proc/self/statm") as f:  # resident pages of this process (Linux)
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def build(args):
    import torch

    import titans_seq as ts

    torch.manual_seed(0)
    mixer = ts.build_mixer(
        "lmm",
        dim=args.dim,
        heads=args.heads,
        chunk_size=args.chunk,
        memory_depth=args.depth,
        memory_expansion=args.expansion,
        backend=args.backend,
    )
    return mixer.to(args.device, torch.bfloat16 if args.bf16 else torch.float32).eval()


def stream(args) -> None:
    import torch

    mixer = build(args)
    dtype = next(mixer.parameters()).dtype
    g = torch.Generator(device=args.device).manual_seed(1)
    state, done, first, last = None, 0, None, None
    start = time.perf_counter()
    with torch.no_grad():
        while done < args.tokens:
            n = min(args.piece, args.tokens - done)
            x = torch.randn(args.batch, n, args.dim, generator=g, device=args.device, dtype=dtype)
            y, state = mixer(x, state)
            done += n
            if not torch.isfinite(y).all():
                raise SystemExit(f"non-finite output at position {done}")
            if done % args.report == 0 or done == args.tokens:
                if args.device == "cuda":
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() / 2**20
                    torch.cuda.reset_peak_memory_stats()
                else:
                    peak = float("nan")
                mem = memory_mib(args.device)
                first = mem if first is None else first
                last = mem
                rate = args.batch * done / (time.perf_counter() - start)
                print(
                    f"position {done:>9,}  {rate:>12,.0f} tokens/s  memory {mem:9.1f} MiB"
                    + ("" if peak != peak else f"  peak {peak:9.1f} MiB"),
                    flush=True,
                )
    growth = last - first
    print(f"memory growth from the first to the last report: {growth:+.1f} MiB")
    if growth > args.tolerance_mib:
        raise SystemExit(f"memory grew by {growth:.1f} MiB (> {args.tolerance_mib} MiB)")


def decode(args) -> None:
    import torch

    mixer = build(args)
    dtype = next(mixer.parameters()).dtype
    with torch.no_grad():
        x = torch.randn(args.batch, args.prefill, args.dim, device=args.device, dtype=dtype)
        _, state = mixer(x, None)
        token = torch.randn(args.batch, 1, args.dim, device=args.device, dtype=dtype)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            y, state = mixer(token, state)
            if args.device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            token = y  # feed the output back, as a decoder feeds its next token
    times = sorted(times[args.steps // 10 :])  # drop the warm-up tenth
    p95 = times[int(0.95 * (len(times) - 1))]
    print(
        f"decode: batch {args.batch}, after {args.prefill} prompt tokens: median "
        f"{statistics.median(times) * 1e3:.3f} ms/token, p95 {p95 * 1e3:.3f} ms/token, "
        f"memory {memory_mib(args.device):.1f} MiB"
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mode", choices=["stream", "decode"], default="stream")
    p.add_argument("--device", default="cuda")
    p.add_argument("--backend", default="auto")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--expansion", type=float, default=1.0)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=1 << 20)
    p.add_argument("--piece", type=int, default=8192, help="tokens per call in stream mode")
    p.add_argument("--report", type=int, default=1 << 17)
    p.add_argument("--tolerance-mib", type=float, default=64.0)
    p.add_argument("--prefill", type=int, default=1000)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--bf16", action="store_true", help="bf16 parameters and activations")
    args = p.parse_args(argv)
    import torch

    print(
        f"lmm layer: D={args.dim}, {args.heads} heads, depth {args.depth}, chunk {args.chunk}, "
        f"backend {args.backend}, device {args.device}, torch {torch.__version__}, "
        f"{time.strftime('%Y-%m-%d')}"
    )
    (stream if args.mode == "stream" else decode)(args)


if __name__ == "__main__":
    main()
