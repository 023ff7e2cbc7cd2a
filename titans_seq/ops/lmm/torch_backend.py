"""The "torch" and "compiled" backends: the chunk-parallel form with a hand-written backward.

`chunked.py` computes the memory with plain PyTorch operations under autograd: every one of
the ~100 small operations of a chunk becomes an autograd node, and on a CPU (or as GPU
kernel launches) their bookkeeping costs far more than their arithmetic. This module
computes the same function in one `torch.autograd.Function`:

* before the sequential walk, everything that does not depend on the memory weights is
  computed for all chunks at once: the decay products of the gates (A, P, Da, De, M = Da
  De, b = Da P) and the C x C products q k^T of the first layer;
* the forward walks the chunks with no autograd graph (`segment_step.step_forward`) and
  keeps the state entering each chunk and the intermediates its adjoint needs;
* the backward walks the chunks in reverse with the adjoint of the dual form
  (`segment_step.step_backward`; the formulas of docs/derivation.md, which the Triton
  backward implements for depth 1 and 2), here for any memory depth.

With `compile_step` (the "compiled" backend) the full chunks run compiled by Inductor: on a
CPU, two or more of them as one loop per direction (`chunk_scan.ChunkScan`, the segments
beside it eager), elsewhere each full chunk's steps as graphs of their own
(`compiled_step.StepCompiler`). The token-by-token reference (`reference.py`) and the
autograd dual form (`chunked.py`) stay beside it as the obvious implementations; the tests
compare all three.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
from torch.autograd.function import once_differentiable

from . import chunk_scan
from .anchor import absolute, anchor_weights, deviation
from .compiled_step import StepCompiler, StepSegment, serial_kernels
from .operand_precision import check_operand_precision, operand_dot
from .segment_step import segment_tensors, split_segments, step_backward, step_forward
from .state import MemoryState, final_state, fresh_state, segment_lengths, state_dtype


@functools.cache
def shared_step_compiler() -> StepCompiler:
    """The process's compiled chunk steps: a compilation costs tens of seconds, and every
    layer of the same layout reuses it."""
    return StepCompiler(step_forward, step_backward)


@functools.cache
def shared_chunk_scan() -> chunk_scan.ChunkScan | None:
    """The process's compiled walks over full chunks (None: this PyTorch has no scan
    operator, and the per-chunk compiled steps serve instead)."""
    return chunk_scan.ChunkScan() if chunk_scan.available() else None


@functools.cache
def rounded_steps(precision: str) -> StepCompiler:
    """Eager chunk steps whose products round their operands to `precision`
    (`operand_precision`); never compiled."""
    return StepCompiler(
        functools.partial(step_forward, precision=precision),
        functools.partial(step_backward, precision=precision),
    )


@dataclasses.dataclass(frozen=True)
class _Call:
    """What one call fixes for its forward and backward walks."""

    depth: int
    chunk_size: int
    offset: int  # tokens of the entry chunk already absorbed
    lengths: tuple[int, ...]  # the segments' token counts
    activation: str
    clip: float | None
    steps: StepCompiler  # runs the steps: compiled when `compile`, else eagerly
    compile: bool  # the "compiled" backend (else "torch")
    zero_momentum: bool  # a fresh stream: the entry momentum is zero
    scan: chunk_scan.ChunkScan | None  # walks the full chunks as one compiled loop
    precision: str = "fp32"  # the products' operands (`operand_precision`)
    anchored: bool = False  # forgetting toward W_0: the walk carries deviations from it


class _Block:
    """A call's run of full chunks, walked by `ChunkScan`: its inputs [B, H, n*C, ...]."""

    __slots__ = ("inputs",)

    def __init__(self, inputs):
        self.inputs = inputs


def _length(piece) -> int:
    """Tokens of a piece of the walk (a `StepSegment` or a `_Block`)."""
    first = piece.inputs[0] if isinstance(piece, _Block) else piece.flat[0]
    return first.shape[2]


def _pieces(call: _Call, q, k, v, theta, eta, alpha, step_compile: bool) -> list:
    """The call's walk in order: a `StepSegment` per segment, except that with a chunk
    scan the full chunks are one `_Block` (the partial first and last segments, if any,
    stay segments). step_compile: the segments' steps run as compiled graphs (their full
    chunks are then copied chunk-major)."""
    lengths, C = call.lengths, call.chunk_size
    full = [i for i, n in enumerate(lengths) if n == C]
    # the loop is compiled for any number of chunks from two (a dimension of size one would
    # be specialised: another compilation); a lone full chunk takes the eager step
    if call.scan is None or len(full) < 2 or torch.compiler.is_compiling():
        dot = operand_dot(call.precision)
        segs = split_segments(q, k, v, theta, eta, alpha, lengths, C, step_compile, dot)
        return [StepSegment(segment_tensors(seg)) for seg in segs]
    first, count = full[0], len(full)
    start = sum(lengths[:first])
    stop = start + count * C
    inputs = (q, k, v, theta, eta, alpha)

    def segments(t0, t1, parts):
        if not parts:
            return []
        sliced = [None if x is None else x[:, :, t0:t1] for x in inputs]
        return [StepSegment(segment_tensors(seg)) for seg in split_segments(*sliced, parts, C)]

    block = _Block(tuple(None if x is None else x[:, :, start:stop] for x in inputs))
    head = segments(0, start, list(lengths[:first]))
    tail = segments(stop, sum(lengths), list(lengths[first + count :]))
    return [*head, block, *tail]


def _detached(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.detach()


def _tuple_or_none(xs):
    return None if xs is None else tuple(xs)


class _TorchLMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, call: _Call, q, k, v, theta, eta, alpha, *state):
        L, C, offset = call.depth, call.chunk_size, call.offset
        # The steps work on detached tensors: this Function is their autograd, and a
        # compiled step then sees the same requires_grad flags in training and in
        # inference (Dynamo guards on them: one compilation instead of two).
        q_, k_, v_, theta_, eta_, alpha_, *state_ = (
            _detached(x) for x in (q, k, v, theta, eta, alpha, *state)
        )
        W0, S0, G0 = state_[:L], state_[L : 2 * L], state_[2 * L : 3 * L]
        base = tuple(state_[3 * L :]) if call.anchored else None
        compiled = call.compile
        # with a chunk scan, the segments beside it are partial or a lone full chunk: eager
        ctx.step_compile = compiled and call.scan is None
        pieces = _pieces(call, q_, k_, v_, theta_, eta_, alpha_, ctx.step_compile)
        # a fresh stream enters with zero momentum: its first segment skips those products
        W, S = list(W0), (None if call.zero_momentum else list(S0))
        # the pieces' intermediates are kept for the backward (as autograd would keep
        # them), so that it does not recompute the forward
        ys, entries, saved = [], [], []
        serial = compiled and serial_kernels(W0[0])
        for i, piece in enumerate(pieces):
            Wg = G0 if (i == 0 and offset > 0) else W
            entries.append((W, S))
            if isinstance(piece, _Block):  # never first when offset > 0: Wg is W
                entry_S = S if S is not None else [torch.zeros_like(w) for w in W]
                y, W, S, sv = call.scan.forward(
                    serial, piece.inputs, W, entry_S, call.activation, call.clip, C, base
                )
            else:
                full = _length(piece) == C
                y, W, S, sv = call.steps.run_forward(
                    ctx.step_compile, full, serial, piece, tuple(W), _tuple_or_none(S), tuple(Wg),
                    call.activation, call.clip, base,
                )  # fmt: skip
            ys.append(y)
            saved.append(sv)
        last_offset = (offset + sum(call.lengths)) % C
        # the gradient weights the final state exposes: those of the last segment (a W
        # placeholder when the call ends on a chunk boundary; the state then exposes W)
        G = entries[-1][0] if last_offset else W
        if len(pieces) == 1 and offset > 0:
            G = G0
        ctx.call, ctx.serial = call, serial
        # unused outputs arrive in the backward as None, not as zeros (see its use of dW)
        ctx.set_materialize_grads(False)
        ctx.pieces = pieces
        ctx.saved_pieces = saved
        # the entry states, inputs of the backward's steps (detached like everything the
        # steps see, since the inputs were)
        ctx.entries = [(tuple(Ws), _tuple_or_none(Ss)) for Ws, Ss in entries]
        ctx.base = base
        ctx.save_for_backward(q_, k_, v_, theta_, eta_, alpha_, *G0)
        # an autograd Function returns each tensor once and no input as an output
        G = tuple(g.clone() for g in G)
        return (torch.cat(ys, dim=2), *W, *S, *G)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, *dstate):
        call = ctx.call
        L, C, offset = call.depth, call.chunk_size, call.offset
        q, k, v, theta, eta, alpha, *G0 = ctx.saved_tensors
        pieces = ctx.pieces
        n_seg = len(pieces)
        last_offset = (offset + sum(call.lengths)) % C

        def zeros_or(g, like):
            return torch.zeros_like(like) if g is None else g

        Wlast = ctx.entries[-1][0]
        dG = list(dstate[2 * L :])
        if all(g is None for g in dstate):
            # a training step that drops the final state: its adjoint is zero, and the
            # last segment skips it (for a one-chunk sequence, about a third of the step)
            dW = dS = None
        else:
            dW = [zeros_or(g, w) for g, w in zip(dstate[:L], Wlast)]
            dS = [zeros_or(g, w) for g, w in zip(dstate[L : 2 * L], Wlast)]
            if last_offset == 0:  # the state exposes W as its chunk weights
                dW = [w if g is None else w + g for w, g in zip(dW, dG)]
                dG = [None] * L
        if dy is None:  # only the final state is used
            dy = torch.zeros_like(q)
        lengths = [_length(piece) for piece in pieces]
        dys = dy.split(lengths, dim=2)
        grads = {name: [None] * n_seg for name in ("q", "k", "v", "theta", "eta", "alpha")}
        dG0 = [None] * L
        base = ctx.base
        dBase = None

        def add_base(shares):  # every segment's share of the gradient of W_0
            nonlocal dBase
            if shares is not None:
                dBase = list(shares) if dBase is None else [a + b for a, b in zip(dBase, shares)]

        for i in range(n_seg - 1, -1, -1):
            Ws, Ss = ctx.entries[i]
            if isinstance(pieces[i], _Block):  # never first with offset > 0, never exposed
                *input_grads, dW, dS, shares = call.scan.backward(
                    ctx.saved_pieces[i], dys[i], dW, dS
                )
                add_base(shares)
                ctx.saved_pieces[i] = None
                for name, g in zip(grads, input_grads):
                    grads[name][i] = g
                dW = list(dW)
                # a fresh stream's zero entry momentum is no input of this call's
                dS = [None] * L if Ss is None else list(dS)
                continue
            separate = i == 0 and offset > 0
            Wg = G0 if separate else Ws
            full = lengths[i] == C
            # the exposed chunk weights of the last segment are its Wg: their gradient dG
            # joins dWg before dWg joins dWs
            exposed = i == n_seg - 1 and any(g is not None for g in dG)
            fold = not separate and not exposed
            dq, dk, dv, dth, deta, dal, dWs, dSs, dWg, shares = call.steps.run_backward(
                ctx.step_compile, full, ctx.serial, pieces[i], Ws, Ss,
                tuple(Wg), ctx.saved_pieces[i], dys[i].contiguous(),
                _tuple_or_none(dW), _tuple_or_none(dS),
                call.activation, call.clip, fold, base,
            )  # fmt: skip
            add_base(shares)
            ctx.saved_pieces[i] = None  # free as the walk goes
            for name, g in zip(grads, (dq, dk, dv, dth, deta, dal)):
                grads[name][i] = g
            if exposed:
                dWg = [a if b is None else a + b for a, b in zip(dWg, dG)]
            if fold:
                dW, dS = dWs, dSs
            elif separate:
                dG0 = dWg
                dW, dS = dWs, dSs
            else:
                dW = [a + b for a, b in zip(dWs, dWg)]
                dS = dSs
        out = []
        for name, need in zip(grads, ctx.needs_input_grad[1:7]):
            parts = grads[name]
            out.append(torch.cat(parts, dim=2) if need and parts[0] is not None else None)
        if base is None:
            return (None, *out, *dW, *dS, *dG0)
        return (None, *out, *dW, *dS, *dG0, *dBase)


def lmm_memory_torch(
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
    compile_step: bool | StepCompiler = False,
    operand_precision: str = "fp32",
    forget_toward: str = "zero",
) -> tuple[torch.Tensor, MemoryState | None]:
    """Same contract as `lmm_memory_reference`; q, k, v: [B, T, H, d] -> y [B, T, H, d].

    compile_step: run the full chunks compiled by Inductor (the "compiled" backend): on a CPU
    as one loop per direction (`shared_chunk_scan()`), elsewhere each chunk's forward and
    backward step as graphs (True takes `shared_step_compiler()`, or pass a `StepCompiler`
    of your own); a compilation failure is reported once and the eager steps used instead.
    operand_precision: "fp32", or "bf16" / "tf32" to round the operands of the memory's
    products as the Triton kernels' dot precisions do (`operand_precision.py`), in eager
    steps only. forget_toward: as in `lmm_memory_reference` (with "initial" the walk
    carries the weights' deviations from W_0, `segment_step.py`).
    """
    check_operand_precision(operand_precision)
    if operand_precision != "fp32" and compile_step:
        raise ValueError(
            f"operand_precision={operand_precision!r} runs eager chunk steps; it does not "
            "combine with compiled ones (compile_step)"
        )
    B, T, H, d = q.shape
    out_dtype, dtype = q.dtype, state_dtype(q)
    depth = len(weights)
    state = initial_state if initial_state is not None else fresh_state(weights, B, dtype)
    offset = state.offset
    base = anchor_weights(weights, dtype, forget_toward, alpha)
    W0 = tuple(deviation([w.to(dtype) for w in state.weights], base))
    S0 = tuple(s.to(dtype) for s in state.momentum)
    G0 = tuple(deviation([w.to(dtype) for w in state.chunk_weights], base)) if offset else W0

    # [B, T, H, ...] -> [B, H, T, ...] once, contiguous, in the state precision
    def prep(x):
        return None if x is None else x.to(dtype).transpose(1, 2).contiguous()

    q_, k_, v_, theta_, eta_, alpha_ = (prep(x) for x in (q, k, v, theta, eta, alpha))
    own = isinstance(compile_step, StepCompiler)
    call = _Call(
        depth=depth, chunk_size=chunk_size, offset=offset,
        lengths=tuple(segment_lengths(T, chunk_size, offset)), activation=activation,
        clip=inner_grad_clip,
        steps=compile_step if own else (
            shared_step_compiler() if operand_precision == "fp32"
            else rounded_steps(operand_precision)
        ),
        compile=bool(compile_step), zero_momentum=initial_state is None,
        # on a CPU the full chunks run as one compiled loop; elsewhere chunk by chunk
        scan=shared_chunk_scan() if compile_step and q.device.type == "cpu" else None,
        precision=operand_precision, anchored=base is not None,
    )  # fmt: skip
    y, *st = _TorchLMM.apply(call, q_, k_, v_, theta_, eta_, alpha_, *W0, *S0, *G0, *(base or ()))
    y = y.transpose(1, 2).to(out_dtype)
    if not output_final_state:
        return y, None
    W, S, G = st[:depth], st[depth : 2 * depth], st[2 * depth :]
    return y, final_state(absolute(W, base), S, absolute(G, base), (offset + T) % chunk_size)
