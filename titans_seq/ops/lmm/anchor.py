"""Forgetting toward the initial weights (forget_toward="initial"): the option's checks and
the change of variables every PyTorch backend computes it with.

    W_t = (1 - alpha_t) W_{t-1} + alpha_t W_0 + S_t

is the paper's recurrence on the deviation D = W - W_0 (docs/derivation.md): the walks carry
`deviation(W, base)` with `base` = W_0 and hand back `absolute(D, base)`. The Triton kernels
compute the paper's rule only; a linear memory reaches them through `linear_on_deviation`.
"""

from __future__ import annotations

import torch

from ...errors import ConfigError
from .state import MemoryState

FORGET_TOWARD = ("zero", "initial")
# the forms that compute forgetting toward the initial weights ("decode": one-token calls)
ANCHORED_BACKENDS = ("reference", "chunked", "torch", "compiled", "decode")


def check_forget_toward(forget_toward: str) -> str:
    """`forget_toward` if it is one of FORGET_TOWARD, else a ConfigError naming them."""
    if forget_toward not in FORGET_TOWARD:
        raise ConfigError(
            f"forget_toward must be one of {list(FORGET_TOWARD)}, got {forget_toward!r}"
        )
    return forget_toward


def check_anchored_backend(forget_toward: str, backend: str, depth: int) -> None:
    """A ConfigError if forgetting toward W_0 is asked of a backend that cannot compute it
    (the Triton kernels for a memory of `depth` > 1 layers); "auto" always can (it runs
    "torch" instead of the kernels there)."""
    allowed = ["auto", *(b for b in ANCHORED_BACKENDS if b != "decode")]  # decode: internal
    if depth == 1:
        allowed.append("triton")  # through `linear_on_deviation`
    if check_forget_toward(forget_toward) != "zero" and backend not in allowed:
        layers = "a linear memory" if depth == 1 else f"a memory of {depth} layers"
        raise ConfigError(
            f"forget_toward={forget_toward!r} runs the backends {allowed} for {layers}, "
            f"not {backend!r}"
        )


def anchor_weights(weights, dtype: torch.dtype, forget_toward: str, alpha):
    """What the forgetting gate decays the weights toward, per layer [1, H, out, in]: None
    for zero (the paper's W_t = (1 - alpha_t) W_{t-1} + S_t, and whenever there is no
    forgetting, alpha None), the initial weights W_0 for "initial" (over a long stream the
    memory keeps what training put in W_0 instead of decaying it away)."""
    if check_forget_toward(forget_toward) == "zero" or alpha is None:
        return None
    return tuple(w.to(dtype).unsqueeze(0) for w in weights)


def deviation(weights, base):
    """Per layer weights - base (the weights themselves when base is None)."""
    return weights if base is None else [w - b for w, b in zip(weights, base)]


def absolute(deviations, base):
    """Per layer deviations + base, the inverse of `deviation`."""
    return deviations if base is None else [d + b for d, b in zip(deviations, base)]


def linear_on_deviation(run, q, k, v, theta, eta, alpha, weights, initial_state=None, **options):
    """Forgetting toward W_0 of a linear memory through `run`, a backend that computes the
    paper's rule only (the Triton kernels), exactly.

    For f_W(k) = W k the inner loss ||W k - v||^2 at W = W_0 + D is ||D k - (v - W_0 k)||^2:
    the same gradient, so D follows the paper's recurrence D_t = (1 - alpha_t) D_{t-1} + S_t
    on the values v - W_0 k from D = 0, and the retrieval is W_t q = W_0 q + D_t q. The two
    products with W_0 stay outside `run`, in autograd, which gives W_0 its gradient.

    q, k, v: [B, T, H, d]; theta, eta, alpha: [B, T, H]; weights: (W_0,) with W_0 [H, d, d];
    initial_state: a MemoryState of absolute weights, or None. Returns (y [B, T, H, d] in
    q's dtype, the final MemoryState in absolute weights, or None), as `run` does.
    """
    (w0,) = weights

    def read(x):  # W_0 x per token and head, in the state's precision: [B, T, H, d]
        return torch.einsum("hoi,bthi->btho", w0, x.to(w0.dtype))

    base = (w0.unsqueeze(0),)
    v_dev = (v.to(w0.dtype) - read(k)).to(v.dtype)
    state = _state_in(initial_state, base, deviation)
    y, final = run(
        q, k, v_dev, theta, eta, alpha, (torch.zeros_like(w0),), initial_state=state, **options
    )
    y = (y.to(w0.dtype) + read(q)).to(q.dtype)
    return y, _state_in(final, base, absolute)


def _state_in(state: MemoryState | None, base, convert) -> MemoryState | None:
    """`state` with its weights and chunk weights converted (`deviation` from `base`, or
    back with `absolute`); the momentum is the same in both."""
    if state is None:
        return None
    return MemoryState(
        weights=tuple(convert(state.weights, base)),
        momentum=state.momentum,
        chunk_weights=tuple(convert(state.chunk_weights, base)),
        offset=state.offset,
    )
