"""Training throughput (forward + backward) of the Titans memory and its anchors, side by side.

    python benchmarks/mixer_throughput.py --device cuda                 # the target grid
    python benchmarks/mixer_throughput.py --device cuda --lift-fla-guard
    python benchmarks/mixer_throughput.py --device cpu --tokens 512 --lengths 128 256 \\
        --dim 128 --heads 2                                              # smoke run

Target configuration: D = 1024, 16 heads x 64, memory depth 2, expansion 1, chunk 16,
bf16 autocast, a fixed number of tokens per batch (default 16K: B = tokens / T) for T in
{2K, 4K, 8K, 16K}. Rows:

* `op/<backend>`: the memory op alone (`lmm_memory` on projected [B, T, H, d] bf16 tensors
  with gates, depth-2 weights) for backends reference (only up to --reference-max-t),
  torch, triton (fp32 dot operands, the default), triton with tf32 or bf16 dot operands
  (`TritonOptions.dot_precision`), and triton with the backward recomputed by the chunked
  PyTorch form;
* `lmm/<backend>`, `mag`, `mal`, `mac`: the mixers (backend "auto" unless named);
* `attention`: full causal attention (SDPA);
* `fla/GatedDeltaNet` (flash-linear-attention, when installed): hidden D, 16 heads x 64,
  expand_v 1, chunk mode;
* `titans-pytorch/NeuralMemory` (when installed): dim D, 16 heads x 64, chunk 16, memory
  MLP depth 2, expansion 1.

Each row runs in a fresh subprocess (its own peak-memory counter); a failure (out of memory,
missing package, unsupported backend) is reported in the table instead of stopping the run.
flash-linear-attention 0.6.0 refuses the gated backward on Hopper with Triton < 3.7.1 (a
correctness guard); --lift-fla-guard lifts it for timing only, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

ROWS = [
    "op/reference",
    "op/torch",
    "op/triton",
    "op/triton-tf32",
    "op/triton-bf16",
    "op/triton-torch-backward",
    "lmm/torch",
    "lmm/triton",
    "mag",
    "mal",
    "mac",
    "attention",
    "fla/GatedDeltaNet",
    "titans-pytorch/NeuralMemory",
]


def build(row: str, args, device: str):
    """A module mapping x [B, T, D] -> a tensor (or tuple whose first item is one)."""
    import torch

    import titans_seq as ts

    memory = dict(
        heads=args.heads,
        chunk_size=args.chunk,
        memory_depth=args.depth,
        memory_expansion=args.expansion,
    )
    if row.startswith("op/"):
        from titans_seq.ops.lmm import lmm_memory

        backend, options = row.split("/")[1], None
        if backend.startswith("triton-"):
            from titans_seq.ops.lmm.triton_autograd import TritonOptions

            variant = backend.split("-", 1)[1]
            if variant == "torch-backward":  # fused forward, chunked-form recomputation
                options = TritonOptions(backward="torch")
            else:  # tf32 / bf16 dot operands
                options = TritonOptions(dot_precision=variant)
            backend = "triton"
        H, d = args.heads, args.dim // args.heads
        hidden = int(d * args.expansion)
        widths = [d] + [hidden] * (args.depth - 1) + [d]

        class Op(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(args.dim, 3 * H * d + 3 * H, bias=False)
                self.weights = torch.nn.ParameterList(
                    torch.nn.Parameter(torch.randn(H, widths[i + 1], widths[i]) / widths[i] ** 0.5)
                    for i in range(args.depth)
                )

            def forward(self, x):
                B, T, _ = x.shape
                p = self.proj(x)
                q, k, v = p[..., : 3 * H * d].view(B, T, 3, H, d).unbind(2)
                q, k = (torch.nn.functional.normalize(t, dim=-1) for t in (q, k))
                gates = torch.sigmoid(p[..., 3 * H * d :].float()).view(B, T, 3, H).unbind(2)
                y, _ = lmm_memory(
                    q, k, v, gates[0] * 0.1, gates[1], gates[2] * 0.05, tuple(self.weights),
                    chunk_size=args.chunk, backend=backend, inner_grad_clip=2.0 * d**0.5,
                    triton_options=options,
                )  # fmt: skip
                return y

        return Op()
    if row.startswith("lmm/"):
        return ts.build_mixer("lmm", dim=args.dim, backend=row.split("/")[1], **memory)
    if row in ("mag", "mal", "mac"):
        return ts.build_mixer(row, dim=args.dim, **memory)
    if row == "attention":
        return ts.build_mixer("attention", dim=args.dim, heads=args.heads)
    if row == "fla/GatedDeltaNet":
        if args.lift_fla_guard:
            import fla.ops.common.chunk_o as chunk_o

            chunk_o.TRITON_ABOVE_3_7_1 = True  # timing only: lifts a correctness guard
        from fla.layers import GatedDeltaNet

        return GatedDeltaNet(
            hidden_size=args.dim,
            head_dim=args.dim // args.heads,
            num_heads=args.heads,
            expand_v=1,
            mode="chunk",
        )
    if row == "titans-pytorch/NeuralMemory":
        from titans_pytorch import NeuralMemory

        return NeuralMemory(
            dim=args.dim,
            chunk_size=args.chunk,
            heads=args.heads,
            dim_head=args.dim // args.heads,
            default_model_kwargs=dict(depth=args.depth, expansion_factor=args.expansion),
        )
    raise ValueError(f"unknown row {row!r}; choose from {ROWS}")


def measure(row: str, T: int, args) -> dict:
    """Median seconds of one forward+backward step, tokens/s and peak memory (MiB)."""
    import torch

    torch.manual_seed(0)
    device = args.device
    B = max(1, args.tokens // T)
    model = build(row, args, device).to(device)
    x = torch.randn(B, T, args.dim, device=device, requires_grad=True)
    autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=not args.no_autocast)

    def step():
        with autocast:
            out = model(x)
            y = out[0] if isinstance(out, tuple) else out
        y.float().square().mean().backward()

    for _ in range(args.warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    seconds = statistics.median(times)
    return {"B": B, "seconds": seconds, "tokens_per_s": B * T / seconds, "peak_mib": peak}


def run_isolated(row: str, T: int, argv: list[str]) -> dict:
    cmd = [sys.executable, __file__, *argv, "--single", row, str(T)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = (out.stderr.strip().splitlines() or ["failed"])[-1]
        return {"error": err[:120]}
    return json.loads(lines[-1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--expansion", type=float, default=1.0)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch (B = tokens/T)")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    p.add_argument("--rows", nargs="+", default=ROWS)
    p.add_argument("--reference-max-t", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-autocast", action="store_true")
    p.add_argument("--lift-fla-guard", action="store_true")
    p.add_argument("--json", help="also write every measurement here")
    p.add_argument("--single", nargs=2, metavar=("ROW", "T"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.single:
        print(json.dumps(measure(args.single[0], int(args.single[1]), args)))
        return

    import torch

    passthrough = [a for a in (argv if argv is not None else sys.argv[1:])]
    name = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor()
    print(
        f"device: {args.device} ({name}), torch {torch.__version__}, D={args.dim}, "
        f"{args.heads} heads x {args.dim // args.heads}, memory depth {args.depth}, "
        f"expansion {args.expansion}, chunk {args.chunk}, {args.tokens} tokens per batch, "
        f"fwd+bwd, {'fp32' if args.no_autocast else 'bf16 autocast'}, {time.strftime('%Y-%m-%d')}"
    )
    if args.lift_fla_guard:
        print(
            "note: fla's Triton<3.7.1 Hopper guard on the gated backward was lifted for "
            "timing only (fla/GatedDeltaNet rows)"
        )
    results = []
    header = "| row | " + " | ".join(f"T={T}" for T in args.lengths) + " |"
    print("\ntokens/s (peak MiB)\n")
    print(header)
    print("|---" * (len(args.lengths) + 1) + "|")
    for row in args.rows:
        cells = []
        for T in args.lengths:
            if row == "op/reference" and T > args.reference_max_t:
                cells.append("skipped (spec)")
                continue
            r = run_isolated(row, T, passthrough)
            results.append(dict(row=row, T=T, **r))
            if "error" in r:
                cells.append(f"error: {r['error']}")
            else:
                peak = "n/a" if r["peak_mib"] is None else f"{r['peak_mib']:,.0f}"
                cells.append(f"{r['tokens_per_s']:,.0f} ({peak})")
        label = row + (" (guard lifted)" if row.startswith("fla") and args.lift_fla_guard else "")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(dict(device=name, torch=torch.__version__, rows=results), handle, indent=1)


if __name__ == "__main__":
    main()
