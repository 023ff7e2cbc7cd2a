"""The convolution's Triton kernels compiled ahead of time for a GPU that is not here
(`triton.compile(ASTSource(...), target=GPUTarget("cuda", arch, 32))`), with the launch
options the launcher uses: what a first GPU run would meet (registers, spills)."""

from __future__ import annotations


def compile_kernel(
    kernel: str, io_dtype: str = "bf16", K: int = 4, arch: int = 90, cache: bool = True
):
    """kernel "forward" or "backward", inputs and outputs in `io_dtype` ("bf16", "fp16",
    "fp32"), kernel size K, for CUDA sm_`arch`; cache: with a streaming cache (and, in the
    backward, its gradient), else the form a training step without one runs."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import triton_kernels as tk

    tiles = dict(K=K, HAS_CACHE=cache, BT=tk.BLOCK_T, BC=tk.BLOCK_C)
    if kernel == "forward":
        fn, constexprs, warps = tk._conv_fwd_kernel, tiles, tk.FORWARD_WARPS
    elif kernel == "backward":
        extra = dict(CACHE_GRAD=cache, KP=triton.next_power_of_2(K), TILES=tk.TILES)
        fn, constexprs, warps = tk._conv_bwd_kernel, tiles | extra, tk.BACKWARD_WARPS
    else:
        raise ValueError(f"kernel must be 'forward' or 'backward', got {kernel!r}")
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in ("dw_ptr", "db_ptr"):  # the fp32 partial sums
            signature[name] = "*fp32"
        elif name.endswith("_ptr"):
            signature[name] = f"*{io_dtype}"
        else:
            signature[name] = "i32"
    source = ASTSource(fn, signature, constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})
