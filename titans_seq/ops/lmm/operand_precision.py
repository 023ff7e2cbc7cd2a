"""Matrix products whose operands are rounded as the Triton kernels' dot precisions round
them, so that a PyTorch run on any device trains as the GPU kernels would.

The kernels (`triton/helpers.py`, `mm`) accumulate every product in float32 and keep the
state in float32; what their dot precision changes is the operands a tensor core reads:

* "fp32": the operands as they are (the kernels' "ieee" dots, fp32 multiply-adds);
* "bf16": each operand rounded to bfloat16, to the nearest even (the kernels'
  `.to(tl.bfloat16)` before `tl.dot`): 8 significant bits;
* "tf32": each operand cut to TensorFloat-32, its 13 low mantissa bits dropped (10 mantissa
  bits kept). Triton's `input_precision="tf32"` passes float32 registers to the tensor
  cores, which read the top 19 bits of each: a truncation, not a rounding.

The decay products of the gates stay exact in both (the kernels compute them as fp32
dots), so `operand_dot` serves the memory's products with its inputs, its states and their
gradients, and `decays.py` keeps plain products.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...errors import ConfigError

OPERAND_PRECISIONS = ("fp32", "tf32", "bf16")
# the backends a rounded call may ask for: both run the "torch" backend's eager steps
ROUNDING_BACKENDS = ("auto", "torch")

# float32 bits that TensorFloat-32 keeps: sign, 8 exponent and 10 mantissa bits
_TF32_MASK = ~((1 << 13) - 1)


def check_operand_precision(precision: str) -> str:
    """`precision` if it is one of OPERAND_PRECISIONS, else a ConfigError naming them."""
    if precision not in OPERAND_PRECISIONS:
        raise ConfigError(
            f"operand_precision must be one of {list(OPERAND_PRECISIONS)}, got {precision!r}"
        )
    return precision


def check_rounding_backend(precision: str, backend: str) -> None:
    """A ConfigError if rounded products (`precision` other than "fp32") are asked of a
    backend that does not run the eager "torch" steps."""
    if precision != "fp32" and backend not in ROUNDING_BACKENDS:
        raise ConfigError(
            f"operand_precision={precision!r} rounds the products of the eager 'torch' "
            f"steps; backend={backend!r} was given (use 'auto' or 'torch')"
        )


def round_operand(x: torch.Tensor, precision: str) -> torch.Tensor:
    """x (any shape) as a product operand of that precision, in x's dtype: rounded to
    bfloat16 ("bf16"), truncated to TensorFloat-32 ("tf32") or unchanged ("fp32")."""
    if precision == "bf16":
        return x.to(torch.bfloat16).to(x.dtype)
    if precision == "tf32":
        bits = x.to(torch.float32).view(torch.int32) & _TF32_MASK
        return bits.view(torch.float32).to(x.dtype)
    return x


def operand_dot(precision: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """a @ b with both operands first taken to `precision` (`round_operand`), the product
    in the operands' dtype; plain `torch.matmul` for "fp32"."""
    check_operand_precision(precision)
    if precision == "fp32":
        return torch.matmul

    def dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(round_operand(a, precision), round_operand(b, precision))

    return dot
