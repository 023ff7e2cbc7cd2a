"""The Triton memory op as PyTorch custom operators, for models under `torch.compile`.

Dynamo cannot trace the kernels' launchers (Python that inspects tensors and picks compiled
variants) or the autograd Function around them. Under an outer `torch.compile` the op is
therefore two opaque custom operators with a registered autograd formula:

    titans_seq::lmm_triton_forward   (q, k, v, gates, entry state) -> y, final state,
                                     checkpoints of the state (what the backward needs)
    titans_seq::lmm_triton_backward  (saved inputs, checkpoints, dy, d state) -> gradients

Each has a fake implementation that gives its output shapes, so the compiled graph keeps
the op as one node (no graph break) and Inductor compiles everything around it. Inside,
they run the same kernels and backward walks as the eager autograd Function
(`autograd.py`): the same function, forward and gradients.

What stands in for a kernel that fails to build (`KernelFallback`) cannot travel through an
operator's arguments, so the operators take a flag: with it, they use the process's
`auto_fallback()` (what `backend="auto"` uses eagerly too); a forward kernel that fails
is replaced by the PyTorch "torch" backend walked checkpoint group by group (the backward
then recomputes the groups with the chunked form), a backward kernel by that
recomputation.
"""

from __future__ import annotations

import functools

import torch

from ....tracing import concrete_size
from ..chunked import lmm_memory_chunked
from ..state import MemoryState, final_state, num_segments, segments_span
from ..torch_backend import lmm_memory_torch
from .autograd import (
    KernelFallback,
    _Call,
    _forward,
    _kernel_errors,
    backward_pass,
    check_device,
    entry_state,
    options_or_default,
    refuse_unsupported,
)
from .forward import num_checkpoints
from .options import TritonOptions, resolve_dot_precision, resolve_state_in_registers


@functools.cache
def auto_fallback() -> KernelFallback:
    """The process's `KernelFallback` for `backend="auto"`: the "torch" backend stands in for
    a Triton kernel that fails to build, and once one has failed, later calls skip it (a
    kernel that does not build on this GPU will not on the next call either)."""
    return KernelFallback(lmm_memory_torch)


def _call(depth, offset, chunk_size, activation, clip, weights_like, fallback, options):
    """The `_Call` an operator's arguments describe (dot precision already resolved)."""
    return _Call(
        depth=depth,
        offset=offset,
        chunk_size=chunk_size,
        activation=activation,
        clip=clip,
        weights_like=weights_like,
        fallback=auto_fallback() if fallback else None,
        recompute=lmm_memory_chunked,
        options=options,
        dot_precision=options.dot_precision,
        state_in_registers=resolve_state_in_registers(
            options.state_in_registers, options.dot_precision, tuple(w.shape for w in weights_like)
        ),
    )


def _options(
    save_every, regenerate_groups, dot_precision, backward, state_in_registers,
    overlap_backward, q,
) -> TritonOptions:  # fmt: skip
    """The operator's kernel options; dot_precision resolved here, when the op runs
    ("auto" reads PyTorch's float32 matmul setting, which a trace cannot)."""
    precision = resolve_dot_precision(dot_precision, q.dtype)
    return TritonOptions(
        max(save_every, 1), regenerate_groups, precision, backward, state_in_registers,
        overlap_backward,
    )  # fmt: skip


def _contiguous_copies(xs) -> list[torch.Tensor]:
    # an operator's outputs may alias neither its inputs nor each other (the kernels'
    # final states are slots of one buffer)
    return [x.contiguous().clone() for x in xs]


def _stand_in_forward(call: _Call, inputs, W0, S0, G0, save_every: int, n_checkpoints: int):
    """The forward by the "torch" backend, one checkpoint group at a time, so that the
    state entering each group is kept as the kernel keeps it. -> y, W, S, G, cW, cS."""
    T, C, offset = inputs[0].shape[1], call.chunk_size, call.offset
    n_seg = num_segments(T, C, offset)
    group = save_every or n_seg
    cW = [w.new_empty(w.shape[0], w.shape[1], n_checkpoints, *w.shape[2:]) for w in W0]
    cS = [w.new_empty(w.shape[0], w.shape[1], n_checkpoints, *w.shape[2:]) for w in W0]
    state = MemoryState(tuple(W0), tuple(S0), tuple(G0), offset)
    ys = []
    for g, s0 in enumerate(range(0, n_seg, group)):
        t0, t1 = segments_span(T, C, offset, s0, min(n_seg, s0 + group))
        if g < n_checkpoints:
            for buf, w in zip((*cW, *cS), (*state.weights, *state.momentum)):
                buf[:, :, g] = w
        part = [None if x is None else x[:, t0:t1] for x in inputs]
        y, state = lmm_memory_torch(
            *part, call.weights_like, chunk_size=C, initial_state=state, output_final_state=True,
            activation=call.activation, inner_grad_clip=call.clip,
        )  # fmt: skip
        ys.append(y)
    return torch.cat(ys, 1), state.weights, state.momentum, state.chunk_weights, cW, cS


@torch.library.custom_op("titans_seq::lmm_triton_forward", mutates_args=())
def _forward_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights: list[torch.Tensor],
    momentum: list[torch.Tensor],
    grad_weights: list[torch.Tensor],
    offset: int,
    chunk_size: int,
    activation: str,
    clip: float | None,
    save_every: int,
    n_checkpoints: int,
    regenerate_groups: int,
    dot_precision: str,
    backward: str,
    state_in_registers: bool | None,
    overlap_backward: bool,
    fallback: bool,
) -> list[torch.Tensor]:
    """[y, *W, *S, *G, *checkpoint weights, *checkpoint momenta]; save_every 0: no
    checkpoints (no gradients wanted). regenerate_groups, backward and overlap_backward are
    the backward's (kept for it by the autograd formula)."""
    options = _options(
        save_every, regenerate_groups, dot_precision, backward, state_in_registers,
        overlap_backward, q,
    )  # fmt: skip
    call = _call(
        len(weights), offset, chunk_size, activation, clip, tuple(w[0] for w in weights),
        fallback, options,
    )  # fmt: skip
    inputs = (q, k, v, theta, eta, alpha)
    every = save_every or None
    stand_in = call.fallback
    out = None
    if stand_in is None or not stand_in.failed("forward"):
        try:
            out = _forward(call, *inputs, weights, momentum, grad_weights, every)
        except _kernel_errors() as err:
            if stand_in is None:
                raise
            stand_in.note("forward", err)
    if out is None:
        out = _stand_in_forward(call, inputs, weights, momentum, grad_weights, every, n_checkpoints)
    y, W, S, G, cW, cS = out
    return [y.contiguous(), *_contiguous_copies((*W, *S, *G)), *cW, *cS]


@_forward_op.register_fake
def _(
    q, k, v, theta, eta, alpha, weights, momentum, grad_weights, offset, chunk_size, activation,
    clip, save_every, n_checkpoints, regenerate_groups, dot_precision, backward,
    state_in_registers, overlap_backward, fallback,
):  # fmt: skip
    states = [torch.empty_like(w, memory_format=torch.contiguous_format) for w in weights * 3]
    B, H = q.shape[0], q.shape[2]
    checkpoints = [w.new_empty(B, H, n_checkpoints, *w.shape[2:]) for w in weights * 2]
    return [torch.empty_like(q, memory_format=torch.contiguous_format), *states, *checkpoints]


@torch.library.custom_op("titans_seq::lmm_triton_backward", mutates_args=())
def _backward_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    grad_weights: list[torch.Tensor],
    ckpt_weights: list[torch.Tensor],
    ckpt_momentum: list[torch.Tensor],
    dy: torch.Tensor,
    d_weights: list[torch.Tensor],
    d_momentum: list[torch.Tensor],
    d_grad_weights: list[torch.Tensor],
    offset: int,
    chunk_size: int,
    activation: str,
    clip: float | None,
    save_every: int,
    regenerate_groups: int,
    dot_precision: str,
    backward: str,
    state_in_registers: bool | None,
    overlap_backward: bool,
    fallback: bool,
) -> list[torch.Tensor]:
    """The gradients of `_forward_op`'s call: [dq, dk, dv, dtheta, (deta), (dalpha)] for
    the gates present, each in its input's dtype (the kernels round once, as they store),
    then per layer those w.r.t. the entry weights and momentum, and with offset > 0 the
    entry chunk weights (fp32)."""
    if fallback and auto_fallback().failed("forward"):
        # the forward ran the stand-in: its kernels do not build here, nor will the
        # backward's regeneration of the entry states
        backward = "torch"
    options = _options(
        save_every, regenerate_groups, dot_precision, backward, state_in_registers,
        overlap_backward, q,
    )  # fmt: skip
    weights_like = tuple(c[0, :, 0] for c in ckpt_weights)
    call = _call(
        len(ckpt_weights), offset, chunk_size, activation, clip, weights_like, fallback, options
    )
    saved = (q, k, v, theta, eta, alpha, *grad_weights, *ckpt_weights, *ckpt_momentum)
    grads = backward_pass(call, saved, dy, (*d_weights, *d_momentum, *d_grad_weights))
    inputs = [g.contiguous() for g in grads[:6] if g is not None]
    depth = call.depth
    states = [g.contiguous() for g in grads[6 : 6 + 2 * depth]]
    entry = [g.contiguous() for g in grads[6 + 2 * depth :]] if offset else []
    return [*inputs, *states, *entry]


@_backward_op.register_fake
def _(
    q, k, v, theta, eta, alpha, grad_weights, ckpt_weights, ckpt_momentum, dy, d_weights,
    d_momentum, d_grad_weights, offset, chunk_size, activation, clip, save_every,
    regenerate_groups, dot_precision, backward, state_in_registers, overlap_backward, fallback,
):  # fmt: skip
    dense = dict(memory_format=torch.contiguous_format)
    inputs = [torch.empty_like(x, **dense) for x in (q, k, v, theta, eta, alpha) if x is not None]
    per_layer = d_weights * (3 if offset else 2)
    f32 = dict(dtype=torch.float32, **dense)
    return [*inputs, *(torch.empty_like(w, **f32) for w in per_layer)]


# the forward op's positional arguments, by name (for the autograd formula)
_FORWARD_ARGS = (
    "q k v theta eta alpha weights momentum grad_weights offset chunk_size activation clip "
    "save_every n_checkpoints regenerate_groups dot_precision backward state_in_registers "
    "overlap_backward fallback"
).split()


def _setup_context(ctx, inputs, output):
    """Keeps what `_backward` needs: the inputs, the entry chunk weights, the checkpoints,
    and the backward operator's non-tensor arguments (the forward's, less the count)."""
    args = dict(zip(_FORWARD_ARGS, inputs))
    depth = len(args["weights"])
    ctx.args = {name: args[name] for name in _FORWARD_ARGS[9:] if name != "n_checkpoints"}
    ctx.depth = depth
    ctx.present = [args[name] is not None for name in ("q", "k", "v", "theta", "eta", "alpha")]
    checkpoints = output[1 + 3 * depth :]
    gates = [args[name] for name in ("q", "k", "v", "theta", "eta", "alpha")]
    ctx.save_for_backward(*gates, *args["grad_weights"], *checkpoints)


def _backward(ctx, grads):
    """The forward operator's gradients (by `_backward_op`); grads: one per output, None
    for an output nothing used (the checkpoints always)."""
    depth = ctx.depth
    q, k, v, theta, eta, alpha, *rest = ctx.saved_tensors
    G0, checkpoints = rest[:depth], rest[depth:]
    cW, cS = checkpoints[:depth], checkpoints[depth:]
    dy, d_state = grads[0], grads[1 : 1 + 3 * depth]
    like = (*cW, *cS, *cW)
    d_state = [torch.zeros_like(c[:, :, 0]) if g is None else g for g, c in zip(d_state, like)]
    if dy is None:
        dy = torch.zeros_like(q)
    out = _backward_op(
        q, k, v, theta, eta, alpha, list(G0), list(cW), list(cS), dy,
        d_state[:depth], d_state[depth : 2 * depth], d_state[2 * depth :],
        **ctx.args,
    )  # fmt: skip
    it = iter(out)
    inputs = [
        next(it).to(x.dtype) if present else None
        for present, x in zip(ctx.present, (q, k, v, theta, eta, alpha))
    ]
    dW = [next(it) for _ in range(depth)]
    dS = [next(it) for _ in range(depth)]
    dG = [next(it) if ctx.args["offset"] else None for _ in range(depth)]
    return (*inputs, dW, dS, dG, *([None] * (len(_FORWARD_ARGS) - 9)))


_forward_op.register_autograd(_backward, setup_context=_setup_context)


def lmm_memory_triton_graph(
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
    fallback: bool = False,
    triton_options: TritonOptions | None = None,
) -> tuple[torch.Tensor, MemoryState | None]:
    """`lmm_memory_triton`'s contract through the custom operators: what the dispatcher
    calls under an outer `torch.compile`. q, k, v: [B, T, H, d] -> y [B, T, H, d].

    fallback: backend="auto" (a kernel that fails to build is replaced, as eagerly);
    False re-raises its error."""
    refuse_unsupported(q, weights, chunk_size)
    options = options_or_default(triton_options)
    check_device(q)
    offset, W0, S0, G0 = entry_state(q, weights, initial_state)
    # one graph per length and entry offset (see `concrete_size`): the checkpoints' count
    # is a Python int of the operator's
    T, offset = concrete_size(q.shape[1]), concrete_size(offset)
    inputs = (q, k, v, theta, eta, alpha, *W0, *S0, *G0)
    wants_grad = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in inputs)
    save_every = options.save_every if wants_grad else 0
    n_checkpoints = num_checkpoints(num_segments(T, chunk_size, offset), save_every)
    out = _forward_op(
        q, k, v, theta, eta, alpha, list(W0), list(S0), list(G0), offset, chunk_size,
        activation, inner_grad_clip, save_every, n_checkpoints, options.regenerate_groups,
        options.dot_precision, options.backward, options.state_in_registers,
        options.overlap_backward, fallback,
    )  # fmt: skip
    depth = len(weights)
    y, W, S, G = out[0], out[1 : 1 + depth], out[1 + depth : 1 + 2 * depth], out[1 + 2 * depth :]
    if not output_final_state:
        return y, None
    return y, final_state(W, S, G[:depth], (offset + T) % chunk_size)
