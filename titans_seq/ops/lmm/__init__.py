"""Titans long-term memory as a functional op on already-projected tensors.

    y, final_state = lmm_memory(q, k, v, theta, eta, alpha, weights, chunk_size=16,
                                initial_state=None, output_final_state=False, backend="auto")

Backends compute the same function:

* "reference": token by token, the specification;
* "chunked": the chunk-parallel dual form under autograd (the obvious fast form);
* "torch": the same form with a hand-written backward (`torch_backend.py`); any device;
* "compiled": "torch" with the full chunks compiled by Inductor: on a CPU one loop over
  them per direction (`chunk_scan.py`), elsewhere each chunk's forward and backward step
  called without Dynamo (`compiled_step.py`); a one-off compilation of tens of seconds,
  then faster steps; eager when compilation is unavailable;
* "triton": fused GPU kernels (CPU only under the Triton interpreter, TRITON_INTERPRET=1);
* "auto": Triton for CUDA inputs it supports when triton imports, else "torch"; a Triton
  kernel that fails to build on the GPU at hand is reported once with a warning and
  replaced by "torch" for "auto" callers.

A call with a single token (T = 1, a decoding step) under "auto", "torch" or "compiled"
takes the direct rank-one update of `decode.py` instead of the chunk machinery.

A memory that forgets toward its initial weights (forget_toward="initial") runs in every
PyTorch form, and a linear one also in the Triton kernels on its deviation from W_0
(`anchor.linear_on_deviation`); for a deeper one "auto" takes "torch" on a GPU.
"""

from __future__ import annotations

import functools

import torch

from ...packing import pack, packed_layout, unpack
from .anchor import (
    ANCHORED_BACKENDS,
    check_anchored_backend,
    check_forget_toward,
    linear_on_deviation,
)
from .chunked import lmm_memory_chunked
from .decode import lmm_memory_step
from .memory_mlp import ACTIVATIONS, check_memory_weights, mlp_apply
from .operand_precision import OPERAND_PRECISIONS, check_operand_precision, check_rounding_backend
from .reference import lmm_memory_reference
from .state import MemoryState, fresh_state
from .torch_backend import lmm_memory_torch

_BACKENDS = {
    "reference": lmm_memory_reference,
    "chunked": lmm_memory_chunked,
    "torch": lmm_memory_torch,
    "compiled": functools.partial(lmm_memory_torch, compile_step=True),
    "decode": lmm_memory_step,  # chosen for T = 1, not by name
}


def _triton_backend():
    """The Triton backend module, or None when triton does not import (imported lazily, so
    that TRITON_INTERPRET set by a caller before first use still takes effect)."""
    try:
        from .triton import autograd
    except ImportError:
        return None
    return autograd


def auto_fallback():
    """The process's `KernelFallback` for `backend="auto"`: the "torch" backend stands in for
    a Triton kernel that fails to build, and once one has failed, later calls skip it (a
    kernel that does not build on this GPU will not on the next call either)."""
    from .triton.graph_op import auto_fallback

    return auto_fallback()


def _lmm_memory_triton(*args, fallback: bool = False, **kwargs):
    """The Triton backend, handed the PyTorch forms it leans on (it imports none itself):
    the autograd form its checkpoint groups may be recomputed with, and under "auto"
    (fallback=True) what stands in for a kernel that fails to build. Under an outer
    `torch.compile` the same kernels run as custom operators (`triton/graph_op.py`), which
    the compiled graph keeps as nodes of its own."""
    module = _triton_backend()
    if module is None:
        raise RuntimeError("backend='triton' needs the triton package (pip install triton)")
    if torch.compiler.is_compiling():
        from .triton.graph_op import lmm_memory_triton_graph

        return lmm_memory_triton_graph(*args, **kwargs, fallback=fallback)
    stand_in = auto_fallback() if fallback else None
    return module.lmm_memory_triton(
        *args, **kwargs, recompute=lmm_memory_chunked, fallback=stand_in
    )


_BACKENDS["triton"] = _lmm_memory_triton


def available_backends() -> list[str]:
    """Backend names accepted by `lmm_memory` (besides "auto")."""
    return [name for name in _BACKENDS if name != "decode"]


def resolve_backend(
    backend: str, device: torch.device, q: torch.Tensor | None = None, weights=None, chunk_size=16
) -> str:
    """Map "auto" to a concrete backend for tensors on `device`: "triton" for CUDA tensors
    when triton imports and the kernel supports the inputs (q, weights, chunk_size; checked
    when given), else "torch"."""
    if backend == "auto":
        if torch.device(device).type != "cuda":
            return "torch"
        module = _triton_backend()
        if module is None:
            return "torch"
        if q is not None and module.unsupported_reason(q, weights, chunk_size) is not None:
            return "torch"
        return "triton"
    if backend not in available_backends():
        raise ValueError(
            f"unknown LMM backend {backend!r}; choose one of {['auto', *available_backends()]}"
        )
    return backend


def _check_inputs(q, k, v, theta, eta, alpha, weights, chunk_size, initial_state, activation):
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor) or x.dim() != 4:
            raise ValueError(f"{name} must be a [B, T, H, d] tensor, got {getattr(x, 'shape', x)}")
        if not torch.is_floating_point(x):
            raise TypeError(f"{name} must be floating point, got {x.dtype}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(
            f"q, k, v shapes differ: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    B, T, H, d = q.shape
    if T == 0:
        raise ValueError("lmm_memory got an empty sequence (T=0)")
    for name, g in (("theta", theta), ("eta", eta), ("alpha", alpha)):
        if g is None and name != "theta":
            continue
        if not isinstance(g, torch.Tensor) or tuple(g.shape) != (B, T, H):
            raise ValueError(
                f"{name} must be a [B, T, H] = {(B, T, H)} tensor, got {getattr(g, 'shape', g)}"
            )
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown memory activation {activation!r}; choose one of {ACTIVATIONS}")
    check_memory_weights(weights, H, d)
    if initial_state is not None:
        if not isinstance(initial_state, MemoryState):
            raise TypeError(
                f"initial_state must be a MemoryState, got {type(initial_state).__name__}"
            )
        shapes = tuple(tuple(w.shape) for w in initial_state.weights)
        expected = tuple((B, *w.shape) for w in weights)
        if shapes != expected:
            raise ValueError(f"initial_state holds weights of shapes {shapes}; expected {expected}")
        if not 0 <= initial_state.offset < chunk_size:
            raise ValueError(
                f"initial_state.offset={initial_state.offset} does not fit chunk_size={chunk_size}"
            )


def lmm_memory(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    eta: torch.Tensor | None,
    alpha: torch.Tensor | None,
    weights,
    chunk_size: int = 16,
    initial_state: MemoryState | None = None,
    output_final_state: bool = False,
    backend: str = "auto",
    activation: str = "silu",
    inner_grad_clip: float | None = None,
    cu_seqlens: torch.Tensor | None = None,
    triton_options=None,
    operand_precision: str = "fp32",
    forget_toward: str = "zero",
) -> tuple[torch.Tensor, MemoryState | None]:
    """Titans memory update + retrieval over a sequence.

    Args:
        q, k, v: [B, T, H, d] queries, keys (both usually l2-normalised) and values.
        theta: [B, T, H] learning rates; eta: [B, T, H] momentum decays (None: no momentum);
            alpha: [B, T, H] forgetting rates (None: no forgetting). Gate values, not logits.
        weights: initial memory weights, shared over the batch: (W,) with W [H, d, d] for a
            linear memory, (W1 [H, h, d], ..., WL [H, d, h]) for an MLP memory.
        chunk_size: tokens per mini-batch of inner gradients (boundaries at absolute stream
            positions, counted across calls through the state).
        initial_state / output_final_state: streaming; pass the returned state back.
        backend: "auto", "reference", "chunked", "torch", "compiled" or "triton".
        activation: "silu" or "gelu" between memory layers.
        inner_grad_clip: clip each token's inner gradient to this global norm (None: off).
        cu_seqlens: document boundaries [N + 1] of packed inputs (B = 1, T = total): every
            document starts from the initial weights with zero momentum and its own chunk
            boundaries, exactly as if alone (`titans_seq.packing`; every backend, the
            Triton kernel on the padded batch); no initial or final state then.
        triton_options: `triton.TritonOptions` (checkpoint interval, dot
            precision, backward path) for the Triton backend; ignored by the others.
        operand_precision: "fp32" (the default), or "bf16" / "tf32": every product of the
            memory with its inputs, states and their gradients rounds its operands as the
            Triton kernels' dot precision of that name does (`operand_precision.py`), the
            products accumulated and the state kept in float32, so that training on any
            device reproduces the kernels' arithmetic. Runs the "torch" backend's eager steps
            (backend "auto" or "torch"); one-token calls take the unrounded decode step, as
            they do on a GPU.
        forget_toward: what the forgetting gate decays the weights toward: "zero" (the
            paper's W_t = (1 - alpha_t) W_{t-1} + S_t) or "initial", the initial weights
            (W_t = (1 - alpha_t) W_{t-1} + alpha_t W_0 + S_t, with W_0 = `weights` also when
            a stream continues from `initial_state`). "initial" runs the PyTorch backends,
            and the Triton kernels for a linear memory (`anchor.linear_on_deviation`; for
            deeper ones "auto" takes "torch" where it would take "triton").

    Returns:
        y [B, T, H, d] in the dtype of q, and the final MemoryState (or None).
    """
    if isinstance(weights, torch.Tensor):
        weights = (weights,)
    if cu_seqlens is not None:
        return _lmm_memory_packed(
            (q, k, v, theta, eta, alpha),
            weights,
            cu_seqlens,
            initial_state,
            output_final_state,
            chunk_size=chunk_size,
            backend=backend,
            activation=activation,
            inner_grad_clip=inner_grad_clip,
            triton_options=triton_options,
            operand_precision=operand_precision,
            forget_toward=forget_toward,
        )
    _check_inputs(q, k, v, theta, eta, alpha, weights, chunk_size, initial_state, activation)
    rounded = check_operand_precision(operand_precision) != "fp32"
    check_rounding_backend(operand_precision, backend)
    name = "torch" if rounded else resolve_backend(backend, q.device, q, weights, chunk_size)
    # the forms that may stand in for the asked one: any under "auto", the PyTorch ones else
    replaceable = backend == "auto" or name in ("torch", "compiled")
    if replaceable and q.shape[1] == 1:
        name = "decode"  # one token (a generation step): no chunk machinery
    elif replaceable and name != "triton" and torch.compiler.is_compiling():
        # Under an outer trace (a user's `torch.compile` of the whole model) the CPU
        # backends' hand-written autograd Function cannot be traced: Dynamo refuses the
        # intermediates its forward keeps for its backward. The chunked dual form, the same
        # function in plain differentiable operations, is what the outer compilation then
        # compiles and differentiates itself. The Triton kernels stay: the trace takes them
        # as custom operators.
        if rounded:
            raise ValueError(
                f"operand_precision={operand_precision!r} runs eager chunk steps, which a "
                "torch.compile trace cannot take; compile without it"
            )
        name = "chunked"
    anchored = check_forget_toward(forget_toward) == "initial" and alpha is not None
    run = _BACKENDS[name]
    if anchored:
        check_anchored_backend(forget_toward, backend, len(weights))
        if name == "triton" and len(weights) == 1:  # the kernels on the deviation from W_0
            run = functools.partial(linear_on_deviation, _BACKENDS["triton"])
        elif name == "triton":  # "auto" on a GPU: the kernels compute the paper's rule only
            name, run = "torch", _BACKENDS["torch"]
    # "auto" may fall back to the PyTorch form when a Triton kernel fails to build on this GPU
    extra = {"fallback": True} if backend == "auto" and name == "triton" else {}
    if anchored and name != "triton":
        extra["forget_toward"] = forget_toward
    if name == "triton" and triton_options is not None:
        extra["triton_options"] = triton_options
    if rounded and name == "torch":
        extra["operand_precision"] = operand_precision
    # the memory's arithmetic is float32 (float64 for float64 inputs) whatever autocast region
    # the caller is in: the recurrence accumulates rounding error over the whole stream, and
    # bf16 matmuls inside it move the reads by about 1% after a thousand tokens
    with torch.autocast(q.device.type, enabled=False):
        return run(
            q,
            k,
            v,
            theta,
            eta,
            alpha,
            tuple(weights),
            chunk_size=chunk_size,
            initial_state=initial_state,
            output_final_state=output_final_state,
            activation=activation,
            inner_grad_clip=inner_grad_clip,
            **extra,
        )


def _lmm_memory_packed(
    inputs, weights, cu_seqlens, initial_state, output_final_state, **options
) -> tuple[torch.Tensor, None]:
    """`lmm_memory` on packed documents: the per-position tensors q, k, v [1, total, H, d]
    and theta, eta, alpha [1, total, H] are laid out as a padded batch, one document per
    row (zeros after its end, which causality keeps out of its reads)."""
    if initial_state is not None or output_final_state:
        raise ValueError(
            "packed documents (cu_seqlens) each start from the initial weights and return no "
            "final state: pass initial_state=None and output_final_state=False"
        )
    q = inputs[0]
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError(f"q must be a [1, T, H, d] tensor, got {getattr(q, 'shape', q)}")
    for name, t in zip(("k", "v", "theta", "eta", "alpha"), inputs[1:]):
        if t is not None and (not isinstance(t, torch.Tensor) or t.shape[:2] != q.shape[:2]):
            raise ValueError(
                f"{name} must hold the same [1, T] positions as q {tuple(q.shape[:2])}, got "
                f"{getattr(t, 'shape', t)}"
            )
    layout = packed_layout(cu_seqlens, q.shape[1], q.device)
    padded = [None if t is None else unpack(t, layout) for t in inputs]
    y, _ = lmm_memory(*padded, weights, **options)
    return pack(y, layout), None


__all__ = [
    "ANCHORED_BACKENDS",
    "MemoryState",
    "OPERAND_PRECISIONS",
    "available_backends",
    "fresh_state",
    "lmm_memory",
    "lmm_memory_chunked",
    "lmm_memory_torch",
    "lmm_memory_reference",
    "lmm_memory_step",
    "mlp_apply",
    "resolve_backend",
]
