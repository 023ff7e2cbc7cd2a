"""Launch-side constants of the memory kernels, shared by their launchers and the offline
compile: warps, stages, padded tile sizes, the compile-time constants every kernel takes."""

from __future__ import annotations

import torch
import triton

ACT_CODES = {"silu": 0, "gelu": 1}
# One software-pipelining stage: with more, Triton's pipeliner may prefetch the state tiles
# of the next segment before the previous segment's stores to them land (seen with
# Triton <= 3.2: silently wrong results), and the kernels gain nothing from it (each segment
# depends on the last).
NUM_STAGES = 1


def num_warps(D: int, HID: int) -> int:
    """Warps per program for padded tiles D x HID (both launchers and the offline compile)."""
    return 4 if D * HID <= 32 * 32 else 8


@triton.jit
def _probe():
    """A kernel that is never launched: its type says whether Triton interprets."""
    pass


def interpreter_active() -> bool:
    """Whether Triton kernels run in the CPU interpreter (TRITON_INTERPRET=1 at import)."""
    return type(_probe).__name__ == "InterpretedFunction"


def pow2(n: int) -> int:
    """A tile size for n: the next power of two, at least 16 (what `tl.dot` takes)."""
    return max(16, 1 << (max(n, 1) - 1).bit_length())


def launch_constants(
    chunk_size, d, hdim, depth, eta, alpha, inner_grad_clip, activation, input_precision
) -> dict:
    """The compile-time constants and launch options every memory kernel takes: chunk and
    padded tiles, depth, which gates and the clip are present, exact (unpadded) tiles,
    activation, dot precision, warps and stages."""
    D, HID = pow2(d), pow2(hdim)
    return dict(
        C=chunk_size,
        D=D,
        HID=HID,
        DEPTH=depth,
        HAS_ETA=eta is not None,
        HAS_ALPHA=alpha is not None,
        HAS_CLIP=inner_grad_clip is not None,
        EXACT=(D, HID) == (d, hdim),
        ACT=ACT_CODES[activation],
        PREC=input_precision,
        num_warps=num_warps(D, HID),
        num_stages=NUM_STAGES,
    )


def second_layer(per_layer, depth: int):
    """A kernel's layer-2 argument from a per-layer tuple: its second tensor at depth 2,
    its first at depth 1 (where the kernels never read it: a pointer that stands in)."""
    return per_layer[1] if depth == 2 else per_layer[0]


def two_slots(x: torch.Tensor) -> torch.Tensor:
    """[2, *x.shape] fp32, contiguous, with x in slot 0: a state buffer the kernels read and
    write by turns."""
    out = x.new_empty(2, *x.shape, dtype=torch.float32)
    out[0].copy_(x)
    return out


def token_stride(tensors) -> int | None:
    """The token stride TS that the [B, T, H, *] tensors (None skipped) share as token ranges
    of [B, TS, H, *] buffers: each batch row dense (x[b] contiguous) and x.stride(0) =
    TS x (H x ...). A contiguous tensor has TS = T, a slice x[:, t0:t1] of a contiguous one
    the full length. None where they have no common one (then the kernels need copies).
    With B = 1 the batch stride is never used: T."""
    xs = [x for x in tensors if x is not None]
    B, T = xs[0].shape[:2]
    if not all(x.shape[:2] == (B, T) and x[0].is_contiguous() for x in xs):
        return None
    if B == 1:
        return T
    strides = set()
    for x in xs:
        row = x[0, 0].numel()  # one token's elements
        if x.stride(0) % row:
            return None
        strides.add(x.stride(0) // row)
    if len(strides) != 1:
        return None
    ts = strides.pop()
    return ts if ts >= T else None
