"""The Triton memory kernels compiled ahead of time for Hopper (sm_90), on any machine.

    python benchmarks/triton_resources.py                     # the d=64 x hidden 64 kernels
    python benchmarks/triton_resources.py --maximal           # the largest the guard accepts
    python benchmarks/triton_resources.py --all               # every variant the guard accepts
    python benchmarks/triton_resources.py --tiles 64x128      # a rejected one, to see why
    python benchmarks/triton_resources.py --kernels forward forward-registers  # variants

Per variant: registers and spill stack per thread, shared memory per block (against the
227 KB of sm_90), static SASS counts of the kernel's code (instructions, spill stores STL,
spill loads LDL), and those of its segment loop: the instructions a warp executes per chunk
step, and the spill stores and loads among them.
No GPU is needed (titans_seq/ops/lmm/triton/offline.py): this is the inner loop of kernel
work on a CPU machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

from titans_seq.ops.lmm.triton.offline import (  # noqa: E402
    KERNELS,
    SHARED_MEMORY_LIMIT,
    VARIANT_KERNELS,
    KernelVariant,
    accepted_variants,
    compile_variant,
    maximal_variants,
    resource_usage,
)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--all", action="store_true", help="every variant the support guard accepts")
    p.add_argument(
        "--maximal", action="store_true", help="the accepted variants that bound the others"
    )
    p.add_argument("--tiles", nargs="*", default=["64x64"], help="DxHID tiles (depth 2)")
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--precision", default="ieee", choices=("ieee", "tf32", "tf32x3", "bf16"))
    p.add_argument("--arch", type=int, default=90)
    p.add_argument(
        "--kernels",
        nargs="+",
        default=list(KERNELS),
        choices=KERNELS + VARIANT_KERNELS,
        help="kernels to compile (with --tiles); the option variants are not in the default",
    )
    args = p.parse_args(argv)

    if args.all or args.maximal:
        variants = accepted_variants()
        variants = maximal_variants(variants) if args.maximal else variants
        variants = [dataclasses.replace(v, precision=args.precision) for v in variants]
    else:
        variants = [
            KernelVariant(kernel, *map(int, tile.split("x")), 2, args.chunk, args.precision)
            for tile in args.tiles
            for kernel in args.kernels
        ]
    limit = SHARED_MEMORY_LIMIT[args.arch]
    print(f"sm_{args.arch}, shared memory limit {limit // 1024} KB; q/k/v in bf16, state fp32")
    print(
        "| kernel | depth | D x HID | chunk | dots | registers | spill stack B | shared KB "
        "| fits | SASS instr. | STL | LDL | per chunk step | STL per step | LDL per step "
        "| compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for v in variants:
        start = time.perf_counter()
        usage = resource_usage(compile_variant(v, args.arch))
        seconds = time.perf_counter() - start
        fits = "yes" if usage["shared_bytes"] <= limit else "**no**"
        print(
            f"| {v.kernel} | {v.depth} | {v.D} x {v.HID} | {v.chunk} | {v.precision} "
            f"| {usage['registers']} | {usage['spill_stack_bytes']:,} "
            f"| {usage['shared_bytes'] / 1024:.0f} | {fits} | {usage['instructions']:,} "
            f"| {usage['spill_stores']:,} | {usage['spill_loads']:,} "
            f"| {usage['loop_instructions']:,} | {usage['loop_spill_stores']:,} "
            f"| {usage['loop_spill_loads']:,} | {seconds:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
