"""Which weight matrices of a model singular-value fine-tuning (or LoRA) adapts.

A *target* is one matrix-valued parameter, named as in `model.named_parameters()`
(`"blocks.0.mixer.memory.qkv_proj.weight"`). Candidates are every `nn.Linear` weight and
every initial memory weight W_0 of a `NeuralMemory` (`[H, out, in]`, one matrix per head).
The default takes the candidates inside sequence mixers and MLPs, which is where a
Titans model keeps its learned computation; embeddings, input projections and output
heads stay fixed unless patterns name them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from ..mixers.base import SequenceMixer
from ..mixers.neural_memory import NeuralMemory
from ..nn.mlp import SwiGLU


@dataclass(frozen=True)
class Target:
    """One adapted matrix: `module.<attribute>` is a `[..., out, in]` parameter."""

    module_name: str  # "" for the root module
    attribute: str  # "weight", or "0"/"1" for a memory layer in a ParameterList
    shape: tuple[int, ...]
    in_default: bool  # inside a sequence mixer or an MLP

    @property
    def name(self) -> str:
        return f"{self.module_name}.{self.attribute}" if self.module_name else self.attribute

    @property
    def rank(self) -> int:
        """Singular values per matrix: min(out, in)."""
        return min(self.shape[-2:])

    @property
    def num_singular_values(self) -> int:
        """Entries of the z vector(s): one per singular value of every matrix (per head)."""
        batch = 1
        for size in self.shape[:-2]:
            batch *= size
        return batch * self.rank


def _default_scopes(model: nn.Module) -> list[str]:
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, (SequenceMixer, SwiGLU, NeuralMemory))
    ]


def _inside(name: str, scopes: list[str]) -> bool:
    return any(scope == "" or name == scope or name.startswith(scope + ".") for scope in scopes)


def candidate_targets(model: nn.Module) -> list[Target]:
    """Every matrix SVF can adapt, in `named_modules` order."""
    scopes = _default_scopes(model)
    found: list[Target] = []
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            found.append(
                Target(
                    module_name, "weight", tuple(module.weight.shape), _inside(module_name, scopes)
                )
            )
        elif isinstance(module, NeuralMemory):
            prefix = f"{module_name}.memory_weights" if module_name else "memory_weights"
            for index, weight in enumerate(module.memory_weights):
                found.append(Target(prefix, str(index), tuple(weight.shape), True))
    return found


def select_targets(model: nn.Module, patterns: Sequence[str] | None = None) -> list[Target]:
    """The targets of `model`: the default set, or those whose name matches a pattern.

    patterns: shell-style patterns (`fnmatch`) over target names, e.g.
        `["*.memory.*"]` or `["blocks.1.*", "head.weight"]`. Every pattern must match at
        least one candidate, so that a typo is an error rather than a silently smaller set.
    """
    candidates = candidate_targets(model)
    if patterns is None:
        chosen = [t for t in candidates if t.in_default]
        if not chosen:
            raise ValueError(
                f"{type(model).__name__} holds no linear layer inside a sequence mixer or MLP: "
                "name the matrices to adapt with `targets=[...]` patterns"
            )
        return chosen
    if isinstance(patterns, str):
        raise TypeError("targets must be a list of patterns, not a single string")
    names = [t.name for t in candidates]
    for pattern in patterns:
        if not fnmatch.filter(names, pattern):
            shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
            raise ValueError(f"target pattern {pattern!r} matches no adaptable matrix ({shown})")
    return [t for t in candidates if any(fnmatch.fnmatchcase(t.name, p) for p in patterns)]


def match_parameters(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Names of the parameters matching any of the `fnmatch` patterns, each pattern required
    to match at least one (a typo is an error, not an empty selection)."""
    if isinstance(patterns, str):
        raise TypeError("parameter patterns must be a list, not a single string")
    names = [name for name, _ in model.named_parameters()]
    chosen: list[str] = []
    for pattern in patterns:
        hits = fnmatch.filter(names, pattern)
        if not hits:
            raise ValueError(f"pattern {pattern!r} matches no parameter of the model")
        chosen.extend(h for h in hits if h not in chosen)
    return chosen
