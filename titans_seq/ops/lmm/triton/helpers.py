"""`@triton.jit` helpers that the forward and backward kernels share (inlined by Triton).

What both kernels compute for a segment of C tokens, written once: the matrix product at
the chosen operand precision (`mm`), the memory MLP's activation and its derivatives, the
inner forward/backward at the gradient weights (one layer's weights at a time), the squared
inner-gradient norms and the clip, and the within-segment decay products from cumulative
log gates. Where an option is off (depth 1, no momentum, no forgetting, no clip)
a helper still returns every name, filled with a stand-in of the right shape that the
caller never reads (Triton drops the dead values), so call sites need no branches.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def mm(a, b, PREC: tl.constexpr):
    """a @ b with fp32 accumulation. PREC "ieee" / "tf32" / "tf32x3": fp32 operands at that
    tl.dot input precision; "bf16": the operands rounded to bfloat16 first (tensor cores at
    full rate, ~3 significant digits per operand), the product and the state still fp32."""
    if PREC == "bf16":
        out = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
    else:
        out = tl.dot(a, b, input_precision=PREC)
    return out


@triton.jit
def mm_by_state(a, w, PREC: tl.constexpr, FLIP: tl.constexpr):
    """a @ w for a chunk tile a [C, n] (one row per token) and a state tile w [n, m].
    FLIP: computed as (w^T a^T)^T, so that the state tile is the left operand of the
    tensor-core product. With C = 16 rows Triton lays the warps of `mma` side by side along
    the columns, and every warp then holds the whole left operand; with the state tile on
    the left the warps split it by rows instead. Whether that pays is ptxas's register
    allocation, so each call site chooses by measurement (sm_90, benchmarks/results/NOTES.md): the
    sequential backward's carried and inner products with bf16 or tf32 dots (131 -> 63
    spill stores per chunk step at bf16), the retrieval pass's with tf32 dots only. Not
    for fp32 "ieee" dots, which are FMA loops without `mma` layouts (there it costs
    spills)."""
    if FLIP:
        out = tl.trans(mm(tl.trans(w), tl.trans(a), PREC))
    else:
        out = mm(a, w, PREC)
    return out


@triton.jit
def act(z, ACT: tl.constexpr):
    """The memory MLP's activation: SiLU (ACT 0) or exact GELU (ACT 1)."""
    if ACT == 0:
        out = z * tl.sigmoid(z)
    else:
        out = 0.5 * z * (1.0 + tl.math.erf(z * 0.7071067811865476))
    return out


@triton.jit
def dact(z, ACT: tl.constexpr):
    """d act / dz."""
    if ACT == 0:
        s = tl.sigmoid(z)
        out = s * (1.0 + z * (1.0 - s))
    else:
        cdf = 0.5 * (1.0 + tl.math.erf(z * 0.7071067811865476))
        pdf = tl.exp(-0.5 * z * z) * 0.3989422804014327
        out = cdf + z * pdf
    return out


@triton.jit
def ddact(z, ACT: tl.constexpr):
    """d^2 act / dz^2."""
    if ACT == 0:
        s = tl.sigmoid(z)
        out = s * (1.0 - s) * (2.0 + z * (1.0 - 2.0 * s))
    else:
        pdf = tl.exp(-0.5 * z * z) * 0.3989422804014327
        out = pdf * (2.0 - z * z)
    return out


@triton.jit
def opaque_zero(seg):
    """0, from a segment index the compiler cannot prove non-negative. Index tiles built
    from it inside the segment loop are rebuilt every step: loop-invariant code motion
    would otherwise hoist them out of the loop, where, held through every step in each
    layout they are used in, they take registers and on sm_90 cause spill stores in every
    chunk step (benchmarks/results/NOTES.md). Rebuilding them costs a few integer instructions."""
    return tl.where(seg < 0, 1, 0)


@triton.jit
def opaque_index(x, PTX: tl.constexpr):
    """x (int32), through an inline-PTX identity when PTX (compiled for a GPU; the
    interpreter has no inline assembly). The compiler cannot see that the result is affine
    in the loop counter, so it does not strength-reduce what is derived from it (segment
    offsets, addresses) into induction variables carried from step to step, which ptxas
    spilled at the loop's back edge; those values are then computed from it in each step.
    Sequential backward, sm_90: 49 -> 10 spill stores per step with tf32 dots, 216 -> 195
    with fp32 dots; with bf16 dots 5 -> 8 alone, 4 -> 0 with the step's token tiles
    rebuilt late in the step (benchmarks/results/NOTES.md)."""
    if PTX:
        x = tl.inline_asm_elementwise(
            "mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1
        )
    return x


@triton.jit
def step_tiles(
    seg, d, hdim, C: tl.constexpr, D: tl.constexpr, HID: tl.constexpr, EXACT: tl.constexpr
):
    """The index tiles of one step of a segment loop, rebuilt from `opaque_zero(seg)` so
    that they are not hoisted out of the loop: the row, head-dim and hidden indices ([C],
    [D], [HID]), the causal mask [C, C] and `state_tiles`' offsets and masks."""
    zero = opaque_zero(seg)
    rows = tl.arange(0, C) + zero
    cd = tl.arange(0, D) + zero
    ch = tl.arange(0, HID) + zero
    causal = rows[:, None] >= rows[None, :]
    p1, m1, p2, m2 = state_tiles_at(seg, d, hdim, D, HID, EXACT)
    return rows, cd, ch, causal, p1, m1, p2, m2


@triton.jit
def state_tiles_at(key, d, hdim, D: tl.constexpr, HID: tl.constexpr, EXACT: tl.constexpr):
    """`state_tiles`, built where a step uses them, from `opaque_zero(key)`: a different
    key per use site (a value only known at run time) keeps the compiler from merging the
    sites' copies into one held from the first use to the last. The sequential backward
    held its offset tiles through the whole chunk step: rebuilt at each of its three
    uses, its spill stores per step went from 63 to 16 (sm_90, bf16 dots;
    benchmarks/results/NOTES.md)."""
    zero = opaque_zero(key)
    p1, m1, p2, m2 = state_tiles(d, hdim, D, HID, EXACT)
    return p1 + zero, m1, p2 + zero, m2


@triton.jit
def state_tiles(d, hdim, D: tl.constexpr, HID: tl.constexpr, EXACT: tl.constexpr):
    """Element offsets and masks of the two layers' state tiles: layer 1 [HID, D] over a
    [hdim, d] matrix, layer 2 [D, HID] over [d, hdim]. EXACT (d == D and hdim == HID, no
    padding): the strides are compile-time constants and the masks constant true, so an
    address is one register per thread plus immediate offsets; with runtime strides every
    offset and mask element is a register the whole loop holds (ptxas then spills)."""
    cd = tl.arange(0, D)
    ch = tl.arange(0, HID)
    if EXACT:
        p1 = ch[:, None] * D + cd[None, :]
        p2 = cd[:, None] * HID + ch[None, :]
        m1 = tl.full([HID, D], 1, tl.int1)
        m2 = tl.full([D, HID], 1, tl.int1)
    else:
        p1 = ch[:, None] * d + cd[None, :]
        p2 = cd[:, None] * hdim + ch[None, :]
        m1 = (ch[:, None] < hdim) & (cd[None, :] < d)
        m2 = (cd[:, None] < d) & (ch[None, :] < hdim)
    return p1, m1, p2, m2


@triton.jit
def segment_weights(w_ptr, g0_ptr, p, m, sep, HAS_G0: tl.constexpr):
    """One layer's gradient weights for a segment: the tile at `w_ptr` (its entry weights),
    or, where `sep` is 1 (HAS_G0: the first segment of a call or range that starts inside a
    chunk), the separate ones at `g0_ptr`. p, m: the tile's element offsets and mask."""
    w = tl.load(w_ptr + p, mask=m & (p * 0 + sep == 0), other=0.0)
    if HAS_G0:
        w += tl.load(g0_ptr + p, mask=m & (p * 0 + sep == 1), other=0.0)
    return w


@triton.jit
def inner_hidden(k, wg1, DEPTH: tl.constexpr, ACT: tl.constexpr, PREC: tl.constexpr):
    """The memory MLP's first layer at the gradient weights, for every token of a segment.

    k: [C, D]; wg1: [HID, D]. Returns (z1 [C, HID] the pre-activation, a1 = act(z1), the
    second layer's input, and g1p = act'(z1)); depth 1: all three are z1 (the output)."""
    z1 = mm(k, tl.trans(wg1), PREC)
    if DEPTH == 1:
        a1, g1p = z1, z1
    else:
        a1 = act(z1, ACT)
        g1p = dact(z1, ACT)
    return z1, a1, g1p


@triton.jit
def inner_errors(z1, a1, g1p, v, wg2, DEPTH: tl.constexpr, PREC: tl.constexpr):
    """The layers' errors of the inner loss ||f(k) - v||^2, given `inner_hidden`'s values.

    v: [C, D]; wg2: [D, HID] (read at depth 2 only). Returns (e1 = d2 wg2 [C, HID], d1
    [C, HID], d2 [C, D]): the token's inner gradient is d1 k^T (+ d2 a1^T at depth 2).
    Taken apart from `inner_hidden` so that a kernel holds one layer's weights at a time."""
    if DEPTH == 1:
        d1 = 2.0 * (z1 - v)
        e1, d2 = d1, d1
    else:
        d2 = 2.0 * (mm(a1, tl.trans(wg2), PREC) - v)
        e1 = mm(d2, wg2, PREC)
        d1 = e1 * g1p
    return e1, d1, d2


@triton.jit
def squared_norms(k, a1, d1, d2, DEPTH: tl.constexpr):
    """Per-token ||u||^2 = sum over layers of |delta|^2 |input|^2 (each layer's gradient is
    rank one). Returns (|k|^2, |d1|^2, |a1|^2, |d2|^2, ||u||^2), each [C]."""
    k2 = tl.sum(k * k, 1)
    n1 = tl.sum(d1 * d1, 1)
    if DEPTH == 1:
        a2, n2 = k2 * 0.0, k2 * 0.0
        sq = n1 * k2
    else:
        a2 = tl.sum(a1 * a1, 1)
        n2 = tl.sum(d2 * d2, 1)
        sq = n1 * k2 + n2 * a2
    return k2, n1, a2, n2, sq


@triton.jit
def clipped_rate(theta, sq, clip, HAS_CLIP: tl.constexpr):
    """theta * min(1, clip / ||u||) per token, and the intermediates its backward reads:
    (lr, the factor min(1, clip / ||u||), ||u||, max(||u||, 1e-12), clip / that)."""
    return rate_from_norm(theta, tl.sqrt(sq), clip, HAS_CLIP)


@triton.jit
def rate_from_norm(theta, nrm, clip, HAS_CLIP: tl.constexpr):
    """`clipped_rate` given the norm ||u|| [C] itself (not read without a clip)."""
    if HAS_CLIP:
        nrm_c = tl.maximum(nrm, 1e-12)
        ratio = clip / nrm_c
        factor = tl.minimum(ratio, 1.0)
    else:
        factor = theta * 0.0 + 1.0
        nrm, nrm_c, ratio = factor, factor, factor
    return theta * factor, factor, nrm, nrm_c, ratio


@triton.jit
def segment_decays(
    alpha_ptr,
    eta_ptr,
    tok,
    rmask,
    causal,
    C: tl.constexpr,
    HAS_ALPHA: tl.constexpr,
    HAS_ETA: tl.constexpr,
):
    """The decay products inside a segment, from cumulative log gates (differences <= 0, so
    exp never overflows; padded rows get alpha 0 and eta 1 and never reach a valid row).

    Returns (alpha [C], eta [C], Da [C, C] with Da[t, s] = prod_{s<j<=t} (1 - alpha_j),
    A [C] = prod_{j<=t} (1 - alpha_j), De, P: the same for eta, M = Da De, bb = Da P)."""
    if HAS_ALPHA:
        alpha = tl.load(alpha_ptr + tok, mask=rmask, other=0.0).to(tl.float32)
        lac = tl.cumsum(tl.log(tl.maximum(1.0 - alpha, 1e-30)), 0)
        Da = tl.exp(tl.where(causal, lac[:, None] - lac[None, :], float("-inf")))
        A = tl.exp(lac)
    else:
        Da = tl.where(causal, 1.0, 0.0)
        A = tl.full([C], 1.0, tl.float32)
        alpha = A * 0.0
    if HAS_ETA:
        eta = tl.load(eta_ptr + tok, mask=rmask, other=1.0).to(tl.float32)
        lec = tl.cumsum(tl.log(tl.maximum(eta, 1e-30)), 0)
        De = tl.exp(tl.where(causal, lec[:, None] - lec[None, :], float("-inf")))
        P = tl.exp(lec)
        # M = Da De as an fp32 FMA dot ("ieee", never a tensor-core product): exact whatever
        # the dot precision, and it keeps this C x C product from steering the layout of
        # the tensor-core products (the regeneration kernel, which has no other C x C
        # product, otherwise replicated its [C, h] tiles on every warp: 3,441 SASS
        # instructions and 35 spill stores per step at d = h = 64 for sm_90, 1,746 and 0
        # without). Written as a dot, not as the broadcast-and-sum it once was: Triton
        # rewrites that into a dot of its own choosing, which Triton 3.6 on an H100 computed
        # at tf32 precision (relative errors ~1e-3 in float32, measured;
        # benchmarks/results/NOTES.md)
        M = tl.dot(Da, De, input_precision="ieee")
        bb = tl.sum(Da * P[None, :], 1)
    else:
        eta, De, P, M, bb = A, Da, A, Da, A
    return alpha, eta, Da, A, De, P, M, bb


@triton.jit
def log_gate_gradient(dD, D, dprod, prod, rmask, rows):
    """d loss / d log g_t of a gate whose decays are D[s, r] = prod_{r<j<=s} g_j [C, C] and
    prod[s] = prod_{j<=s} g_j [C], given their gradients dD and dprod.

    Summed as sum_{s>=t, r<t} dD[s, r] D[s, r] + sum_{s>=t} dprod[s] prod[s]: every term
    holds the factor g_t, so a tiny gate gives a small result without cancellation (the
    equal form "row sums minus column sums, then a reverse cumulative sum" subtracts O(1)
    numbers, and dividing by a gate near 0 then magnifies float32 rounding). Rows and
    columns outside `rmask` (padding) are left out."""
    valid = rmask[:, None] & rmask[None, :]
    Y = tl.where(valid, dD * D, 0.0)
    below = tl.cumsum(Y, 0, reverse=True)  # [t, r] = sum_{s>=t} Y[s, r]
    rect = tl.sum(tl.where(rows[None, :] < rows[:, None], below, 0.0), 1)
    tail = tl.cumsum(tl.where(rmask, dprod * prod, 0.0), 0, reverse=True)
    return rect + tail


@triton.jit
def gate_adjoint(
    dM, dA, dbb, dde, dP, alpha, eta, Da, A, De, P, rmask, rows, last,
    HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr,
):  # fmt: skip
    """d loss / d eta and d loss / d alpha [C] of a segment, given the gradients w.r.t. its
    decay quantities (`segment_decays`): dM [C, C] w.r.t. M = Da De, dA [C] w.r.t. A, dbb
    [C] w.r.t. bb = Da P, dde [C] w.r.t. De's last valid row (`last` [C]), dP [C] w.r.t. P.
    Without momentum (HAS_ETA off) M is Da and d eta is a stand-in; without forgetting
    d alpha is. These gradients feed nothing else, which is why the split backward takes
    them in a pass of their own, parallel over segments (`_lmm_bwd_gates_kernel`)."""
    if HAS_ETA:
        # the adjoint of M = Da De in fp32, as M itself (`segment_decays`)
        dDa = tl.sum(dM[:, None, :] * De[None, :, :], 2) + dbb[:, None] * P[None, :]
        dDe = tl.sum(Da[:, :, None] * dM[:, None, :], 0)
        dDe += tl.where(last[:, None], dde[None, :], 0.0)
        dle = log_gate_gradient(dDe, De, dP + tl.sum(Da * dbb[:, None], 0), P, rmask, rows)
        # both branches are evaluated: no 0 / 0 where eta = 0 (padding)
        deta = tl.where(eta > 1e-30, dle / tl.maximum(eta, 1e-30), 0.0)
    else:
        dDa = dM
        deta = dA
    dalpha = dA
    if HAS_ALPHA:
        dla = log_gate_gradient(dDa, Da, dA, A, rmask, rows)
        keep = 1.0 - alpha
        dalpha = tl.where(keep > 1e-30, -dla / keep, 0.0)
    return deta, dalpha


@triton.jit
def inner_pass(
    k, v, wg1_ptr, wg2_ptr, g01_ptr, g02_ptr, p1, m1, p2, m2, sep,
    DEPTH: tl.constexpr, ACT: tl.constexpr, FIRST_G0: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """A segment's inner forward/backward at the gradient weights (the entry weights at
    wg*_ptr, or where `sep` is 1 the separate g0), reduced to the tiles everything else
    follows from element-wise: (z1 [C, HID] the first layer's pre-activation, e1 [C, HID]
    the error reaching the activation's output, d2 [C, D] the second layer's error); at
    depth 1 (z1, d1, d1) with d1 the layer's error. k, v: [C, D]."""
    wg1 = segment_weights(wg1_ptr, g01_ptr, p1, m1, sep, FIRST_G0)
    z1, a1, g1p = inner_hidden(k, wg1, DEPTH, ACT, PREC)
    wg2 = wg1  # not read at depth 1
    if DEPTH == 2:
        wg2 = segment_weights(wg2_ptr, g02_ptr, p2, m2, sep, FIRST_G0)
    e1, _, d2 = inner_errors(z1, a1, g1p, v, wg2, DEPTH, PREC)
    return z1, e1, d2


@triton.jit
def inner_activations(z1, e1, d2, DEPTH: tl.constexpr, ACT: tl.constexpr):
    """`inner_pass`' tiles expanded element-wise: (a1 = act(z1) the second layer's input,
    g1p = act'(z1), d1 = e1 g1p the first layer's error, d2); at depth 1 (z1, z1, e1, e1)."""
    if DEPTH == 1:
        a1, g1p, d1, d2 = z1, z1, e1, e1
    else:
        a1 = act(z1, ACT)
        g1p = dact(z1, ACT)
        d1 = e1 * g1p
    return a1, g1p, d1, d2


@triton.jit
def segment_quantities(
    k, v, theta, alpha_ptr, eta_ptr, tok, rmask, causal, wg1_ptr, wg2_ptr, g01_ptr, g02_ptr,
    p1, m1, p2, m2, sep, clip,
    C: tl.constexpr, DEPTH: tl.constexpr, HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr,
    HAS_CLIP: tl.constexpr, ACT: tl.constexpr, FIRST_G0: tl.constexpr, PREC: tl.constexpr,
):  # fmt: skip
    """A segment's forward quantities, as every kernel computes them: the inner
    forward/backward at the gradient weights (`inner_pass`), then `quantities_after_inner`.
    k, v: [C, D]; theta: [C]. Returns (a1, d1, d2, k2, n1, a2, n2, lr, f, nrm, nrm_c,
    ratio, alpha, eta, Da, A, De, P, M, bb, Mlr, z1, e1); where a caller drops z1 and e1,
    the compiler does not keep them."""
    z1, e1, d2 = inner_pass(
        k, v, wg1_ptr, wg2_ptr, g01_ptr, g02_ptr, p1, m1, p2, m2, sep,
        DEPTH, ACT, FIRST_G0, PREC,
    )  # fmt: skip
    return quantities_after_inner(
        z1, e1, d2, k, theta, alpha_ptr, eta_ptr, tok, rmask, causal, clip,
        C, DEPTH, HAS_ETA, HAS_ALPHA, HAS_CLIP, ACT,
    )  # fmt: skip


@triton.jit
def quantities_after_inner(
    z1, e1, d2, k, theta, alpha_ptr, eta_ptr, tok, rmask, causal, clip,
    C: tl.constexpr, DEPTH: tl.constexpr, HAS_ETA: tl.constexpr, HAS_ALPHA: tl.constexpr,
    HAS_CLIP: tl.constexpr, ACT: tl.constexpr,
):  # fmt: skip
    """What follows from a segment's inner pass (z1, e1, d2 as `inner_pass` returns them):
    the activations and errors, the squared norms and clip, the decays and Mlr = M lr, in
    `segment_quantities`' order."""
    a1, _, d1, d2 = inner_activations(z1, e1, d2, DEPTH, ACT)
    k2, n1, a2, n2, sq = squared_norms(k, a1, d1, d2, DEPTH)
    lr, f, nrm, nrm_c, ratio = clipped_rate(theta, sq, clip, HAS_CLIP)
    alpha, eta, Da, A, De, P, M, bb = segment_decays(
        alpha_ptr, eta_ptr, tok, rmask, causal, C, HAS_ALPHA, HAS_ETA
    )
    Mlr = M * lr[None, :]
    return (
        a1,
        d1,
        d2,
        k2,
        n1,
        a2,
        n2,
        lr,
        f,
        nrm,
        nrm_c,
        ratio,
        alpha,
        eta,
        Da,
        A,
        De,
        P,
        M,
        bb,
        Mlr,
        z1,
        e1,
    )


@triton.jit
def separate_g0(seg, FIRST_G0: tl.constexpr):
    """1 where segment `seg` takes its gradients at the separate weights g0 rather than at
    its entry weights (FIRST_G0: the first segment of a call or range that starts inside a
    chunk), else 0."""
    sep = seg * 0
    if FIRST_G0:
        sep = tl.where(seg == 0, 1, 0)
    return sep


@triton.jit
def segment_end(last, A, Mlr, bb, P, De, lr, HAS_ETA: tl.constexpr):
    """The factors of the state after the segment, read at its last valid row (`last`
    [C]): W' = A_n Ws + b_n Ss - (delta * m)^T h, S' = P_n Ss - (delta * c)^T h. Returns
    (A_n, b_n, P_n, m [C], c [C], De's last row [C]); without momentum c = lr at the last
    row, and b_n, P_n and De's row are stand-ins nobody reads."""
    a_last = tl.sum(tl.where(last, A, 0.0), 0)
    m_last = tl.sum(tl.where(last[:, None], Mlr, 0.0), 0)  # [C] over r
    if HAS_ETA:
        de_last = tl.sum(tl.where(last[:, None], De, 0.0), 0)
        c_last = de_last * lr
        b_last = tl.sum(tl.where(last, bb, 0.0), 0)
        p_last = tl.sum(tl.where(last, P, 0.0), 0)
    else:
        c_last = tl.where(last, lr, 0.0)
        de_last = c_last
        b_last, p_last = 0.0, 0.0
    return a_last, b_last, p_last, m_last, c_last, de_last


@triton.jit
def batch_shift(T, TS, H):
    """Token-head rows to add to the base pointer of a [B, T, H, *] argument that is a
    range of T tokens of a [B, TS, H, *] buffer (a view, `launch.token_stride`), so that
    `segment_tokens`' dense indices reach this program's batch row (pid // H) in it: the
    backward passes views of its full-length inputs and gradients rather than copies of
    each range. A scalar per program: the index tiles stay as they are."""
    return (tl.program_id(0) // H).to(tl.int64) * (TS - T) * H


@triton.jit
def segment_tokens(pid, seg, rows, cd, T, TS, H, d, offset, C: tl.constexpr):
    """Where segment `seg` of program `pid` (batch pid // H, head pid % H) of a range of T
    tokens lies: its length n, the row mask [C], the token-head index of each row [C] (into
    [B, TS, H] arrays whose rows b start TS tokens apart: TS = T for dense ones, the full
    length for token ranges of longer buffers, `launch.token_stride`), and the offsets and
    mask of its [C, D] rows in [B, TS, H, d] arrays. rows [C], cd [D]: the row and head-dim
    indices."""
    b = pid // H
    h = pid % H
    t0 = tl.maximum(seg * C - offset, 0)
    t1 = tl.minimum((seg + 1) * C - offset, T)
    n = t1 - t0
    rmask = rows < n
    tok = (b * TS + t0 + rows).to(tl.int64) * H + h
    xmask = rmask[:, None] & (cd[None, :] < d)
    xoff = tok[:, None] * d + cd[None, :]
    return n, rmask, tok, xmask, xoff
