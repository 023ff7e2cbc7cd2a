"""Training throughput (forward + backward) of the Titans memory and its anchors, side by side.

    python benchmarks/mixer_throughput.py --device cuda                 # the default grid
    python benchmarks/mixer_throughput.py --device cuda --lift-fla-guard --row-seconds 60
    python benchmarks/mixer_throughput.py --device cpu --tokens 512 --lengths 128 256 \\
        --dim 128 --heads 2                                              # smoke run

Default configuration: D = 1024, 16 heads x 64, memory depth 2, expansion 1, chunk 16,
bf16 autocast, a fixed number of tokens per batch (default 16K: B = tokens / T) for T in
{2K, 4K, 8K, 16K}. Rows:

* `op/<backend>`: the memory op alone (`lmm_memory` on projected [B, T, H, d] bf16 tensors
  with gates, depth-2 weights) for backends reference (only up to --reference-max-t),
  torch, triton (the default dot precision: bf16 operands for these bf16 inputs), triton
  with fp32, tf32 or bf16 dot operands (`TritonOptions.dot_precision` "ieee", "tf32",
  "bf16"), triton with the backward recomputed by the chunked PyTorch form, and triton with
  the forward kernel passing the running state through global memory (`op/triton-global`,
  `TritonOptions(state_in_registers=False)`; the default holds it in registers at bf16 or
  tf32 dots), and triton with the backward's next block prepared on a side stream
  (`op/triton-overlap`, `TritonOptions(overlap_backward=True)`);
* `lmm/<backend>`: the LMM mixer on the memory backend named (`triton`, `compiled`,
  `torch`); `lmm/triton-ieee`, `lmm/triton-tf32`, `lmm/triton-bf16`: the Triton backend
  with fp32, tf32 or bf16 dot operands (`memory={"triton": {"dot_precision": "ieee"}}`);
  `lmm/triton-global`: the forward kernel's state through global memory;
  `lmm/triton-overlap`: the backward's next block prepared on a side stream;
  `lmm/triton-groups16`: the backward takes 16 checkpoint groups a block instead of 4
  (`TritonOptions(regenerate_groups=16)`: a quarter of the blocks, each regenerating and
  retrieving 4x the segments in one launch; 4x the block's scratch);
  `lmm/triton-chunk32`: the memory's chunk size 32 instead of --chunk (half the
  sequential steps, each wider; a different model: the memory takes one gradient step
  per 32 tokens);
  `mag`, `mal`, `mac`: the hybrids on their default backend ("auto");
* `sdpa`: the causal attention mixer (SDPA, FlashAttention on the GPU);
* `fla/GatedDeltaNet` (flash-linear-attention, when installed): hidden D, 16 heads x 64,
  expand_v 1, chunk mode;
* `titans-pytorch` (its NeuralMemory, when installed): dim D, 16 heads x 64, chunk 16,
  memory MLP depth 2, expansion 1;
* any row with `+compile` appended (e.g. `lmm/triton+compile`, `sdpa+compile`): that
  module under `torch.compile`, as a model compiled whole runs it (each length compiles
  once, in its warm-up steps).

With --profile a record also holds the top kernels by device time (operators on the CPU)
and `kernels_per_step`, the device kernels launched per step (operators on the CPU).

Each row runs in a fresh subprocess (its own peak-memory counter) over all lengths, printing
one JSON line per length; --row-seconds caps a row, compilation included, and
--total-seconds the whole table. A failure (out of
memory, missing package, unsupported backend, the time limit) is reported in the table
instead of stopping the run. The JSON (--json) holds `device`, `date`, `commit`, the
configuration and `rows` of `name`, `T`, `B`, `tokens_per_s`, `peak_mib` (or `error`).
flash-linear-attention 0.6.0 refuses the gated backward on Hopper with Triton < 3.7.1 (a
correctness guard); --lift-fla-guard lifts it for timing only, and the table says so.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from harness import (
    NO_TIME_LEFT,
    TimeLimits,
    add_time_limit_arguments,
    median_seconds,
    run_child,
)

from titans_seq.training.checkpoint import atomic_write_text

ROWS = [
    "op/reference",
    "op/torch",
    "op/triton",
    "op/triton-ieee",
    "op/triton-tf32",
    "op/triton-bf16",
    "op/triton-torch-backward",
    "op/triton-global",
    "op/triton-overlap",
    "lmm/triton",
    "lmm/triton-ieee",
    "lmm/triton-tf32",
    "lmm/triton-bf16",
    "lmm/triton-global",
    "lmm/triton-overlap",
    "lmm/triton-chunk32",
    "lmm/triton-groups16",
    "lmm/compiled",
    "lmm/torch",
    "mag",
    "mal",
    "mac",
    "sdpa",
    "fla/GatedDeltaNet",
    "titans-pytorch",
    "lmm/triton+compile",
    "sdpa+compile",
]


def build(row: str, args, device: str):
    """A module mapping x [B, T, D] -> a tensor (or tuple whose first item is one)."""
    import torch

    import titans_seq as ts

    if row.endswith("+compile"):
        return torch.compile(build(row.removesuffix("+compile"), args, device))

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
            from titans_seq.ops.lmm.triton import TritonOptions

            variant = backend.split("-", 1)[1]
            if variant == "torch-backward":  # fused forward, chunked-form recomputation
                options = TritonOptions(backward="torch")
            elif variant == "global":
                options = TritonOptions(state_in_registers=False)
            elif variant == "overlap":
                options = TritonOptions(overlap_backward=True)
            else:  # fp32 / tf32 / bf16 dot operands
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
        backend = row.split("/")[1]
        if backend == "triton-global":
            backend, memory["triton"] = "triton", {"state_in_registers": False}
        elif backend == "triton-overlap":
            backend, memory["triton"] = "triton", {"overlap_backward": True}
        elif backend == "triton-chunk32":
            backend, memory["chunk_size"] = "triton", 32
        elif backend == "triton-groups16":
            backend, memory["triton"] = "triton", {"regenerate_groups": 16}
        elif backend.startswith("triton-"):  # fp32 / tf32 / bf16 dot operands
            backend, precision = backend.split("-", 1)
            memory["triton"] = {"dot_precision": precision}
        return ts.build_mixer("lmm", dim=args.dim, backend=backend, **memory)
    if row in ("mag", "mal", "mac"):
        return ts.build_mixer(row, dim=args.dim, **memory)
    if row == "sdpa":
        return ts.build_mixer("attention", dim=args.dim, heads=args.heads, backend="sdpa")
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
    if row == "titans-pytorch":
        from titans_pytorch import NeuralMemory

        return NeuralMemory(
            dim=args.dim,
            chunk_size=args.chunk,
            heads=args.heads,
            dim_head=args.dim // args.heads,
            default_model_kwargs=dict(depth=args.depth, expansion_factor=args.expansion),
        )
    raise ValueError(f"unknown row {row!r}; choose from {ROWS}")


def make_inputs(T: int, args):
    import torch

    B = max(1, args.tokens // T)
    x = torch.randn(B, T, args.dim, device=args.device, requires_grad=True)  # [B, T, D]
    return B, x


def measure(model, row: str, T: int, args) -> dict:
    """Seconds of one forward+backward step (median of the timed steps), tokens/s and peak
    memory (MiB, over the timed steps) of `model` at length T."""
    import torch

    device = args.device
    B, x = make_inputs(T, args)
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
    # at least one timed step, at most --repeat, and no new one past --seconds-per-length
    seconds, times = median_seconds(
        step, warmup=0, repeat=args.repeat, device=device, max_seconds=args.seconds_per_length
    )
    peak = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    record = {
        "name": row, "T": T, "B": B, "seconds": seconds, "steps": len(times),
        "tokens_per_s": B * T / seconds, "peak_mib": peak,
    }  # fmt: skip
    if args.profile:
        record["profile"], record["kernels_per_step"] = profile_steps(step, device)
    return record


def profile_steps(step, device: str, steps: int = 2, top: int = 12) -> tuple[list[dict], float]:
    """The `top` kernels (operators on the CPU) by self time per step over `steps` steps
    under the PyTorch profiler (name, milliseconds per step, calls per step), and how many
    kernels a step launches on the device (operators a step runs on the CPU)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    on_device = device == "cuda"
    rows = []
    for event in prof.key_averages():
        micros = event.self_device_time_total if on_device else event.self_cpu_time_total
        if micros > 0:
            rows.append(
                {
                    "kernel": event.key[:120],
                    "ms_per_step": micros / 1000 / steps,
                    "calls_per_step": event.count / steps,
                }
            )
    rows.sort(key=lambda r: -r["ms_per_step"])
    if on_device:
        from torch.autograd import DeviceType

        launched = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
    else:
        launched = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    return rows[:top], sum(e.count for e in launched) / steps


def measure_row(row: str, args) -> None:
    """Child process: one row at every length, one JSON line per length as it is measured
    (a length that fails, e.g. out of memory, prints its error and the next one runs)."""
    import torch

    torch.manual_seed(0)
    model = build(row, args, args.device).to(args.device)
    for T in args.lengths:
        if row == "op/reference" and T > args.reference_max_t:
            print(json.dumps({"name": row, "T": T, "error": "skipped (reference too slow)"}))
            continue
        try:
            record = measure(model, row, T, args)
        except torch.cuda.OutOfMemoryError:
            record = {"name": row, "T": T, "error": "out of memory"}
        model.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()
        print(json.dumps(record), flush=True)


def run_row(row: str, lengths, argv: list[str], timeout: float | None, log=None) -> list[dict]:
    """`measure_row` in a child process for at most `timeout` seconds; a length the child
    did not reach gets a record saying why."""
    cmd = [sys.executable, __file__, *argv, "--single", row]
    result = run_child(cmd, timeout=timeout, log=log)
    done = {r["T"]: r for r in result.records if r.get("name") == row}
    why = result.error() or "not reached"
    return [done.get(T, {"name": row, "T": T, "error": why}) for T in lengths]


def format_cell(record: dict) -> str:
    if "error" in record:
        return f"error: {record['error'][:100]}"
    peak = "n/a" if record["peak_mib"] is None else f"{record['peak_mib']:,.0f}"
    return f"{record['tokens_per_s']:,.0f} ({peak})"


def parse_args(argv):
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
    p.add_argument("--repeat", type=int, default=5, help="timed steps at most")
    p.add_argument(
        "--seconds-per-length", type=float, default=3.0,
        help="no further timed step once the timed steps of a length took this long",
    )  # fmt: skip
    add_time_limit_arguments(p)
    p.add_argument("--no-autocast", action="store_true")
    p.add_argument("--lift-fla-guard", action="store_true")
    p.add_argument(
        "--profile", action="store_true",
        help="also profile two steps per length: the top kernels by device time per step",
    )  # fmt: skip
    p.add_argument("--json", help="also write every measurement here (rewritten after each row)")
    p.add_argument("--log", help="the child processes' output, appended here")
    p.add_argument("--single", metavar="ROW", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.single:
        measure_row(args.single, args)
        return

    import torch
    from harness import provenance

    device = torch.device(args.device)
    record = {
        **provenance(device),
        "command": "python benchmarks/mixer_throughput.py " + shlex.join(argv),
        "config": {
            "dim": args.dim, "heads": args.heads, "head_dim": args.dim // args.heads,
            "memory_depth": args.depth, "memory_expansion": args.expansion,
            "chunk": args.chunk, "tokens_per_batch": args.tokens,
            "precision": "fp32" if args.no_autocast else "bf16 autocast",
            "fla_guard_lifted": args.lift_fla_guard,
        },
        "rows": [],
    }  # fmt: skip
    print(
        f"device: {record['device']}, torch {torch.__version__}, D={args.dim}, "
        f"{args.heads} heads x {args.dim // args.heads}, memory depth {args.depth}, "
        f"expansion {args.expansion}, chunk {args.chunk}, {args.tokens} tokens per batch, "
        f"fwd+bwd, {record['config']['precision']}, {record['date']}, commit {record['commit']}"
    )
    if args.lift_fla_guard:
        print(
            "note: fla's Triton<3.7.1 Hopper guard on the gated backward was lifted for "
            "timing only (fla/GatedDeltaNet rows)"
        )
    print("\ntokens/s (peak MiB)\n")
    print("| row | " + " | ".join(f"T={T}" for T in args.lengths) + " |")
    print("|---" * (len(args.lengths) + 1) + "|", flush=True)
    limits = TimeLimits.from_args(args)
    for row in args.rows:
        timeout = limits.for_row(row)
        if timeout is not None and timeout < 5:
            records = [{"name": row, "T": T, "error": NO_TIME_LEFT} for T in args.lengths]
        else:
            records = run_row(row, args.lengths, argv, timeout, log=args.log)
        record["rows"].extend(records)
        label = row + (" (guard lifted)" if row.startswith("fla") and args.lift_fla_guard else "")
        print(f"| {label} | " + " | ".join(map(format_cell, records)) + " |", flush=True)
        if args.json:
            atomic_write_text(Path(args.json), json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
