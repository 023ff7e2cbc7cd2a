"""Stop a diverging run at the first non-finite loss or gradient, and say what to try.

A NaN or infinite loss (or gradient norm) never recovers by itself: AdamW turns one NaN
gradient into NaN weights, every later step reports `loss=nan`, and the run would go on to
write NaN checkpoints and a "best" model that never improved. The loop checks each step's
global loss and gradient norm (both already on the host for the logs) and raises
`TrainingDiverged` naming the step, the values and the settings to change. A user who
prefers to ride over rare bad batches sets `train.skip_nonfinite: N`: up to N such steps are
skipped (no optimizer step, gradients dropped) and counted in the logs, the N+1-th raises.
"""

from __future__ import annotations

import math

from ..errors import UserError


class TrainingDiverged(UserError, RuntimeError):
    """The loss, a gradient or a tracked validation metric became NaN or infinite.

    Attributes: step (the optimizer step, counted from 1), loss, grad_norm (None when the
    loss itself was not finite before the backward), what ("loss", "gradient" or the
    validation metric's name).
    """

    def __init__(self, step: int, what: str, loss: float, grad_norm: float | None, hint: str):
        self.step, self.what, self.loss, self.grad_norm = step, what, loss, grad_norm
        norm = "" if grad_norm is None else f", gradient norm {grad_norm:.4g}"
        super().__init__(
            f"training diverged at step {step}: the {what} is not finite (loss {loss:.4g}"
            f"{norm}). {hint}"
        )


def divergence_hint(lr: float, grad_clip: float | None, half_precision: bool) -> str:
    """What to try, in the recipe's own keys (half_precision: the run autocasts to
    bf16/fp16)."""
    tips = [f"lower optim.lr (now {lr:g})"]
    if grad_clip is None:
        tips.append("enable gradient clipping (optim.grad_clip: 1.0)")
    else:
        tips.append(f"clip gradients harder (optim.grad_clip, now {grad_clip:g})")
    if half_precision:
        tips.append("train in fp32 (train.precision: fp32)")
    tips.append("or set train.skip_nonfinite to skip a few bad steps")
    return "Try: " + "; ".join(tips) + "."


def is_finite(value) -> bool:
    return value is not None and math.isfinite(float(value))
