"""Microseconds per chunk step of the Triton memory kernels, and their error, on one GPU.

    python benchmarks/triton_chunk_step.py                          # on a GPU: the default probe
    python benchmarks/triton_chunk_step.py --json runs/chunk_step.json
    TRITON_INTERPRET=1 python benchmarks/triton_chunk_step.py --device cpu --shapes 1x40 \\
        --heads 2 --head-dim 16 --warmup 0 --repeat 1               # a smoke run on CPU

The grid is one program per (batch, head) walking the T / C chunk steps in order, so the
time of one call divided by its chunk steps is the cost of one step of the sequential chain:
the figure the offline instruction counts (`benchmarks/triton_resources.py`) predict. Rows:
every (B x T shape, dot precision, backward) of the memory op alone (`lmm_memory`,
backend "triton") on bf16 q/k/v [B, T, H, d] with gates and depth-2 fp32 weights:

* state: where the forward kernel keeps the running state between chunk steps, "global"
  (global memory, `TritonOptions(state_in_registers=False)`) or "registers" (True; the
  default at these bf16 dots and 64 x 64 tiles);
* forward: one call without autograd (the final state not returned);
* forward+backward: one call under autograd and the backward of a loss on y;
* error: the relative Frobenius error of y and of every gradient (q, k, v, the three gates,
  the weights) of the Triton op against the "torch" backend, both on the same inputs in
  fp32 (the bf16 values, widened: the output's own bf16 rounding, about 2e-3, would
  otherwise hide the dots' error); the largest over them, and which; measured once per
  (shape, precision) at the first backward. The bf16-operand path's precision on the GPU
  is this column.

Times are medians of --repeat calls after --warmup (CUDA events on a GPU), peak memory the
allocator's peak over the timed forward+backward calls. Writes a Markdown table to stdout
and, with --json, every row.
"""

from __future__ import annotations

import argparse
import json
import math
import platform

from harness import median_seconds

SHAPES = ("8x2048", "1x16384")
PRECISIONS = ("bf16", "tf32", "ieee")
# the backward forms `TritonOptions.backward` takes: the kernels ("split") or each checkpoint
# group recomputed by the PyTorch chunked form ("torch")
BACKWARDS = ("split", "torch")
STATES = ("global", "registers")


def make_inputs(B: int, T: int, H: int, d: int, depth: int, device: str, seed: int = 0):
    """bf16 q, k, v [B, T, H, d] (q, k unit rows), fp32 gates theta, eta, alpha [B, T, H] in
    the mixers' ranges, fp32 weights [H, out, in] per layer (hidden width d)."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    q, k = (torch.nn.functional.normalize(randn(B, T, H, d), dim=-1) for _ in range(2))
    v = randn(B, T, H, d)
    theta = torch.sigmoid(randn(B, T, H)) * 0.1
    eta = torch.sigmoid(randn(B, T, H))
    alpha = torch.sigmoid(randn(B, T, H)) * 0.05
    weights = tuple(randn(H, d, d) / d**0.5 for _ in range(depth))
    tokens = [x.to(device=device, dtype=torch.bfloat16) for x in (q, k, v)]
    gates = [x.to(device) for x in (theta, eta, alpha)]
    return tokens + gates, [w.to(device) for w in weights]


def call(
    inputs, weights, backend: str, args, precision=None, backward=None, grad=True, state="global"
):
    """One call of the op: (y, the gradients of sum(y * ramp) w.r.t. every input and weight)
    or (y, None) without autograd."""
    import torch

    from titans_seq.ops.lmm import lmm_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    options = None
    if backend == "triton":
        options = TritonOptions(
            dot_precision=precision, backward=backward, state_in_registers=state == "registers"
        )
    leaves = [x.detach().requires_grad_(grad) for x in inputs]
    wleaves = tuple(w.detach().requires_grad_(grad) for w in weights)
    d = inputs[0].shape[-1]
    with torch.set_grad_enabled(grad):
        y, _ = lmm_memory(
            *leaves, wleaves, chunk_size=args.chunk, backend=backend,
            inner_grad_clip=2.0 * d**0.5, triton_options=options,
        )  # fmt: skip
        if not grad:
            return y, None
        ramp = torch.linspace(-1, 1, y.numel(), device=y.device).view_as(y)
        grads = torch.autograd.grad((y.float() * ramp).sum(), [*leaves, *wleaves])
    return y, grads


GRAD_NAMES = ("dq", "dk", "dv", "dtheta", "deta", "dalpha", "dW1", "dW2")


def largest_error(
    inputs, weights, args, precision: str, backward: str, state: str
) -> tuple[float, str]:
    """The largest relative Frobenius error over y and every gradient of the Triton op
    against the torch backend, both on the inputs widened to fp32, and where it is."""
    wide = [x.float() for x in inputs]
    y_ref, g_ref = call(wide, weights, "torch", args)
    y, g = call(wide, weights, "triton", args, precision, backward, state=state)
    worst, where = 0.0, "y"
    for name, a, b in zip(("y", *GRAD_NAMES), (y, *g), (y_ref, *g_ref)):
        err = ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()
        if not math.isfinite(err) or err > worst:
            worst, where = err, name
    return worst, where


def step_seconds(fn, args) -> float:
    """Median seconds of `fn` (CUDA events on a GPU: the steps take microseconds)."""
    seconds, _ = median_seconds(
        fn, warmup=args.warmup, repeat=args.repeat, device=args.device, gpu_events=True
    )
    return seconds


def measure(shape: str, precision: str, backward: str, state: str, args, error: bool) -> dict:
    import torch

    B, T = map(int, shape.split("x"))
    inputs, weights = make_inputs(B, T, args.heads, args.head_dim, args.depth, args.device)
    steps = math.ceil(T / args.chunk)
    row = dict(B=B, T=T, precision=precision, backward=backward, state=state, chunk_steps=steps)
    forward = step_seconds(
        lambda: call(inputs, weights, "triton", args, precision, backward, False, state), args
    )
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    both = step_seconds(
        lambda: call(inputs, weights, "triton", args, precision, backward, state=state), args
    )
    row.update(
        forward_ms=forward * 1e3,
        forward_us_per_step=forward / steps * 1e6,
        train_ms=both * 1e3,
        train_us_per_step=both / steps * 1e6,
        train_tokens_per_s=B * T / both,
        peak_mib=torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
    )
    if error:
        row["error"], row["error_at"] = largest_error(
            inputs, weights, args, precision, backward, state
        )
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| B x T | dots | backward | state | fwd us/step | fwd+bwd us/step | fwd+bwd tokens/s "
        "| peak MiB | largest rel. error (at) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "failed" in r:
            lines.append(
                f"| {r['B']}x{r['T']} | {r['precision']} | {r['backward']} | {r['state']} | "
                f"failed: {r['failed']} | | | | |"
            )
            continue
        peak = "-" if r["peak_mib"] is None else f"{r['peak_mib']:,.0f}"
        err = f"{r['error']:.1e} ({r['error_at']})" if "error" in r else "-"
        lines.append(
            f"| {r['B']}x{r['T']} | {r['precision']} | {r['backward']} | {r['state']} | "
            f"{r['forward_us_per_step']:,.1f} | {r['train_us_per_step']:,.1f} | "
            f"{r['train_tokens_per_s']:,.0f} | {peak} | {err} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), help="B x T")
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--backwards", nargs="+", default=["split"], choices=BACKWARDS)
    p.add_argument("--states", nargs="+", default=list(STATES), choices=STATES)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-error", action="store_true", help="skip the error column")
    p.add_argument("--json", help="write every row here")
    args = p.parse_args(argv)

    import torch
    import triton

    device = args.device
    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(device)
    else:
        name = f"CPU ({platform.machine()}), Triton interpreter"
    print(
        f"device: {name}; torch {torch.__version__}; triton {triton.__version__}; "
        f"H = {args.heads} heads x d = {args.head_dim}, depth {args.depth}, chunk {args.chunk}"
    )
    rows = []
    for shape in args.shapes:
        for precision in args.precisions:
            for state in args.states:
                for i, backward in enumerate(args.backwards):
                    error = not args.no_error and i == 0
                    try:
                        row = measure(shape, precision, backward, state, args, error)
                    except Exception as err:  # a kernel that fails to build: reported
                        B, T = map(int, shape.split("x"))
                        row = dict(B=B, T=T, precision=precision, backward=backward, state=state)
                        row["failed"] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(dict(device=name, torch=torch.__version__, rows=rows), handle, indent=1)


if __name__ == "__main__":
    main()
