"""SVF experts on disk: the z vectors of one task (plus any extra trained tensors) in one
checksummed safetensors file whose JSON metadata names the base model and its hash.

An expert only means something on the weights it was trained on, so the SHA-256 of the
base model's tensors travels with it and loading onto another base is refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..errors import UserError
from ..training.checkpoint import (
    CheckpointError,
    load_weights,
    safetensors_metadata,
    save_weights,
)

EXPERT_FORMAT = "titans-seq-svf-expert"
EXPERT_VERSION = 1
METADATA_KEY = "titans_seq.expert"
Z_PREFIX, EXTRA_PREFIX = "z/", "extra/"


class ExpertMismatch(UserError):
    """An expert does not belong to the model it is loaded onto."""


@dataclass
class Expert:
    """The singular-value scales of one task.

    z: target name -> z ([r] for a linear layer, [H, r] for a per-head memory matrix).
    extra: parameter name -> tensor, for parameters trained in full beside z (e.g. a new
        classification head); empty for a pure SVF expert.
    base_sha256: digest of the base model's tensors (`titans_seq.training.checkpoint.
        tensor_digest` of its state dict before adaptation).
    """

    z: dict[str, torch.Tensor]
    base_sha256: str
    base_name: str = ""
    task: str = ""
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def num_parameters(self) -> int:
        return sum(t.numel() for t in self.z.values()) + sum(t.numel() for t in self.extra.values())

    def describe(self) -> dict:
        """The JSON stored in the file's metadata."""
        return {
            "format": EXPERT_FORMAT,
            "version": EXPERT_VERSION,
            "base_sha256": self.base_sha256,
            "base_name": self.base_name,
            "task": self.task,
            "targets": {name: list(t.shape) for name, t in self.z.items()},
            "extra": {name: list(t.shape) for name, t in self.extra.items()},
            "num_parameters": self.num_parameters,
        }


def save_expert(path: str | Path, expert: Expert) -> Path:
    """Write `expert` atomically to `path` (safetensors; checksum and JSON in its metadata)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {Z_PREFIX + k: v for k, v in expert.z.items()}
    tensors.update({EXTRA_PREFIX + k: v for k, v in expert.extra.items()})
    save_weights(path, tensors, metadata={METADATA_KEY: expert.describe()})
    return path


def read_expert(path: str | Path) -> Expert:
    """Load and verify an expert file; a damaged or foreign file raises CheckpointError."""
    path = Path(path)
    tensors = load_weights(path, require_digest=True)
    raw = safetensors_metadata(path.read_bytes()).get(METADATA_KEY)
    if raw is None:
        raise CheckpointError(f"{path} is a safetensors file but not a titans-seq SVF expert")
    info = json.loads(raw)
    if info.get("format") != EXPERT_FORMAT:
        raise CheckpointError(f"{path} is not a titans-seq SVF expert ({info.get('format')!r})")
    if info.get("version", 0) > EXPERT_VERSION:
        raise CheckpointError(
            f"{path} was written by a newer titans-seq (expert format {info['version']}); "
            "upgrade to read it"
        )
    z = {k[len(Z_PREFIX) :]: v for k, v in tensors.items() if k.startswith(Z_PREFIX)}
    extra = {k[len(EXTRA_PREFIX) :]: v for k, v in tensors.items() if k.startswith(EXTRA_PREFIX)}
    return Expert(z, info["base_sha256"], info.get("base_name", ""), info.get("task", ""), extra)


def as_expert(source: Expert | str | Path) -> Expert:
    return source if isinstance(source, Expert) else read_expert(source)
