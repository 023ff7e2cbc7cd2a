"""The "triton" backend of the memory op: fused forward and backward kernels, checkpoints.

Forward: `forward._lmm_fwd_kernel` (one program per (batch, head), all chunks in one
launch). When gradients are needed it also stores the weights and momentum entering every
`options.save_every`-th chunk segment ([B, H, n_ckpt, out, in] fp32), nothing else.

Backward (`options.backward = "split"`, the default): walks blocks of checkpoint groups in
reverse; per block the forward kernel regenerates the state entering each of its segments,
then the kernels of `backward` back-propagate through the block: the retrieval's adjoint
for every segment at once, then a reverse walk over the segments for the state's, then the
gates' for every segment at once. `backward = "torch"`: each group is instead recomputed
with the PyTorch chunk-parallel form (`recompute`; the dispatcher passes
`chunked.lmm_memory_chunked`, the same function) and differentiated by `torch.func.vjp`.
Either way the backward holds the intermediates of one block at a time. The same forward
and backward serve the custom operators a traced model calls (`graph_op.py`).

The kernel options travel as one `TritonOptions` value (`lmm_memory(...,
triton_options=TritonOptions(save_every=4))`); `DEFAULT_OPTIONS` when none is given.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable

import torch

from ..memory_mlp import check_memory_weights
from ..state import MemoryState, final_state, fresh_state, num_segments, segments_span
from .backward import RetrievalPass, retrieval_pass, state_pass
from .forward import lmm_forward_triton, regenerate_entry_states
from .launch import interpreter_active, pow2, token_stride, two_slots
from .options import (
    DEFAULT_OPTIONS,
    TritonOptions,
    resolve_dot_precision,
    resolve_state_in_registers,
)
from .streams import side_stream


@dataclasses.dataclass(frozen=True)
class _Call:
    """What one call of the op fixes for its forward and backward passes."""

    depth: int
    offset: int
    chunk_size: int
    activation: str
    clip: float | None
    weights_like: tuple[torch.Tensor, ...]  # detached initial weights (shapes, dtype)
    fallback: KernelFallback | None  # what stands in for a kernel that fails to build
    recompute: Callable  # the autograd form a checkpoint group is recomputed with
    options: TritonOptions
    dot_precision: str  # options.dot_precision resolved for this call (never "auto")
    state_in_registers: bool  # options.state_in_registers resolved for this call


def _kernel_errors() -> tuple[type[BaseException], ...]:
    """Triton's compile-time and launch-resource errors (not bugs in the numbers): what a
    GPU the kernels were not tuned for raises, e.g. too many registers or shared memory."""
    try:
        from triton.errors import TritonError

        return (TritonError,)
    except ImportError:  # triton < 3.2 has no common base class
        from triton.compiler.errors import CompilationError
        from triton.runtime.errors import OutOfResources

        return (CompilationError, OutOfResources)


class KernelFallback:
    """What stands in for a Triton kernel that fails to build, and which kernels have.

    stand_in: the PyTorch form of the same function (`backend="auto"` passes
    `lmm_memory_torch`). A kernel that fails with a Triton compile or resource error is
    reported once with a warning and recorded in `failures` (kernel "forward" or "backward"
    -> the error); calls that share this object then skip it. The dispatcher keeps one per
    process (`titans_seq.ops.lmm.auto_fallback`), since a kernel that does not build on a GPU
    will not build on the next call either; a caller may pass its own.
    """

    def __init__(self, stand_in: Callable):
        self.stand_in = stand_in
        self.failures: dict[str, str] = {}

    def failed(self, kernel: str) -> bool:
        return kernel in self.failures

    def note(self, kernel: str, err: BaseException) -> None:
        """Record and report (once) that `kernel` failed to build."""
        if kernel in self.failures:
            return
        self.failures[kernel] = f"{type(err).__name__}: {err}"
        stand_in = {
            "forward": "the PyTorch 'torch' backend for the whole call",
            "backward": "the PyTorch chunked form, recomputed under autograd, for the backward",
        }[kernel]
        warnings.warn(
            f"the Triton LMM {kernel} kernel failed to build on this device "
            f"({type(err).__name__}: {str(err)[:300]}); backend='auto' uses {stand_in} "
            "from now on. Please report this with the GPU model and the triton version.",
            RuntimeWarning,
            stacklevel=3,
        )


def unsupported_reason(q: torch.Tensor, weights, chunk_size: int) -> str | None:
    """Why the Triton kernel cannot run these inputs (None: it can)."""
    d = q.shape[-1]
    depth, hidden = check_memory_weights(weights, q.shape[2], d)
    if depth > 2:
        return f"memory_depth={depth} (the Triton kernel supports depth 1 and 2)"
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return f"dtype {q.dtype} (the Triton kernel takes float32, bfloat16, float16)"
    if chunk_size < 16 or chunk_size > MAX_CHUNK or chunk_size & (chunk_size - 1):
        return (
            f"chunk_size={chunk_size} (the Triton kernel needs a power of two in "
            f"[16, {MAX_CHUNK}]: tl.dot tiles are at least 16 wide, and larger chunks need "
            "more shared memory in the backward than a Hopper GPU has)"
        )
    if not tiles_supported(pow2(d), pow2(hidden), chunk_size):
        return (
            f"head dim {d} x hidden {hidden} at chunk {chunk_size} (the Triton kernels' tiles "
            f"must fit a GPU's shared memory: padded head dim and hidden <= {MAX_TILE_SIDE}, "
            f"e.g. 64 x 128 or 128 x 128)"
        )
    return None


# What the kernels accept, from compiling them ahead of time for sm_90 (offline.py;
# `python benchmarks/triton_resources.py --maximal`). The backward is the binding kernel: its
# shared memory grows with the weight tile and with the chunk (its [C, C] products too).
# Since it holds one layer's tiles at a time it fits up to 128 x 128 (KB, fp32 operands):
# 64x64 44 (C=16); 64x128 84, 128x64 80, 128x128 152 (C=16); 64x128 108, 128x64 124 (C=32).
# Chunks above 32 are refused: at 128 the kernels do not compile (the decays' fp32
# [C, C, C] product exceeds Triton's 2^20-element tensor limit), and chunk 64 is not checked
# for every shape (a one-pass backward, since removed, took 128 KB at depth 2, 64x64, chunk
# 64 with bf16 dots; the maximal 128x128 variants take many minutes each to compile). A test
# compiles every maximal accepted variant to check it.
MAX_TILE_SIDE = 128
MAX_CHUNK = 32


def tiles_supported(D: int, HID: int, chunk_size: int) -> bool:
    """Whether the kernels take padded tiles D x HID at this chunk size (see above)."""
    return D <= MAX_TILE_SIDE and HID <= MAX_TILE_SIDE and chunk_size <= MAX_CHUNK


def check_device(q: torch.Tensor) -> None:
    if q.is_cuda:
        return
    if interpreter_active():
        return
    hint = (
        "TRITON_INTERPRET=1 is set, but triton was imported before it was"
        if os.environ.get("TRITON_INTERPRET") == "1"
        else "set TRITON_INTERPRET=1 before importing triton to run it on CPU (slow; for tests)"
    )
    raise RuntimeError(
        f"the Triton LMM backend needs CUDA tensors, got {q.device} ({hint}); "
        "use backend='torch' or 'auto' on CPU"
    )


def _forward(call: _Call, q, k, v, theta, eta, alpha, W0, S0, G0, save_every):
    """The forward kernel for `call`; save_every=None stores no checkpoints (inference).
    -> y, W, S, G, checkpoint weights, checkpoint momenta."""
    return lmm_forward_triton(
        q,
        k,
        v,
        theta,
        eta,
        alpha,
        W0,
        S0,
        G0,
        offset=call.offset,
        chunk_size=call.chunk_size,
        activation=call.activation,
        inner_grad_clip=call.clip,
        save_every=save_every,
        input_precision=call.dot_precision,
        state_in_registers=call.state_in_registers,
    )


class _TritonLMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _Call, q, k, v, theta, eta, alpha, *state):
        depth, save_every = call.depth, call.options.save_every
        W0, S0, G0 = state[:depth], state[depth : 2 * depth], state[2 * depth :]
        # dense once, and kept so: the backward reads the same copies (views into them)
        q, k, v, theta, eta, alpha = dense_token_arrays((q, k, v, theta, eta, alpha))
        y, W, S, G, cW, cS = _forward(call, q, k, v, theta, eta, alpha, W0, S0, G0, save_every)
        ctx.call = call
        ctx.save_for_backward(q, k, v, theta, eta, alpha, *G0, *cW, *cS)
        return (y, *W, *S, *G)

    @staticmethod
    def backward(ctx, dy, *dstate):
        grads = backward_pass(ctx.call, ctx.saved_tensors, dy, dstate)
        needs = ctx.needs_input_grad[1:7]
        inputs = [gr if need else None for gr, need in zip(grads[:6], needs)]
        return (None, *inputs, *grads[6:])


def backward_pass(call: _Call, saved, dy, dstate) -> list:
    """The gradients of one call of the op: [dq, dk, dv, dtheta, deta, dalpha] (None for
    absent gates), then per layer those w.r.t. the entry weights, momentum and (a call
    entering mid-chunk, else None) chunk weights.

    saved: (q, k, v, theta, eta, alpha, *G0, *checkpoint weights, *checkpoint momenta), as
    the forward keeps them; dy: [B, T, H, d]; dstate: the gradients w.r.t. the final W, S
    and G (None where unused). The backward kernels where `call.options.backward` asks for
    them; under backend="auto" a kernel that fails to build falls back to the recomputation
    (the same gradients), an explicit "triton" re-raises."""
    fallback = call.fallback
    kernels = call.options.backward == "split"
    if kernels and not (fallback is not None and fallback.failed("backward")):
        try:
            return _backward_kernels(call, saved, dy, dstate)
        except _kernel_errors() as err:
            if fallback is None:
                raise
            fallback.note("backward", err)
    return _backward_by_recomputation(call, saved, dy, dstate)


def _final_state_grads(call: _Call, T: int, dstate, cW, cS):
    """(dW, dS, dG): the gradients w.r.t. the final state per layer, fp32 [B, H, out, in]
    (zeros, shaped as a checkpoint cW / cS [B, H, n, out, in] entry, where unused; dG None
    where unused). At a chunk boundary the returned chunk-entry weights are not the ones
    the state exposes: any gradient they got belongs to W (the state's chunk weights are
    its weights)."""
    depth = call.depth

    def filled(gs, checkpoints):
        return [
            torch.zeros_like(c[:, :, 0]) if g is None else g.float()
            for g, c in zip(gs, checkpoints)
        ]

    dW, dS = filled(dstate[:depth], cW), filled(dstate[depth : 2 * depth], cS)
    dG = list(dstate[2 * depth :])
    if (call.offset + T) % call.chunk_size == 0:
        dW = [w if g is None else w + g.float() for w, g in zip(dW, dG)]
        dG = [None] * depth
    return dW, dS, dG


def _backward_by_recomputation(call: _Call, saved, dy, dstate) -> list:
    """`backward_pass` by recomputing each checkpoint group, last first, with the PyTorch
    chunked form (`call.recompute`) and taking its vector-Jacobian product
    (`torch.func.vjp`, which also works where autograd is switched off, as inside a custom
    operator)."""
    depth, C, offset = call.depth, call.chunk_size, call.offset
    save_every = call.options.save_every
    q, k, v, theta, eta, alpha, *rest = saved
    G0, cW, cS = rest[:depth], rest[depth : 2 * depth], rest[2 * depth :]
    T = q.shape[1]
    n_seg = num_segments(T, C, offset)
    dW, dS, dG = _final_state_grads(call, T, dstate, cW, cS)

    inputs = (q, k, v, theta, eta, alpha)
    present = [i for i, x in enumerate(inputs) if x is not None]
    grads = [None if x is None else torch.zeros_like(x) for x in inputs]
    dG0 = [None] * depth
    n_groups = cW[0].shape[2]
    for g in range(n_groups - 1, -1, -1):
        t0, t1 = segments_span(T, C, offset, g * save_every, min(n_seg, (g + 1) * save_every))
        parts = [None if x is None else x[:, t0:t1].detach() for x in inputs]
        first_partial = g == 0 and offset > 0
        with_G = g == n_groups - 1 and dG[0] is not None

        def group(xs, Ws, Ss, Gs, parts=parts, g=g, first_partial=first_partial, with_G=with_G):
            full = list(parts)
            for i, x in zip(present, xs):
                full[i] = x
            entry = Gs if first_partial else Ws
            start = MemoryState(tuple(Ws), tuple(Ss), tuple(entry), offset if g == 0 else 0)
            # fp32 recomputation whatever autocast region the backward was called from
            with torch.autocast(q.device.type, enabled=False):
                y, st = call.recompute(
                    *full,
                    call.weights_like,
                    chunk_size=C,
                    initial_state=start,
                    output_final_state=True,
                    activation=call.activation,
                    inner_grad_clip=call.clip,
                )
            outs = (y, *st.weights, *st.momentum)
            return outs + tuple(st.chunk_weights) if with_G else outs

        primals = (
            [parts[i] for i in present],
            [c[:, :, g].detach() for c in cW],
            [c[:, :, g].detach() for c in cS],
            [x.detach() for x in G0] if first_partial else [],
        )
        outs, vjp = torch.func.vjp(group, *primals)
        cotangents = [dy[:, t0:t1].to(outs[0].dtype), *dW, *dS]
        if with_G:
            cotangents += [torch.zeros_like(c) if x is None else x.float() for x, c in zip(dG, dW)]
        d_parts, dW, dS, d_G = vjp(tuple(cotangents))
        for i, d in zip(present, d_parts):
            grads[i][:, t0:t1] = d
        if first_partial:
            dG0 = list(d_G)
    return [*grads, *dW, *dS, *dG0]


def _backward_kernels(call: _Call, saved, dy, dstate) -> list:
    """`backward_pass` by the backward kernels: a reverse walk over blocks of
    `regenerate_groups` checkpoint groups. Per block: regenerate the entry state of every
    segment with the forward kernel (one launch, the groups in parallel) and run the
    retrieval pass (`retrieval_pass`), which need nothing from the blocks after; then the
    state pass (`state_pass`: the sequential walk carrying the state gradient, and the
    gates). With `options.overlap_backward` on CUDA the next block's regeneration and
    retrieval pass run on a side stream while the current block's state pass runs
    (`streams.py`). The kernels read each block's inputs and write its gradients through
    views of the full-length tensors, and one pair of slot buffers carries the state
    gradient through the walk: no copy per block."""
    depth, C, offset = call.depth, call.chunk_size, call.offset
    q, k, v, theta, eta, alpha, *rest = saved
    G0, cW, cS = rest[:depth], rest[depth : 2 * depth], rest[2 * depth :]
    T = q.shape[1]
    n_seg = num_segments(T, C, offset)
    save_every, precision = call.options.save_every, call.dot_precision

    dW, dS, dG = _final_state_grads(call, T, dstate, cW, cS)
    # fp32 two-slot buffers the kernels read and write by turns; slot `parity` holds the
    # gradient w.r.t. the state after the block walked next
    carried_w, carried_s = (tuple(two_slots(x) for x in xs) for xs in (dW, dS))
    parity = 0
    dG_last = None if dG[0] is None else tuple(g.float().contiguous() for g in dG)

    # each block is a view of these (dense, as the forward saved them)
    inputs = dense_token_arrays((q, k, v, theta, eta, alpha))
    dy = dy.contiguous()
    grads = [None if x is None else torch.empty_like(x) for x in inputs]
    dG0 = [None] * depth
    n_groups = cW[0].shape[2]
    per_launch = call.options.regenerate_groups
    # blocks of checkpoint groups [g0, g_end), last first
    blocks = [(max(0, end - per_launch), end) for end in range(n_groups, 0, -per_launch)]

    def prepare(block) -> RetrievalPass:
        """The block's regeneration and retrieval pass."""
        g0, g_end = block
        t0, t1 = segments_span(T, C, offset, g0 * save_every, min(n_seg, g_end * save_every))
        off = offset if g0 == 0 else 0
        parts = [None if x is None else x[:, t0:t1] for x in inputs]
        eW, eS = regenerate_entry_states(
            *parts, tuple(c[:, :, g0:g_end] for c in cW), tuple(c[:, :, g0:g_end] for c in cS),
            G0, off, C, call.activation, call.clip, save_every, input_precision=precision,
            state_in_registers=call.state_in_registers,
        )  # fmt: skip
        return retrieval_pass(
            *parts, dy[:, t0:t1], eW, eS, G0 if g0 == 0 and offset > 0 else None, off, C,
            call.activation, call.clip, precision,
            [None if g is None else g[:, t0:t1] for g in grads],
        )  # fmt: skip

    streams = side_stream(q.device, call.options.overlap_backward)
    ready = prepare(blocks[0]) if streams is None else streams.ahead(prepare, blocks[0])
    for i, (g0, g_end) in enumerate(blocks):
        upcoming = blocks[i + 1] if i + 1 < len(blocks) else None
        if streams is not None:
            queued = None if upcoming is None else streams.ahead(prepare, upcoming)
            ready = streams.take(ready)
        g0_grad = state_pass(
            ready, carried_w, carried_s, parity, dG_last if g_end == n_groups else None
        )
        parity = (parity + ready.sizes[-1]) % 2
        if g0 == 0 and offset > 0:
            dG0 = list(g0_grad)
        if upcoming is None:
            break
        if streams is not None:
            ready = queued
        else:
            # on one stream the next block is prepared only now, once this block's scratch
            # (entry states, the retrieval's shares) is released: one block's at a time
            ready = None
            ready = prepare(upcoming)
    dW = [w[parity] for w in carried_w]
    dS = [s[parity] for s in carried_s]
    return [*grads, *dW, *dS, *dG0]


def dense_token_arrays(xs) -> tuple:
    """xs ([B, T, H, *] or None) laid out as dense [B, T, H, *] arrays (`token_stride` T,
    which gradients allocated like them share): as they are where they already are, else
    dense copies (the mixer's v and gates are strided views of its projections)."""
    if token_stride(xs) == xs[0].shape[1]:
        return tuple(xs)
    return tuple(None if x is None else x.contiguous() for x in xs)


def lmm_memory_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights: tuple[torch.Tensor, ...],
    chunk_size: int = 16,
    initial_state: MemoryState | None = None,
    output_final_state: bool = False,
    activation: str = "silu",
    inner_grad_clip: float | None = None,
    *,
    recompute: Callable,
    fallback: KernelFallback | None = None,
    triton_options: TritonOptions | None = None,
) -> tuple[torch.Tensor, MemoryState | None]:
    """Same contract as `lmm_memory_reference`; q, k, v: [B, T, H, d] -> y [B, T, H, d].

    triton_options: how the kernels compute (`TritonOptions`; None: `DEFAULT_OPTIONS`).

    recompute: the PyTorch autograd form of the same function (`lmm_memory_chunked`), which
    `backward="torch"` and a fallen-back backward recompute each checkpoint group with.

    fallback: None (an explicit `backend="triton"`: a kernel error is raised), or a
    `KernelFallback`: a kernel that fails to build (a Triton compile or resource error,
    e.g. on a GPU with less shared memory) is reported once with a warning, and its
    stand-in, which computes the same function, runs from then on for every call that
    shares the `KernelFallback`.

    The state is float32 ([B, H, out, in] per layer), interchangeable with the other backends.
    """
    refuse_unsupported(q, weights, chunk_size)
    args = (q, k, v, theta, eta, alpha, weights)
    options = dict(
        chunk_size=chunk_size,
        initial_state=initial_state,
        output_final_state=output_final_state,
        activation=activation,
        inner_grad_clip=inner_grad_clip,
    )
    if fallback is not None and fallback.failed("forward"):
        return fallback.stand_in(*args, **options)
    triton_options = options_or_default(triton_options)
    try:
        return _run_triton(
            *args, **options, fallback=fallback, recompute=recompute,
            triton_options=triton_options,
        )  # fmt: skip
    except _kernel_errors() as err:
        if fallback is None:
            raise
        fallback.note("forward", err)
        return fallback.stand_in(*args, **options)


def refuse_unsupported(q: torch.Tensor, weights, chunk_size: int) -> None:
    """A ValueError naming what the kernels cannot run (`unsupported_reason`), if anything."""
    reason = unsupported_reason(q, weights, chunk_size)
    if reason is not None:
        raise ValueError(f"backend='triton' does not support {reason}; use backend='torch'")


def options_or_default(triton_options) -> TritonOptions:
    """`triton_options`, `DEFAULT_OPTIONS` for None; a TypeError for anything else."""
    if triton_options is None:
        return DEFAULT_OPTIONS
    if not isinstance(triton_options, TritonOptions):
        raise TypeError(
            f"triton_options must be a TritonOptions, got {type(triton_options).__name__}"
        )
    return triton_options


def entry_state(q, weights, initial_state: MemoryState | None) -> tuple[int, tuple, tuple, tuple]:
    """(offset, W0, S0, G0): the state a call enters with, per layer fp32 [B, H, out, in]:
    weights W0, momentum S0, and the weights G0 its first gradients are taken at (W0
    itself for a call that starts on a chunk boundary)."""
    state = initial_state or fresh_state(weights, q.shape[0], torch.float32)
    offset = state.offset
    W0 = tuple(w.to(torch.float32) for w in state.weights)
    S0 = tuple(s.to(torch.float32) for s in state.momentum)
    G0 = tuple(w.to(torch.float32) for w in state.chunk_weights) if offset else W0
    return offset, W0, S0, G0


def _run_triton(
    q,
    k,
    v,
    theta,
    eta,
    alpha,
    weights,
    *,
    chunk_size,
    initial_state,
    output_final_state,
    activation,
    inner_grad_clip,
    fallback,
    recompute,
    triton_options,
):
    """The body of `lmm_memory_triton` (inputs already checked)."""
    check_device(q)
    T, depth = q.shape[1], len(weights)
    offset, W0, S0, G0 = entry_state(q, weights, initial_state)
    precision = resolve_dot_precision(triton_options.dot_precision, q.dtype)
    call = _Call(
        depth=depth,
        offset=offset,
        chunk_size=chunk_size,
        activation=activation,
        clip=inner_grad_clip,
        weights_like=tuple(w.detach() for w in weights),
        fallback=fallback,
        recompute=recompute,
        options=triton_options,
        dot_precision=precision,
        state_in_registers=resolve_state_in_registers(
            triton_options.state_in_registers, precision, tuple(w.shape for w in weights)
        ),
    )
    tensors = (q, k, v, theta, eta, alpha, *W0, *S0, *G0)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        y, *st = _TritonLMM.apply(call, *tensors)
        W, S, G = st[:depth], st[depth : 2 * depth], st[2 * depth :]
    else:
        y, W, S, G, _, _ = _forward(call, q, k, v, theta, eta, alpha, W0, S0, G0, None)
    if not output_final_state:
        return y, None
    return y, final_state(W, S, G, (offset + T) % chunk_size)
