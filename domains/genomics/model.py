"""DNA classifier network: embedding -> local stem -> Backbone (any mixer) -> masked mean
pool -> linear, plus a linear read-out of the sequence's k-mer profile."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from titans_seq.backbone import Backbone

from .kmer_profile import KmerProfileHead
from .tokenizer import PAD_ID, VOCAB_SIZE, reverse_complement_ids

RC_MODES = ("none", "augment", "posthoc", "conjoin")
# the modes that train on random strand flips
FLIPPING_MODES = ("augment", "posthoc")


def conjoins_strands(rc_mode: str, training: bool) -> bool:
    """Whether a classifier in `rc_mode` averages the logits of both strands: always for
    "conjoin", outside training for "posthoc" (trained on random strand flips, one pass a
    sequence; predictions and validation read both strands)."""
    return rc_mode == "conjoin" or (rc_mode == "posthoc" and not training)


def reverse_within_length(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence's first `length` positions, leaving right padding in place.

    x: [B, T, ...]; lengths: [B]. Applying it twice gives x back (on the valid positions).
    """
    T = x.shape[1]
    positions = torch.arange(T, device=x.device)
    source = torch.where(
        positions < lengths.unsqueeze(1), lengths.unsqueeze(1) - 1 - positions, positions
    )  # [B, T]
    index = source.view(*source.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class MotifStem(nn.Module):
    """A residual convolution over the embeddings: x + GELU(conv_k(x)), [B, T, D] -> [B, T, D].

    Each position sees its `width` neighbours, so the mixer starts from k-mer features (the
    motifs a k-mer model counts) instead of single bases, which a few hundred sequences are
    too few to assemble. Padding embeds to zero and `keep` [B, T] zeroes the output there
    (the convolution's bias and neighbours reach it), so a position's features do not
    depend on how much padding follows its sequence."""

    def __init__(self, dim: int, width: int):
        super().__init__()
        if width < 1 or width % 2 == 0:
            raise ValueError(f"stem_width must be an odd number >= 1 (or 0: none), got {width}")
        self.conv = nn.Conv1d(dim, dim, width, padding=width // 2)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        h = x + F.gelu(self.conv(x.transpose(1, 2)).transpose(1, 2))
        return h * keep.unsqueeze(-1).to(h.dtype)


class DNAClassifierNet(nn.Module):
    """ids [B, T] (0 = right padding), lengths [B] -> logits [B, num_classes].

    stem_width: the width of the `MotifStem` convolution before the backbone (0: none).
    kmer_size: k of the `KmerProfileHead` whose logits are added to the backbone's (0: none).
    bidirectional: the backbone also reads each sequence backwards (the same weights, each
        sequence reversed within its own length so padding never comes first) and the two
        per-position outputs are summed, as in BiMamba/Caduceus weight-tied encoders.
    rc_mode: "conjoin" averages the logits of a sequence and of its reverse complement, so
        predictions are exactly reverse-complement invariant; "augment" only changes
        training (the task flips strands at random); "posthoc" trains as "augment" and
        averages both strands' logits outside training (post-hoc conjoining: invariant
        predictions from a one-pass training step); "none" uses the given strand.
    """

    def __init__(
        self,
        num_classes: int,
        dim: int = 64,
        depth: int = 2,
        mixer: str = "lmm",
        heads: int = 4,
        mixer_options: dict | None = None,
        bidirectional: bool = True,
        rc_mode: str = "conjoin",
        dropout: float = 0.1,
        stem_width: int = 0,
        kmer_size: int = 0,
    ):
        super().__init__()
        if rc_mode not in RC_MODES:
            raise ValueError(f"rc_mode must be one of {RC_MODES}, got {rc_mode!r}")
        if num_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {num_classes}")
        self.bidirectional, self.rc_mode = bidirectional, rc_mode
        self.embedding = nn.Embedding(VOCAB_SIZE, dim, padding_idx=PAD_ID)
        self.stem = MotifStem(dim, stem_width) if stem_width else None
        self.backbone = Backbone(
            dim, depth, mixer=mixer, mixer_options=mixer_options, heads=heads, dropout=dropout
        )
        self.classifier = nn.Linear(dim, num_classes)
        self.kmer = KmerProfileHead(kmer_size, num_classes) if kmer_size else None

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Per-position features [B, T, D] of right-padded ids [B, T]."""
        views = [ids]
        if self.bidirectional:
            views.append(reverse_within_length(ids, lengths))
        # the directions are independent sequences through the same weights: one backbone
        # call on their concatenation costs one pass of per-operation overhead, not two
        x = self.embedding(torch.cat(views))
        if self.stem is not None:
            valid = torch.cat([lengths] * len(views))
            x = self.stem(x, torch.arange(x.shape[1], device=x.device) < valid.unsqueeze(1))
        h, _ = self.backbone(x)
        parts = h.chunk(len(views))
        features = parts[0]
        if self.bidirectional:
            features = features + reverse_within_length(parts[1], lengths)
        return features

    def pooled_logits(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Masked mean over each sequence's positions, then the linear head: [B, classes]."""
        h = self.encode(ids, lengths)
        mask = (torch.arange(ids.shape[1], device=ids.device) < lengths.unsqueeze(1)).to(h.dtype)
        pooled = (h * mask.unsqueeze(-1)).sum(1) / lengths.clamp_min(1).unsqueeze(1).to(h.dtype)
        return self.classifier(pooled)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        logits = self.backbone_logits(ids, lengths)
        if self.kmer is not None:  # the same for both strands: added once
            logits = logits + self.kmer(ids, lengths)
        return logits

    def backbone_logits(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """The pooled logits of the given strand, or both strands' averaged when the
        classifier conjoins them (`rc_mode`)."""
        if not conjoins_strands(self.rc_mode, self.training):
            return self.pooled_logits(ids, lengths)
        # both strands in one batch [2B, T]; the logits are averaged per sequence
        rc = reverse_complement_ids(ids, lengths)
        both = self.pooled_logits(torch.cat([ids, rc]), torch.cat([lengths, lengths]))
        forward_strand, reverse_strand = both.chunk(2)
        return 0.5 * (forward_strand + reverse_strand)
