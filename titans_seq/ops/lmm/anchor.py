"""Forgetting toward the initial weights (forget_toward="initial"): the option's checks and
the change of variables every PyTorch backend computes it with.

    W_t = (1 - alpha_t) W_{t-1} + alpha_t W_0 + S_t

is the paper's recurrence on the deviation D = W - W_0 (docs/derivation.md): the walks carry
`deviation(W, base)` with `base` = W_0 and hand back `absolute(D, base)`. The Triton kernels
compute the paper's rule only.
"""

from __future__ import annotations

import torch

from ...errors import ConfigError

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


def check_anchored_backend(forget_toward: str, backend: str) -> None:
    """A ConfigError if forgetting toward W_0 is asked of a backend that cannot compute it
    (the Triton kernels); "auto" always can (it runs "torch" instead of the kernels)."""
    allowed = ("auto", *(b for b in ANCHORED_BACKENDS if b != "decode"))  # decode: internal
    if check_forget_toward(forget_toward) != "zero" and backend not in allowed:
        raise ConfigError(
            f"forget_toward={forget_toward!r} runs the backends {list(allowed)}, not {backend!r}"
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
