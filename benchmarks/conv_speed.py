"""The memory's causal depthwise convolution alone: forward + backward time per backend.

    python benchmarks/conv_speed.py --device cuda                        # the layer's shape
    TRITON_INTERPRET=1 python benchmarks/conv_speed.py --device cpu --batch 1 --length 16 \
        --channels 8 --repeat 1                                            # CPU dry run
    python benchmarks/conv_speed.py --device cpu --batch 448 --length 20 --channels 192 \
        --rows onednn torch conv1d --dtypes fp32                  # the forecaster's shape

x [B, T, C] with C = 3 x heads x head_dim (the memory convolves q, k and v together), kernel
K, one call of `causal_depthwise_conv` and the backward of sum(y * g) per step. Rows:
`triton` (the fused kernels), `onednn` (oneDNN's depthwise convolution, the CPU path),
`torch` (K shifted multiply-adds, the path of other devices), and `conv1d`
(torch's grouped `F.conv1d` with left padding, what a PyTorch user writes; cuDNN on a GPU).
Prints one JSON object per row (median ms per step, effective GB/s of the forward's
x read and y write plus the backward's dy, x read and dx write) and writes `--json`.
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from harness import median_seconds, provenance

from titans_seq.ops.causal_conv import causal_depthwise_conv

ROWS = ("triton", "onednn", "torch", "conv1d")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def conv1d_step(x, weight, bias):
    """torch's grouped convolution, left-padded to be causal: [B, T, C] -> [B, T, C]."""
    K = weight.shape[1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), weight.unsqueeze(1), bias, groups=x.shape[2])
    return y.transpose(1, 2)


def measure(row: str, args, dtype: torch.dtype) -> dict:
    device = torch.device(args.device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    shape = (args.batch, args.length, args.channels)
    x = torch.randn(shape, generator=generator).to(device, dtype).requires_grad_(True)
    weight = torch.randn(args.channels, args.kernel, generator=generator).to(device)
    bias = torch.randn(args.channels, generator=generator).to(device)
    weight, bias = weight.to(dtype).requires_grad_(True), bias.to(dtype).requires_grad_(True)
    g = torch.randn(shape, generator=generator).to(device, dtype)

    def step():
        if row == "conv1d":
            y = conv1d_step(x, weight, bias)
        else:
            y, _ = causal_depthwise_conv(x, weight, bias, backend=row)
        (y * g).sum().backward()
        x.grad = weight.grad = bias.grad = None

    median, times = median_seconds(
        step,
        warmup=args.warmup,
        repeat=args.repeat,
        device=device,
        gpu_events=device.type == "cuda",
    )
    moved = 5 * x.numel() * x.element_size()  # x, y forward; dy, x, dx backward
    return {
        "name": row,
        "dtype": str(dtype).removeprefix("torch."),
        "shape": list(shape),
        "kernel": args.kernel,
        "ms": 1e3 * median,
        "gb_per_s": moved / median / 1e9,
        "repeats": len(times),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=2048)
    p.add_argument("--channels", type=int, default=3 * 16 * 64)
    p.add_argument("--kernel", type=int, default=4)
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=["bf16", "fp32"])
    p.add_argument(
        "--rows", nargs="+", choices=ROWS, default=None, help="default: those of the device"
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", default=None, help="write the rows and provenance here")
    args = p.parse_args(argv)
    if args.rows is None:  # oneDNN's form takes CPU tensors only
        cpu = torch.device(args.device).type == "cpu"
        args.rows = [row for row in ROWS if cpu or row != "onednn"]
    rows = []
    for dtype in args.dtypes:
        for row in args.rows:
            try:
                record = measure(row, args, DTYPES[dtype])
            except Exception as err:  # a row that cannot run on this device: say why
                record = {"name": row, "dtype": dtype, "error": f"{type(err).__name__}: {err}"}
            rows.append(record)
            print(json.dumps(record), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**provenance(args.device), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
