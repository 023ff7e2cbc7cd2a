"""How the Triton kernels of the memory compute: `TritonOptions` (checkpoint interval,
dot-operand precision, backward form). Importing this module does not import triton."""

from __future__ import annotations

import dataclasses

import torch

DOT_PRECISIONS = ("auto", "ieee", "tf32", "bf16")
# "auto" follows PyTorch's own switch for float32 matrix products
# (`torch.set_float32_matmul_precision`): what a user set for every fp32 matmul holds for
# the memory kernels' dots too
_PRECISION_OF_MATMUL = {"highest": "ieee", "high": "tf32", "medium": "bf16"}


def resolve_dot_precision(choice: str) -> str:
    """The `tl.dot` input precision a `TritonOptions.dot_precision` stands for now: "auto"
    -> "ieee", "tf32" or "bf16" for `torch.get_float32_matmul_precision()` "highest",
    "high" or "medium"; the others as given."""
    if choice != "auto":
        return choice
    return _PRECISION_OF_MATMUL.get(torch.get_float32_matmul_precision(), "ieee")


BACKWARDS = ("split", "fused", "torch")


@dataclasses.dataclass(frozen=True)
class TritonOptions:
    """How the Triton backend computes (not what: every choice gives the same function).

    save_every: chunk segments per checkpoint (the forward stores the state entering every
        save_every-th segment).
    regenerate_groups: checkpoint groups the fused backward takes per step: it regenerates
        their segment-entry states in one launch, the groups in parallel, then walks them in
        one backward launch. The scratch holds regenerate_groups x save_every entry states
        (weights and momentum) per (batch, head).
    dot_precision: "auto" (the default: what `torch.set_float32_matmul_precision` asks of
        every fp32 matmul, "highest" -> "ieee", "high" -> "tf32", "medium" -> "bf16";
        PyTorch's default is "highest"), "ieee" (fp32 tl.dot inputs exactly), "tf32"
        (faster on tensor cores, about 1e-3 relative) or "bf16" (operands rounded to
        bfloat16, fp32 accumulation and state: the fastest, and the fewest registers and
        spills; its error against the fp32 reference is for a GPU to measure, the
        interpreter's bf16 dots are not a judge). Resolved when a call starts.
    backward: "split" (three backward kernels: the retrieval's adjoint in a pass parallel
        over segments, a sequential pass for the state's, the gates' in a pass parallel
        over segments; the sequential chain is short), "fused" (one sequential kernel for
        all: less work and scratch, a longer chain) or "torch" (each checkpoint group
        recomputed with the PyTorch chunked form under autograd).
    """

    save_every: int = 8
    regenerate_groups: int = 4
    dot_precision: str = "auto"
    backward: str = "split"

    def __post_init__(self) -> None:
        if isinstance(self.save_every, bool) or not isinstance(self.save_every, int):
            raise ValueError(f"save_every must be a positive integer, got {self.save_every!r}")
        if self.save_every < 1:
            raise ValueError(f"save_every must be a positive integer, got {self.save_every!r}")
        groups = self.regenerate_groups
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise ValueError(f"regenerate_groups must be a positive integer, got {groups!r}")
        if self.dot_precision not in DOT_PRECISIONS:
            raise ValueError(
                f"dot_precision must be one of {DOT_PRECISIONS}, got {self.dot_precision!r}"
            )
        if self.backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {BACKWARDS}, got {self.backward!r}")


DEFAULT_OPTIONS = TritonOptions()
