"""How the Triton kernels of the memory compute: `TritonOptions` (checkpoint interval,
dot-operand precision, backward form). Importing this module does not import triton."""

from __future__ import annotations

import dataclasses

import torch

DOT_PRECISIONS = ("auto", "ieee", "tf32", "bf16")
# "auto" follows PyTorch's own switch for float32 matrix products
# (`torch.set_float32_matmul_precision`) when a user moved it from its default: what they
# set for every fp32 matmul holds for the memory kernels' dots too
_PRECISION_OF_MATMUL = {"highest": "ieee", "high": "tf32", "medium": "bf16"}
# At PyTorch's default ("highest") the inputs decide: q, k, v that arrive in bf16 or fp16
# (autocast, a half model) carry 8 or 11 significant bits, so the dots round their fp32
# operands (the state, the inner errors) to about the inputs' own precision and run on
# tensor cores, 2.0-3.1x faster than fp32 dots on an H200. Three seeds of a bf16-autocast
# language model trained with each precision ended within the fp32-dot runs' seed spread
# (docs/benchmarks.md, "Dot precision in training"). fp32 inputs keep fp32 dots.
_PRECISION_OF_INPUTS = {torch.bfloat16: "bf16", torch.float16: "tf32"}


def resolve_dot_precision(choice: str, input_dtype: torch.dtype | None = None) -> str:
    """The `tl.dot` input precision a `TritonOptions.dot_precision` stands for now.

    "auto": `torch.get_float32_matmul_precision()` "high" -> "tf32", "medium" -> "bf16"; at
    PyTorch's default "highest", by the dtype of q, k, v: bfloat16 -> "bf16", float16 ->
    "tf32" (fp16's 11 significant bits kept), anything else (float32) -> "ieee". The other
    choices as given."""
    if choice != "auto":
        return choice
    matmul = torch.get_float32_matmul_precision()
    if matmul != "highest":
        return _PRECISION_OF_MATMUL.get(matmul, "ieee")
    return _PRECISION_OF_INPUTS.get(input_dtype, "ieee")


BACKWARDS = ("split", "torch")

# The state-in-registers kernels hold four state tiles through the whole walk. With
# tensor-core dots (bf16 or tf32 operands) and tiles up to 64 x 64 they fit in registers
# and run a chunk step in 0.73-0.92x the time of the kernels that pass the state through
# global memory (H200, docs/benchmarks.md); with fp32 dots or larger tiles they spill more
# than those do.
_REGISTER_PRECISIONS = ("bf16", "tf32")
_REGISTER_TILE = 64


def resolve_state_in_registers(
    choice: bool | None, dot_precision: str, weight_shapes: tuple[tuple[int, ...], ...]
) -> bool:
    """Whether a call's forward and regeneration hold the state in registers.

    choice: `TritonOptions.state_in_registers` (True / False as given; None decides);
    dot_precision: the resolved precision ("ieee", "tf32", "bf16"); weight_shapes: the
    memory's weight shapes per layer, [..., out, in]. None -> True for bf16 or tf32 dots
    when every layer's [out, in] tile is at most 64 x 64."""
    if choice is not None:
        return choice
    small = all(max(shape[-2:]) <= _REGISTER_TILE for shape in weight_shapes)
    return small and dot_precision in _REGISTER_PRECISIONS


@dataclasses.dataclass(frozen=True)
class TritonOptions:
    """How the Triton backend computes (not what: every choice gives the same function).

    save_every: chunk segments per checkpoint (the forward stores the state entering every
        save_every-th segment).
    regenerate_groups: checkpoint groups the backward takes per step: it regenerates
        their segment-entry states in one launch, the groups in parallel, then walks them in
        one backward launch. The scratch holds regenerate_groups x save_every entry states
        (weights and momentum) per (batch, head).
    dot_precision: "auto" (the default, `resolve_dot_precision`: bf16 operands for bf16
        inputs, as under bf16 autocast; tf32 for fp16 inputs; fp32 dots for fp32 inputs;
        `torch.set_float32_matmul_precision("high")` / `("medium")` ask for tf32 / bf16
        whatever the inputs), "ieee" (fp32 tl.dot inputs exactly), "tf32" (faster on
        tensor cores, about 1e-3 relative) or "bf16" (operands rounded to bfloat16, fp32
        accumulation and state: the fastest, and the fewest registers and spills; within
        3e-2 of the float64 reference on an H200; the interpreter's bf16 dots are not a
        judge). Resolved when a call starts.
    backward: "split" (three backward kernels: the retrieval's adjoint in a pass parallel
        over segments, a sequential pass for the state's, the gates' in a pass parallel
        over segments; the sequential chain is short) or "torch" (each checkpoint group
        recomputed with the PyTorch chunked form under autograd).
    state_in_registers: True: the forward kernel (and the backward's regeneration of
        segment-entry states) holds the running weights and momentum in registers across
        chunk steps instead of passing them through global memory at every step: less
        memory traffic and no barrier per step, for four state tiles held through the whole
        walk (more registers a thread). False: through global memory, in two slots. None
        (the default, `resolve_state_in_registers`): registers for bf16 or tf32 dots and
        weight tiles up to 64 x 64, where they are faster; global memory otherwise, where
        the register variant spills. Same results either way.
    overlap_backward: True: on CUDA the backward regenerates the next block's entry states
        and runs its retrieval pass on a second stream while the sequential pass walks the
        current block (that pass runs one program per (batch, head): at long T and small
        batch it leaves most multiprocessors idle). The same kernels on the same values,
        so the same results; the scratch of two blocks is live at once. False: one stream.
    """

    save_every: int = 8
    regenerate_groups: int = 4
    dot_precision: str = "auto"
    backward: str = "split"
    state_in_registers: bool | None = None
    overlap_backward: bool = False

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
        if self.state_in_registers is not None and not isinstance(self.state_in_registers, bool):
            raise ValueError(
                "state_in_registers must be True, False or None (decided per call), "
                f"got {self.state_in_registers!r}"
            )
        if not isinstance(self.overlap_backward, bool):
            raise ValueError(
                f"overlap_backward must be True or False, got {self.overlap_backward!r}"
            )
        if self.backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {BACKWARDS}, got {self.backward!r}")


DEFAULT_OPTIONS = TritonOptions()
