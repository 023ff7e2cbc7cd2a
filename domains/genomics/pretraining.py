"""Next-base pretraining on unlabeled DNA: the causal model, its batches, and the transfer of
its embedding + backbone into a `DNAClassifierNet`.

    lm = DNALanguageModel(dim=64, depth=2, mixer="lmm")      # embedding -> Backbone -> head
    logits = lm(ids)                                         # ids [B, T] -> [B, T, VOCAB]
    loss = next_base_loss(logits, ids)                       # padding never counted

A pretrained folder holds the weights (safetensors) and `dna_pretrained.json`, the
architecture (dim, depth, heads, mixer, mixer_options, mlp...) and the name of the weights
file: a pretraining run folder is one (the task writes the JSON, the loop writes
`best_model.safetensors`), and `save_pretrained` writes one from a model in memory.

The backbone is run causally (one direction, no bidirectional merge), so the prediction at
position t sees bases 0..t only. The classifier's bidirectional mode reads each sequence
backwards with the same weights, so the causal weights serve both of its directions as they
are: the parameter names `embedding.*` and `backbone.*` are the classifier's own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from titans_seq.backbone import Backbone, layer_mixer_names, pin_saved_defaults
from titans_seq.training.checkpoint import atomic_write_text, load_weights, save_weights
from titans_seq.training.loop import RUN_CONFIG
from titans_seq.training.model_folder import (
    MANIFEST_FILE,
    require_listed,
    verify_folder,
    write_manifest,
)
from titans_seq.training.tasks import BatchDataset

from .tokenizer import PAD_ID, VOCAB_SIZE, DNATokenizer

PRETRAINED_FILE = "dna_pretrained.json"
# 2: the memory's stable parametrisation; 3: theta_max no longer follows the chunk size;
# 4: MAL's layout "two_layers" (older versions are read with the defaults they were saved
# under: format version n is defaults generation n, see below)
PRETRAINED_FORMAT = 4
# the keys that must agree between a pretrained backbone and the model receiving it
ARCHITECTURE_KEYS = ("dim", "depth", "heads", "mixer", "mixer_options")
# mixer options that change how the computation runs, never the weights or the result
RUNTIME_OPTIONS = {"backend"}
TRANSFERRED_PREFIXES = ("embedding.", "backbone.")


class DNALanguageModel(nn.Module):
    """ids [B, T] (0 = right padding) -> next-base logits [B, T, VOCAB_SIZE].

    logits[:, t] predicts ids[:, t + 1] from ids[:, : t + 1]: the backbone runs causally.
    """

    def __init__(
        self,
        dim: int = 64,
        depth: int = 2,
        mixer: str = "lmm",
        heads: int = 4,
        mixer_options: dict | None = None,
        dropout: float = 0.1,
    ):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB_SIZE, dim, padding_idx=PAD_ID)
        self.backbone = Backbone(
            dim, depth, mixer=mixer, mixer_options=mixer_options, heads=heads, dropout=dropout
        )
        self.head = nn.Linear(dim, VOCAB_SIZE)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 2:
            shape = tuple(ids.shape)
            raise ValueError(f"DNALanguageModel expects ids of shape [B, T], got {shape}")
        h, _ = self.backbone(self.embedding(ids))
        return self.head(h)


def next_base_loss(
    logits: torch.Tensor, ids: torch.Tensor, reduction: str = "mean"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of logits[:, t] against ids[:, t + 1], padding targets excluded.

    logits: [B, T, V]; ids: [B, T]. Returns (loss, number of counted targets); `reduction`
    "mean" averages over the counted targets of the whole batch, "sum" adds them up.
    """
    targets = ids[:, 1:]
    loss = F.cross_entropy(
        logits[:, :-1].float().reshape(-1, logits.shape[-1]),
        targets.reshape(-1),
        ignore_index=PAD_ID,
        reduction="sum",
    )
    count = (targets != PAD_ID).sum()
    if reduction == "mean":
        loss = loss / count.clamp_min(1)
    return loss, count


class CropBatches(BatchDataset):
    """Fixed-length windows of tokenized sequences: one example per `seq_len` bases.

    A sequence of L bases contributes ceil(L / seq_len) examples, so long sequences are
    visited in proportion to their length. With `random_crop` (training) each drawn example
    is a window at a uniformly random start in [0, L - seq_len] (drawn from torch's global
    RNG, which the training loop seeds and checkpoints); without it (validation) example k
    of a sequence is its k-th consecutive window. Windows shorter than `seq_len` (short
    sequences, the last window) are right-padded with PAD_ID, which the loss ignores.
    Batches are (ids [B, seq_len or shorter], lengths [B]).
    """

    def __init__(self, sequences: list[torch.Tensor], seq_len: int, random_crop: bool):
        if seq_len < 2:
            raise ValueError(f"seq_len must be >= 2 (a base and its successor), got {seq_len}")
        sequences = [s for s in sequences if len(s) >= 2]
        if not sequences:
            raise ValueError("no sequence of at least 2 bases to pretrain on")
        self.seq_len, self.random_crop = seq_len, random_crop
        self.lengths = torch.tensor([len(s) for s in sequences])
        self.offsets = torch.cat((torch.zeros(1, dtype=torch.long), self.lengths.cumsum(0)))
        self.tokens = torch.cat(sequences).to(torch.uint8)  # ids 0..5 fit a byte
        windows = -(-self.lengths // seq_len)
        self.example_sequence = torch.repeat_interleave(torch.arange(len(sequences)), windows)
        first = torch.cat((torch.zeros(1, dtype=torch.long), windows.cumsum(0)[:-1]))
        self.example_window = torch.arange(int(windows.sum())) - first[self.example_sequence]

    @classmethod
    def from_strings(
        cls, sequences: list[str], seq_len: int, random_crop: bool, strict: bool = False
    ) -> CropBatches:
        tokenizer = DNATokenizer(strict=strict)
        return cls(
            [tokenizer.encode(s, f"sequence {i}") for i, s in enumerate(sequences)],
            seq_len,
            random_crop,
        )

    def __len__(self) -> int:
        return len(self.example_sequence)

    def get_batch(self, indices):
        index = torch.as_tensor(list(indices), dtype=torch.long)
        seq = self.example_sequence[index]
        length = self.lengths[seq]
        if self.random_crop:
            room = (length - self.seq_len).clamp_min(0)
            start = (torch.rand(len(index)) * (room + 1).double()).long().clamp_max(room)
        else:
            start = self.example_window[index] * self.seq_len
        take = torch.minimum(length - start, torch.tensor(self.seq_len))
        width = int(take.max())
        positions = torch.arange(width)
        source = self.offsets[seq, None] + start[:, None] + positions
        valid = positions < take[:, None]
        ids = torch.where(valid, self.tokens[source.clamp_max(len(self.tokens) - 1)].long(), PAD_ID)
        return ids, take


# ------------------------------------------------------------------ saving and transferring


def architecture_of(model_cfg: Any) -> dict[str, Any]:
    """The architecture keys of a model config (dataclass or dict), as plain JSON values."""
    get = model_cfg.get if isinstance(model_cfg, dict) else lambda k: getattr(model_cfg, k)
    return {key: get(key) for key in ARCHITECTURE_KEYS} | {
        "mixer_options": dict(get("mixer_options") or {})
    }


def write_pretrained_config(
    folder: str | Path, model_cfg: Any, weights_file: str, extra: dict | None = None
) -> Path:
    """Write `folder/dna_pretrained.json` describing the backbone and its weights file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {
        "format_version": PRETRAINED_FORMAT,
        "kind": "dna_next_base",
        "architecture": architecture_of(model_cfg),
        "weights": weights_file,
        **(extra or {}),
    }
    atomic_write_text(folder / PRETRAINED_FILE, json.dumps(meta, indent=2))
    return folder / PRETRAINED_FILE


def save_pretrained(folder: str | Path, model: DNALanguageModel, model_cfg: Any) -> Path:
    """Write a pretrained folder (model.safetensors + dna_pretrained.json) from a model."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(folder / "model.safetensors", {k: v.cpu() for k, v in model.state_dict().items()})
    write_pretrained_config(folder, model_cfg, "model.safetensors")
    write_manifest(folder, ["model.safetensors", PRETRAINED_FILE])
    return folder


def read_pretrained(
    folder: str | Path, allow_unverified: bool = False
) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(metadata, state dict) of a pretrained folder, with errors naming what is missing; a
    `save_pretrained` folder without its manifest is refused unless `allow_unverified`."""
    folder = Path(folder)
    config = folder / PRETRAINED_FILE
    listed = None
    if not config.is_file():
        raise FileNotFoundError(
            f"{folder} is not a pretrained DNA backbone: {PRETRAINED_FILE} is missing (a "
            "dna_pretraining run folder or a folder written by save_pretrained holds one)"
        )
    # a save_pretrained folder is checksummed as a whole; a run folder is not (its weights
    # change at every evaluation), but its weights file carries its own checksum
    if (folder / MANIFEST_FILE).exists() or not (folder / RUN_CONFIG).exists():
        listed = verify_folder(
            folder, required=[PRETRAINED_FILE], allow_unverified=allow_unverified
        )
    try:
        meta = json.loads(config.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{config} is corrupt: {error}") from None
    version = meta.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= PRETRAINED_FORMAT:
        raise ValueError(f"{config}: unsupported format version {version}")
    if version < PRETRAINED_FORMAT:  # pretrained under earlier defaults: its architecture
        arch = meta["architecture"]
        names = layer_mixer_names(arch["mixer"], arch["depth"])
        pinned = pin_saved_defaults(arch.get("mixer_options"), names, generation=version)
        arch["mixer_options"] = pinned[0] if all(p == pinned[0] for p in pinned) else pinned
    weights = require_listed(folder, listed, meta.get("weights"))
    if not weights.is_file():
        raise FileNotFoundError(
            f"{folder}: the weights file {meta['weights']} does not exist yet (a pretraining "
            "run writes it at its first evaluation)"
        )
    return meta, load_weights(weights, require_digest=True)


def check_architecture(pretrained: dict[str, Any], target: dict[str, Any], source: str) -> None:
    """Raise a ValueError listing every architecture key on which the two differ."""
    differences = []
    for key in ARCHITECTURE_KEYS:
        have, want = pretrained.get(key), target.get(key)
        if key == "mixer_options":
            have = {k: v for k, v in (have or {}).items() if k not in RUNTIME_OPTIONS}
            want = {k: v for k, v in (want or {}).items() if k not in RUNTIME_OPTIONS}
        if have != want:
            differences.append(f"{key}: pretrained {have!r}, model {want!r}")
    if differences:
        raise ValueError(
            f"the pretrained backbone in {source} does not match the model's architecture ("
            + "; ".join(differences)
            + "); build the model with the pretrained architecture or pretrain another"
        )


def load_pretrained_backbone(
    model: nn.Module, folder: str | Path, model_cfg: Any, allow_unverified: bool = False
) -> nn.Module:
    """Copy the embedding and backbone weights of a pretrained folder into `model`.

    `model` has `embedding` and `backbone` (a DNAClassifierNet or a DNALanguageModel);
    `model_cfg` its configuration, checked against the pretrained architecture first. Other
    parameters (the classifier head) keep their fresh initialisation. Returns `model`.
    """
    meta, weights = read_pretrained(folder, allow_unverified)
    check_architecture(meta["architecture"], architecture_of(model_cfg), str(folder))
    transferred = {k: v for k, v in weights.items() if k.startswith(TRANSFERRED_PREFIXES)}
    expected = {k for k in model.state_dict() if k.startswith(TRANSFERRED_PREFIXES)}
    missing, unexpected = expected - set(transferred), set(transferred) - expected
    if missing or unexpected:
        raise ValueError(
            f"the pretrained weights in {folder} do not fit the model: missing "
            f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}"
        )
    model.load_state_dict(transferred, strict=False)
    return model
