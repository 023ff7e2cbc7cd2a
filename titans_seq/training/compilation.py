"""The training steps under `torch.compile` (`train.compile`).

Compiling the model fuses the work around its big operations (the projections' element-wise
gates, norms, activations, layout copies) into a few kernels; the Titans memory's Triton
kernels stay whole inside the graph as custom operators. On a GPU this is where a memory
layer's step loses most of its time at short context. The compilation is a one-off cost
paid at the first step, so "auto" compiles on a CUDA device for runs long enough to repay
it; evaluation, generation and the saved weights use the eager model (the compiled one
shares its parameters).
"""

from __future__ import annotations

import warnings

import torch

# steps a run must still have for "auto" to compile it: the compilation of a model (tens of
# seconds) against the time the fused step saves, a fraction of each step
AUTO_MIN_STEPS = 500


def should_compile(
    setting: bool | str, device: torch.device, remaining_steps: int, sharded: bool = False
) -> bool:
    """Whether the training steps of a run compile: `train.compile` true or false as given;
    "auto" on a CUDA device for at least `AUTO_MIN_STEPS` remaining steps, unless the model
    is sharded (FSDP: its parameter gathers are hooks a whole-model trace breaks at)."""
    if setting == "auto":
        long_enough = remaining_steps >= AUTO_MIN_STEPS
        return torch.device(device).type == "cuda" and long_enough and not sharded
    return bool(setting)


class TrainingForward:
    """What the training steps call the model through: the compiled model, or the eager
    one once compilation has failed (with a warning, once; the step is then redone eagerly,
    so no step is lost to it)."""

    def __init__(self, model: torch.nn.Module, compile_model: bool):
        self.eager = model
        self.model = torch.compile(model) if compile_model else model

    @property
    def compiled(self) -> bool:
        return self.model is not self.eager

    def fall_back(self, error: BaseException) -> None:
        """Use the eager model from now on; `error` is the compilation's failure."""
        warnings.warn(
            f"torch.compile of the model failed ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:300]}); training continues with the eager model "
            "(set train.compile: false to skip the attempt)",
            RuntimeWarning,
            stacklevel=3,
        )
        self.model = self.eager


def compile_errors() -> tuple[type[BaseException], ...]:
    """The exceptions by which `torch.compile` reports that it could not compile (not
    errors in the model's own computation, which eager execution raises too)."""
    from torch._dynamo.exc import TorchDynamoException

    return (TorchDynamoException,)
