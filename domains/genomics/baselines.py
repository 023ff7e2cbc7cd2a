"""The GenomicsBenchmarks CNN baseline, with the classifier's interface (ids, lengths -> logits).

Followed: the CNN of the benchmark paper (Gresova et al. 2023, "Genomic benchmarks: a
collection of datasets for genomic sequence classification", BMC Genomic Data 24:25) as
published in its repository, `ML-Bioinfo-CEITEC/genomic_benchmarks`,
`src/genomic_benchmarks/models/torch.py` (class `CNN`), with the embedding size 100 of its
`experiments/torch_cnn_experiments`:

    Embedding(vocab, 100)
    Conv1d(100 -> 16, kernel 8) -> BatchNorm1d -> ReLU -> MaxPool1d(2)
    Conv1d(16 -> 8, kernel 8)   -> BatchNorm1d -> ReLU -> MaxPool1d(2)
    Conv1d(8 -> 4, kernel 8)    -> BatchNorm1d -> ReLU -> MaxPool1d(2)
    Flatten -> Linear(flat, 512) -> Linear(512, outputs)

Deviations, each needed by the shared interface and documented in docs/genomics.md:
* `num_classes` logits trained with cross-entropy (the reference has one sigmoid output
  for two classes, trained with binary cross-entropy: the same model family);
* the padding id embeds to a zero vector (`padding_idx`), and every sequence is right-padded
  to the fixed `input_len` inside the network, as the reference pads to the dataset's
  length before the flatten: so a sequence's logits do not depend on how long the other
  sequences of its batch are;
* optional dropout before the dense layers (`dropout`, default 0.0 = the reference: it has
  none), and the same `rc_mode` options as the Titans classifier.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .model import RC_MODES, conjoins_strands
from .tokenizer import PAD_ID, VOCAB_SIZE, reverse_complement_ids

# three (conv kernel 8, pool 2) stages need at least this many positions to leave one
MIN_INPUT_LEN = 57


class GenomicsCNN(nn.Module):
    """ids [B, T] (0 = right padding, T <= input_len), lengths [B] -> logits [B, num_classes].

    input_len: the fixed length every batch is padded to (the flatten needs it); the
        recipes and the estimator use `max_len`. Values below MIN_INPUT_LEN are raised to it.
    """

    def __init__(
        self,
        num_classes: int,
        input_len: int,
        embedding_dim: int = 100,
        channels: tuple[int, int, int] = (16, 8, 4),
        kernel_size: int = 8,
        hidden: int = 512,
        dropout: float = 0.0,
        rc_mode: str = "none",
    ):
        super().__init__()
        if num_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {num_classes}")
        if rc_mode not in RC_MODES:
            raise ValueError(f"rc_mode must be one of {RC_MODES}, got {rc_mode!r}")
        if len(channels) != 3:
            raise ValueError(f"channels must hold 3 sizes (one per block), got {channels!r}")
        self.input_len = max(int(input_len), MIN_INPUT_LEN)
        self.rc_mode = rc_mode
        self.embedding = nn.Embedding(VOCAB_SIZE, embedding_dim, padding_idx=PAD_ID)
        blocks, width = [], embedding_dim
        for out in channels:
            blocks += [
                nn.Conv1d(width, out, kernel_size),
                nn.BatchNorm1d(out),
                nn.ReLU(),
                nn.MaxPool1d(2),
            ]
            width = out
        self.features = nn.Sequential(*blocks)
        length = self.input_len
        for _ in channels:
            length = (length - kernel_size + 1) // 2
        if length < 1:
            raise ValueError(
                f"input_len {input_len} is too short for three conv(kernel {kernel_size}) + "
                "pool(2) blocks"
            )
        self.flat_size = length * channels[-1]
        self.dropout = nn.Dropout(dropout)
        self.dense = nn.Sequential(
            nn.Linear(self.flat_size, hidden), nn.Linear(hidden, num_classes)
        )

    def single_strand_logits(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dim() != 2:
            raise ValueError(f"GenomicsCNN expects ids of shape [B, T], got {tuple(ids.shape)}")
        if ids.shape[1] > self.input_len:
            raise ValueError(
                f"sequences of {ids.shape[1]} positions exceed the CNN's input_len "
                f"{self.input_len}; truncate them (max_len) or build it with a larger input_len"
            )
        ids = F.pad(ids, (0, self.input_len - ids.shape[1]), value=PAD_ID)
        h = self.features(self.embedding(ids).transpose(1, 2))  # [B, C, L]
        return self.dense(self.dropout(h.flatten(1)))

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        logits = self.single_strand_logits(ids)
        if conjoins_strands(self.rc_mode, self.training):
            rc = reverse_complement_ids(ids, lengths)
            logits = 0.5 * (logits + self.single_strand_logits(rc))
        return logits


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters (what the benchmark reports to compare model sizes)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
