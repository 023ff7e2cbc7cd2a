"""`MemoryConfig`: the Titans memory's options, validated once and passed whole.

Every mixer built on the memory (LMM, MAG, MAL, MAC) takes one `memory=` option: a
`MemoryConfig`, or a mapping of its fields (as recipes write it:
`mixer_options: {window: 128, memory: {chunk_size: 32}}`). The fields may also be given flat
among the mixer's options (`chunk_size=32`, and `memory_depth` / `memory_expansion` for
`depth` / `expansion`), as models saved before the nested form store them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from ..ops.lmm.anchor import check_forget_toward
from ..ops.lmm.memory_mlp import ACTIVATIONS
from ..ops.lmm.operand_precision import check_operand_precision
from ..ops.lmm.triton.options import TritonOptions
from ..typed_config import build_dataclass

# inner_grad_clip="auto" = this * sqrt(head_dim): the surprise ||u_t|| grows like sqrt(d) (the
# error f(k) - v has d entries); 2 sqrt(d) lets 85-99% of writes through unclipped in trained
# memories (about 93% on average)
AUTO_CLIP_PER_SQRT_DIM = 2.0

# flat option name (as a mixer option) -> MemoryConfig field
FLAT_ALIASES = {"memory_depth": "depth", "memory_expansion": "expansion"}

# The mixers built on the memory, and the options whose defaults changed with the stable
# parametrisation: a model saved before (format versions that predate it) was trained with
# these values, so loading it pins them (`titans_seq.backbone.pin_saved_defaults`).
MEMORY_MIXERS = ("lmm", "mac", "mag", "mal")
PREVIOUS_MEMORY_DEFAULTS = {"theta_max": 1.0, "inner_grad_clip": 1.0, "damped_momentum": False}
# The default step bound, whatever the chunk size: the chunk size is a parallelisation knob,
# and a bound that moved with it (1 / chunk_size, the default until format versions LM 3,
# forecaster 4, DNA classifier 3, pretrained DNA backbone 3) changed the memory's learning
# rate with it. Models saved with that default load with it (`CHUNK_COUPLED_DEFAULTS`).
DEFAULT_THETA_MAX = 1.0 / 16
CHUNK_COUPLED_DEFAULTS = {"theta_max": None}


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """The neural memory's options (docs/architecture.md, "Stable parametrisation").

    Attributes:
        chunk_size: tokens per inner mini-batch C (the memory takes its inner gradients at
            the weights entering the chunk).
        depth: layers of the memory MLP (1 = linear memory).
        expansion: hidden width of the memory MLP as a multiple of the head width d.
        activation: "silu" or "gelu" between memory layers.
        conv_size: depthwise causal conv kernel on q/k/v (0 or 1 = no conv).
        use_momentum, use_forgetting: the paper's ablations (surprise momentum eta, decay
            alpha).
        theta_max: upper bound of a token's total write theta_t / (1 - eta_t), the same for
            every chunk size (default 1/16); None = 1 / chunk_size, the bound that moves with
            the chunk size (the former default, kept for models saved with it).
        inner_grad_clip: safety bound on each token's inner-gradient norm; "auto" =
            2 sqrt(d) (active on a few percent of writes); None = off.
        damped_momentum: theta_t = theta_max sigmoid(.) (1 - eta_t) instead of theta_max
            sigmoid(.), so a momentum near 1 slows the memory instead of amplifying writes.
        triton: how the Triton backend computes (`TritonOptions`, or a mapping of its
            fields: save_every, regenerate_groups, dot_precision, backward,
            state_in_registers, overlap_backward); None: its defaults. Never changes the
            function, and the other backends ignore it.
        forget_toward: what the forgetting gate decays the weights toward: "zero" (the
            paper's) or "initial", the learned initial weights W_0 (W_t = (1 - alpha_t)
            W_{t-1} + alpha_t W_0 + S_t), so that over a long stream the memory keeps what
            training put in W_0; runs the PyTorch backends (not the Triton kernels).
        operand_precision: "fp32", or "bf16" / "tf32" to round the operands of the memory's
            products in the PyTorch steps as the Triton kernels' dot precisions of those
            names do (`ops/lmm/operand_precision.py`): a GPU's memory arithmetic reproduced
            on any device, for studying the precisions. Runs the eager "torch" backend (the
            layer's backend must be "auto" or "torch").
    """

    chunk_size: int = 16
    depth: int = 2
    expansion: float = 1.0
    activation: str = "silu"
    conv_size: int = 4
    use_momentum: bool = True
    use_forgetting: bool = True
    theta_max: float | None = DEFAULT_THETA_MAX
    inner_grad_clip: float | str | None = "auto"
    damped_momentum: bool = True
    forget_toward: str = "zero"
    triton: TritonOptions | None = None
    operand_precision: str = "fp32"

    def __post_init__(self) -> None:
        _check_int("chunk_size", self.chunk_size, 1)
        _check_int("memory depth", self.depth, 1, alias="memory_depth")
        _check_int("conv_size", self.conv_size, 0)
        if isinstance(self.expansion, bool) or not _is_number(self.expansion):
            raise ConfigError(f"memory_expansion must be a number > 0, got {self.expansion!r}")
        if not self.expansion > 0:
            raise ConfigError(f"memory_expansion must be > 0, got {self.expansion!r}")
        if self.activation not in ACTIVATIONS:
            raise ConfigError(
                f"activation must be one of {list(ACTIVATIONS)}, got {self.activation!r}"
            )
        for name in ("use_momentum", "use_forgetting", "damped_momentum"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.theta_max is not None and (
            isinstance(self.theta_max, bool)
            or not _is_number(self.theta_max)
            or not self.theta_max > 0
        ):
            raise ConfigError(f"theta_max must be > 0 or None, got {self.theta_max!r}")
        clip = self.inner_grad_clip
        if (
            clip is not None
            and clip != "auto"
            and (isinstance(clip, (bool, str)) or not _is_number(clip) or not clip > 0)
        ):
            raise ConfigError(f"inner_grad_clip must be > 0, 'auto' or None, got {clip!r}")
        check_operand_precision(self.operand_precision)
        check_forget_toward(self.forget_toward)

    # -- resolved values ------------------------------------------------------------------
    @property
    def step_bound(self) -> float:
        """theta_max resolved: 1 / chunk_size when None."""
        return 1.0 / self.chunk_size if self.theta_max is None else self.theta_max

    def clip_bound(self, head_dim: int) -> float | None:
        """inner_grad_clip with "auto" resolved for heads of width `head_dim`."""
        if self.inner_grad_clip == "auto":
            return AUTO_CLIP_PER_SQRT_DIM * math.sqrt(head_dim)
        return self.inner_grad_clip

    def memory_widths(self, head_dim: int) -> list[int]:
        """Widths of the memory MLP's layers: [d, hidden, ..., hidden, d]."""
        hidden = max(1, round(head_dim * self.expansion))
        return [head_dim] + [hidden] * (self.depth - 1) + [head_dim]

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_options(
        cls, memory: MemoryConfig | Mapping | None = None, flat: Mapping | None = None
    ) -> MemoryConfig:
        """A config from `memory=` (a MemoryConfig or a mapping of its fields) and the flat
        memory options given beside it; a field given both ways is an error."""
        unknown = sorted(set(flat or {}) - flat_memory_keys())
        if unknown:
            raise ConfigError(
                f"unknown memory option(s) {unknown}; given flat, the memory's options are "
                f"{sorted(flat_memory_keys())}"
            )
        flat = {FLAT_ALIASES.get(k, k): v for k, v in (flat or {}).items()}
        if isinstance(memory, MemoryConfig):
            if flat:
                raise ConfigError(
                    f"memory option(s) {sorted(flat)} given both flat and as a MemoryConfig; "
                    "set them on the MemoryConfig"
                )
            return memory
        if memory is None:
            memory = {}
        if not isinstance(memory, Mapping):
            raise ConfigError(
                f"memory must be a MemoryConfig or a mapping of its fields, got {memory!r}"
            )
        nested = {FLAT_ALIASES.get(k, k): v for k, v in memory.items()}
        both = sorted(set(nested) & set(flat))
        if both:
            raise ConfigError(
                f"memory option(s) {both} given both flat and under memory:; give each once"
            )
        return build_dataclass(cls, {**nested, **flat}, "memory")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def flat_memory_keys() -> set[str]:
    """Names accepted flat among a memory mixer's options: the fields, with depth and
    expansion as memory_depth and memory_expansion (a mixer's `depth` would read as the
    model's)."""
    fields = {f.name for f in dataclasses.fields(MemoryConfig)}
    return (fields - set(FLAT_ALIASES.values())) | set(FLAT_ALIASES)


def _is_number(value) -> bool:
    return isinstance(value, (int, float))


def _check_int(name: str, value, minimum: int, alias: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        label = alias or name
        raise ConfigError(f"{label} must be an integer >= {minimum}, got {value!r}")
