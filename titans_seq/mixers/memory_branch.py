"""Parts of the memory mixers (LMM, MAG, MAL, MAC; see `memory_mixer.MemoryMixer`).

* `gated_readout`: the memory layer's output, proj(norm(reads) * SiLU(gate(x))) (lmm, MAL);
* `persistent_tokens`: the learned persistent tokens [N_p, D] (or None);
* `MemoryBackend`: the mixer's `backend` attribute, checked for the memory op and the
  attention primitive and handed to the NeuralMemory;
* `AttentionBackend`: a hybrid's `attention_backend` attribute, the attention primitive's
  own choice, or (None) the one `backend` stands for.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import BACKENDS as ATTENTION_BACKENDS
from ..attention import resolve_backend as resolve_attention_backend
from ..errors import ConfigError
from ..ops.lmm import resolve_backend as resolve_memory_backend


def check_backend(backend: str) -> None:
    """The backend must be valid for both the memory op and the attention primitive."""
    if not isinstance(backend, str):
        raise ConfigError(f"backend must be a string, got {backend!r}")
    resolve_memory_backend(backend, torch.device("cpu"))  # ValueError listing the choices
    resolve_attention_backend(backend)


def gated_readout(reads: torch.Tensor, x: torch.Tensor, norm, gate, proj) -> torch.Tensor:
    """The memory layer's output [B, T, D]: proj( norm(reads) * SiLU(gate(x)) ), from the
    memory's reads [B, T, H, d] (normed per head) and the layer's input x [B, T, D]."""
    B, T, _ = x.shape
    return proj(norm(reads).reshape(B, T, -1) * F.silu(gate(x)))


def persistent_tokens(count: int, dim: int) -> nn.Parameter | None:
    """N_p learned persistent tokens [count, dim] (N(0, 0.02^2)), or None when count = 0."""
    return nn.Parameter(torch.randn(count, dim) * 0.02) if count else None


class MemoryBackend:
    """Descriptor for a memory mixer's `backend` ("auto", "reference", "chunked", "torch",
    "compiled", "triton"): stored on the mixer's `memory`; never changes parameters or
    states, so a state dict loads across backends."""

    def __get__(self, mixer, owner=None):
        if mixer is None:
            return self
        return mixer.memory.backend

    def __set__(self, mixer, value: str) -> None:
        check_backend(value)
        mixer.memory.backend = value


class AttentionBackend:
    """Descriptor for a hybrid's `attention_backend`: "auto", "sdpa", "flex" or "reference"
    for the attention branch, whatever the memory runs on; None (the default) follows the
    mixer's `backend` ("torch", "chunked" and "compiled" stand for "sdpa", "triton" for
    "flex"). Reading it gives the attention backend a call uses; `attention_backend_choice`
    what was set. Never changes parameters or states."""

    def __get__(self, mixer, owner=None):
        if mixer is None:
            return self
        chosen = mixer.__dict__.get("attention_backend_choice")
        return resolve_attention_backend(mixer.backend if chosen is None else chosen)

    def __set__(self, mixer, value: str | None) -> None:
        if value is not None and value not in ATTENTION_BACKENDS:
            raise ConfigError(
                f"unknown attention_backend {value!r}; choose one of "
                f"{list(ATTENTION_BACKENDS)} or None (follow `backend`)"
            )
        mixer.__dict__["attention_backend_choice"] = value
