"""The causal depthwise convolution as two Triton kernels, for GPUs.

The forward reads each input once and writes y (the K shifted taps come from the same
cache lines); the backward computes the input gradient, the cache's gradient and per-tile
partial sums of the weight and bias gradients in one pass over dy and x, and the partial
sums are then added in PyTorch (deterministic: no atomics). The shifted multiply-add form
(`torch_backend.py`) passes over the whole [B, T, C] tensor about 19 times per training
step (each shifted multiply-add, product and sum is a kernel of its own); these kernels
read or write it 5 times (the backward's shifted re-reads of a tile hit the L1 cache).

Both kernels accumulate in fp32 and round once to the output dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# Tiles of 8 time steps x 128 channels (256 contiguous bytes a row in bf16). Compiled for
# sm_90 at K = 4 (bf16), the forward takes 86 registers with 4 warps; the backward without
# a cache (a training step) 126 with 8, so two of its blocks share a multiprocessor, and
# its time loop has no barrier (156 registers with a cache); none spills. 64 x 64 tiles
# took 255 registers and spilled in both. The backward walks strips of TILES tiles, so that
# its partial weight sums (one [K, C] row per strip) stay an eighth of what one row per
# tile would be.
BLOCK_T = 8
BLOCK_C = 128
TILES = 8
FORWARD_WARPS = 4
BACKWARD_WARPS = 8


@triton.jit
def _conv_fwd_kernel(
    x_ptr, cache_ptr, w_ptr, b_ptr, y_ptr, T, C,
    K: tl.constexpr, HAS_CACHE: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
):  # fmt: skip
    # x, y: [B, T, C]; cache: [B, K-1, C]; w: [C, K]; b: [C]; all contiguous. Program
    # (time tile, channel tile, batch).
    pid_t, pid_c, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    t0 = pid_t * BT
    tt = tl.arange(0, BT)  # time within the tile
    c = pid_c * BC + tl.arange(0, BC)
    tmask, cmask = t0 + tt < T, c < C
    acc = tl.zeros([BT, BC], dtype=tl.float32)
    acc += tl.load(b_ptr + c, mask=cmask, other=0.0).to(tl.float32)[None, :]
    for j in tl.static_range(K):
        w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)
        p = _load_padded(x_ptr, cache_ptr, b, t0, tt, c, tmask, cmask, T, C, j - (K - 1), K,
                         HAS_CACHE)  # fmt: skip
        acc += p * w[None, :]
    row = (b.to(tl.int64) * T + t0) * C  # the tile's first element, 64-bit
    m = tmask[:, None] & cmask[None, :]
    tl.store(y_ptr + row + tt[:, None] * C + c[None, :], acc.to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _load_padded(x_ptr, cache_ptr, b, t0, tt, c, tmask, cmask, T, C, shift, K: tl.constexpr,
                 HAS_CACHE: tl.constexpr):  # fmt: skip
    """p[b, t0 + tt + K - 1 + shift, c] of the padded inputs p = [cache; x] (zeros before x
    without a cache) as fp32 [BT, BC]: x[b, t0 + tt + shift] when that index is >= 0, else
    the cache row K - 1 + t0 + tt + shift. Offsets within the tile stay 32-bit (the tile's
    start is a 64-bit scalar), which keeps the address tiles out of the register budget."""
    s = tt + shift  # time relative to the tile start
    m = tmask[:, None] & cmask[None, :]
    base = x_ptr + (b.to(tl.int64) * T + t0) * C
    v = tl.load(base + s[:, None] * C + c[None, :], mask=m & (t0 + s >= 0)[:, None], other=0.0).to(
        tl.float32
    )
    if HAS_CACHE:
        # only the first tile reaches back into the cache (t0 + s < 0 needs t0 < K - 1)
        cbase = cache_ptr + (b.to(tl.int64) * (K - 1) + (K - 1) + t0) * C
        v += tl.load(
            cbase + s[:, None] * C + c[None, :], mask=m & (t0 + s < 0)[:, None], other=0.0
        ).to(tl.float32)
    return v


@triton.jit
def _conv_bwd_kernel(
    dy_ptr, x_ptr, cache_ptr, w_ptr, dx_ptr, dcache_ptr, dw_ptr, db_ptr, T, C, n_strips,
    K: tl.constexpr, HAS_CACHE: tl.constexpr, CACHE_GRAD: tl.constexpr, KP: tl.constexpr,
    BT: tl.constexpr, BC: tl.constexpr, TILES: tl.constexpr,
):  # fmt: skip
    # dy, dx: [B, T, C]; dcache: [B, K-1, C]; partial sums dw: [B * n_strips, K, C] and
    # db: [B * n_strips, C] fp32, one row per (batch, strip of TILES time tiles); KP: K
    # rounded up to a power of two. Program (strip, channel tile, batch): it walks its
    # strip's tiles, accumulating the weight and bias gradients element-wise ([BT, KP, BC]
    # and [BT, BC] in registers) and summing over time once at the end: a sum over the
    # tile's rows in every tile costs a shared-memory round trip and barrier per tap.
    pid_s, pid_c, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    tt = tl.arange(0, BT)
    c = pid_c * BC + tl.arange(0, BC)
    cmask = c < C
    taps = tl.arange(0, KP)
    # [BT, KP, BC] index tiles: time, tap, channel
    t3, j3, c3 = tt[:, None, None], taps[None, :, None], c[None, None, :]
    tap_mask = (taps < K)[None, :, None] & cmask[None, None, :]
    dw = tl.zeros([BT, KP, BC], dtype=tl.float32)
    db = tl.zeros([BT, BC], dtype=tl.float32)
    batch_row = b.to(tl.int64) * T * C  # the batch row's first element, 64-bit
    for tile in range(TILES):
        t0 = (pid_s * TILES + tile) * BT
        tmask = t0 + tt < T
        m = tmask[:, None] & cmask[None, :]
        dy_tile = dy_ptr + batch_row + t0 * C  # the tile's first element
        dy = tl.load(dy_tile + tt[:, None] * C + c[None, :], mask=m, other=0.0).to(tl.float32)
        db += dy
        # dw[c, j] = sum_t dy[t] p[t + j]: p3[t, j] = p at x's time t0 + t + j - (K - 1)
        s3 = t3 + j3 - (K - 1)  # time relative to the tile start
        m3 = (t0 + t3 < T) & tap_mask
        p3 = tl.load(
            x_ptr + batch_row + (t0 + s3) * C + c3, mask=m3 & (t0 + s3 >= 0), other=0.0
        ).to(tl.float32)
        if HAS_CACHE:
            if t0 < K - 1:  # only the first tile reaches back into the cache
                cache_row = cache_ptr + (b.to(tl.int64) * (K - 1) + (K - 1) + t0) * C
                p3 += tl.load(cache_row + s3 * C + c3, mask=m3 & (t0 + s3 < 0), other=0.0).to(
                    tl.float32
                )
        # dy again in the [BT, KP, BC] layout (L1 hits): broadcasting the 2-D tile into it
        # would convert layouts through shared memory
        dy3 = tl.load(dy_tile + t3 * C + c3 + j3 * 0, mask=m3, other=0.0).to(tl.float32)
        dw += dy3 * p3
        # dx[t] = sum_j w_j dy[t + K - 1 - j]
        dx = tl.zeros([BT, BC], dtype=tl.float32)
        for j in tl.static_range(K):
            w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)
            ahead = tt + (K - 1 - j)
            dy_ahead = tl.load(
                dy_tile + ahead[:, None] * C + c[None, :],
                mask=m & (t0 + ahead < T)[:, None],
                other=0.0,
            ).to(tl.float32)
            dx += dy_ahead * w[None, :]
        dx_tile = dx_ptr + batch_row + t0 * C
        tl.store(dx_tile + tt[:, None] * C + c[None, :], dx.to(dx_ptr.dtype.element_ty), mask=m)
    dw = tl.sum(dw, axis=0)  # [KP, BC]
    db = tl.sum(db, axis=0)  # [BC]
    part = (b * n_strips + pid_s).to(tl.int64)  # this program's row of the partial sums
    tl.store(db_ptr + part * C + c, db, mask=cmask)
    tl.store(
        dw_ptr + (part * K + taps[:, None]) * C + c[None, :],
        dw,
        mask=(taps < K)[:, None] & cmask[None, :],
    )
    if CACHE_GRAD:
        if pid_s == 0:
            # cache row r (padded position r < K - 1): sum_{j <= r} w_j dy[r - j]
            r = tl.arange(0, KP)
            rmask = r < K - 1
            dc = tl.zeros([KP, BC], dtype=tl.float32)
            first = dy_ptr + b.to(tl.int64) * T * C
            for j in tl.static_range(K):
                w = tl.load(w_ptr + c * K + j, mask=cmask, other=0.0).to(tl.float32)
                back = r - j
                bm = rmask & (back >= 0) & (back < T)
                dyb = tl.load(
                    first + back[:, None] * C + c[None, :],
                    mask=bm[:, None] & cmask[None, :],
                    other=0.0,
                ).to(tl.float32)
                dc += dyb * w[None, :]
            tl.store(
                dcache_ptr + b.to(tl.int64) * (K - 1) * C + r[:, None] * C + c[None, :],
                dc.to(dcache_ptr.dtype.element_ty),
                mask=rmask[:, None] & cmask[None, :],
            )


def _grid(B: int, T: int, C: int, tiles: int = 1):
    return (triton.cdiv(max(T, 1), BLOCK_T * tiles), triton.cdiv(C, BLOCK_C), B)


class TritonCausalConv(torch.autograd.Function):
    """x [B, T, C], cache [B, K-1, C] or None, weight [C, K], bias [C] (all one dtype)
    -> y [B, T, C]."""

    @staticmethod
    def forward(ctx, x, cache, weight, bias):
        B, T, C = x.shape
        K = weight.shape[1]
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        cache = None if cache is None or K == 1 else cache.contiguous()
        y = torch.empty_like(x)
        if T > 0:
            _conv_fwd_kernel[_grid(B, T, C)](
                x, x if cache is None else cache, weight, bias, y, T, C,
                K=K, HAS_CACHE=cache is not None, BT=BLOCK_T, BC=BLOCK_C, num_warps=FORWARD_WARPS,
            )  # fmt: skip
        ctx.has_cache = cache is not None
        ctx.save_for_backward(x, cache, weight)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, cache, weight = ctx.saved_tensors
        B, T, C = x.shape
        K = weight.shape[1]
        dy = dy.contiguous()
        n_strips = triton.cdiv(max(T, 1), BLOCK_T * TILES)
        cache_grad = ctx.has_cache and ctx.needs_input_grad[1]
        dx = torch.empty_like(x)
        dcache = torch.empty_like(cache) if cache_grad else None
        dw = x.new_empty(B * n_strips, K, C, dtype=torch.float32)
        db = x.new_empty(B * n_strips, C, dtype=torch.float32)
        if T > 0:
            _conv_bwd_kernel[_grid(B, T, C, TILES)](
                dy, x, x if cache is None else cache, weight, dx, x if dcache is None else dcache,
                dw, db, T, C, n_strips,
                K=K, HAS_CACHE=cache is not None, CACHE_GRAD=cache_grad,
                KP=triton.next_power_of_2(K), BT=BLOCK_T, BC=BLOCK_C, TILES=TILES,
                num_warps=BACKWARD_WARPS,
            )  # fmt: skip
        else:
            dw.zero_()
            db.zero_()
            if dcache is not None:
                dcache.zero_()
        dweight = dw.sum(0).t().to(weight.dtype)  # [C, K]
        dbias = db.sum(0).to(weight.dtype)
        return dx, dcache, dweight, dbias


def causal_conv_triton(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, cache: torch.Tensor | None = None
) -> torch.Tensor:
    """As `causal_conv_reference` (x [B, T, C], weight [C, K], bias [C], cache
    [B, K-1, C] or None -> y [B, T, C]), on the Triton kernels; fp32 accumulation."""
    return TritonCausalConv.apply(x, cache, weight.to(x.dtype), bias.to(x.dtype))
