"""The Triton backend of the memory op: fused forward and backward kernels.

    options.py    TritonOptions: checkpoint interval, dot-operand precision, backward form,
                  where the forward holds the state
    forward.py    the forward kernel (one program per (batch, head), every chunk in one launch)
    backward.py   the backward kernels (retrieval / state / gates)
    helpers.py    the kernels' shared device functions (decays, the memory MLP, the clip)
    autograd.py   the autograd function, the checks of what the kernels support, fallbacks
    offline.py    ahead-of-time compilation for a GPU target (registers, spills, shared memory)

Only `options` is imported here: the kernels need the triton package, the options do not.
"""

from .options import (
    BACKWARDS,
    DEFAULT_OPTIONS,
    DOT_PRECISIONS,
    TritonOptions,
    resolve_dot_precision,
    resolve_state_in_registers,
)

__all__ = [
    "BACKWARDS",
    "DEFAULT_OPTIONS",
    "DOT_PRECISIONS",
    "TritonOptions",
    "resolve_dot_precision",
    "resolve_state_in_registers",
]
