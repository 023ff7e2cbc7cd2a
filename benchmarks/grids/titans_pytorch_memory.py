"""titans-pytorch's neural memory as a titans-seq mixer, for the side-by-side studies
(`lm_long_context.py --mixers tpm`).

lucidrains' `titans_pytorch.NeuralMemory` (0.5.5) is the memory most users try first: a
memory MLP (depth 2, expansion 4, its defaults) whose weights take a gradient step per
chunk of `chunk_size` tokens, with learned per-token step sizes, momentum and decay, its own
q/k/v projections and pre-RMS norm. Here it is the whole mixer of a block, as the `lmm`
mixer is the Titans memory alone. Its state is titans-pytorch's `NeuralMemState` (the
memory's weights after the last full chunk, the tokens of the chunk being filled, momentum),
so a prompt can be read in pieces and decoded token by token, as its own inference does.

    pip install --find-links ../shared/wheels titans-pytorch==0.5.5   # or from PyPI

Importing this module registers the mixer as "titans_pytorch_memory".
"""

from __future__ import annotations

import dataclasses

import torch

from titans_seq.mixers.base import SequenceMixer
from titans_seq.mixers.registry import register_mixer
from titans_seq.mixers.state import MixerState

NAME = "titans_pytorch_memory"


def _map_memory_state(state, fn):
    """titans-pytorch's NeuralMemState (a named tuple holding a TensorDict) with `fn` applied
    to every tensor in it."""
    from tensordict import TensorDict
    from titans_pytorch.neural_memory import NeuralMemState

    def walk(value):
        if isinstance(value, torch.Tensor):
            return fn(value)
        if isinstance(value, TensorDict):
            return value.apply(fn)
        if isinstance(value, tuple):
            return tuple(walk(v) for v in value)
        return value

    return NeuralMemState(*walk(tuple(state)))


def _memory_tensors(value):
    """Every tensor of a NeuralMemState (or of any part of one)."""
    from tensordict import TensorDict

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, TensorDict):
        yield from value.values(include_nested=True, leaves_only=True)
    elif isinstance(value, tuple):
        for item in value:
            yield from _memory_tensors(item)


@dataclasses.dataclass
class NeuralMemoryState(MixerState):
    """memory: titans-pytorch's NeuralMemState after the tokens read so far."""

    memory: object = None

    def detach(self):
        return dataclasses.replace(self, memory=_map_memory_state(self.memory, torch.Tensor.detach))

    def to(self, *args, **kwargs):
        moved = _map_memory_state(self.memory, lambda t: t.to(*args, **kwargs))
        return dataclasses.replace(self, memory=moved)

    def num_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in _memory_tensors(self.memory))


@register_mixer(NAME)
class TitansPytorchMemory(SequenceMixer):
    """x [B, T, D] -> y [B, T, D]: titans-pytorch's NeuralMemory, heads of D / heads."""

    def __init__(self, dim: int, heads: int = 4, chunk_size: int = 8):
        super().__init__(dim)
        from titans_pytorch import NeuralMemory

        if dim % heads:
            raise ValueError(f"dim {dim} must be divisible by heads {heads}")
        self.heads, self.chunk_size = heads, chunk_size
        self.memory = NeuralMemory(
            dim=dim, chunk_size=chunk_size, heads=heads, dim_head=dim // heads
        )
        # its per-head initial weights are expanded views of one tensor: an optimizer's
        # in-place step (AdamW's weight decay) refuses them, so each gets its own storage
        with torch.no_grad():
            for parameter in self.memory.parameters():
                parameter.data = parameter.data.clone()

    def signature(self) -> tuple:
        return (NAME, self.dim, self.heads, self.chunk_size)

    def mix(self, x: torch.Tensor, state: NeuralMemoryState | None):
        position = 0 if state is None else state.position
        memory = None if state is None else state.memory
        outputs = []
        for start, stop in pieces(position, x.shape[1], self.chunk_size):
            y, memory = self.memory(x[:, start:stop], state=memory)
            outputs.append(y)
        y = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)
        position += x.shape[1]
        return y, NeuralMemoryState(self.signature(), x.shape[0], position, memory=memory)


def pieces(position: int, length: int, chunk_size: int) -> list[tuple[int, int]]:
    """The [start, stop) pieces of a call of `length` tokens at stream `position` that
    titans-pytorch reads as one shot would: NeuralMemory (0.5.5) continues a state exactly
    with whole chunks or single tokens, so the tokens that fill the current chunk go one at
    a time, the whole chunks after them in one call, and the remainder one at a time (from
    a fresh state, everything up to the last whole chunk goes at once)."""
    fill = min((-position) % chunk_size, length)
    whole = (length - fill) // chunk_size * chunk_size
    out = [(i, i + 1) for i in range(fill)]
    if whole:
        out.append((fill, fill + whole))
    return out + [(i, i + 1) for i in range(fill + whole, length)]
