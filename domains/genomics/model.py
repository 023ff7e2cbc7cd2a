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
    """A residual convolution over the embeddings that may also patch them:
    x [B, T, D], lengths [B] -> h [B, ceil(T / stride), D], lengths [B] in patches.

    Each output sees `width` neighbouring bases around its patch of `stride` bases, so the
    mixer starts from k-mer features (the motifs a k-mer model counts) instead of single
    bases, which a few hundred sequences are too few to assemble; h = mean of the patch's
    embeddings (padding as zero) + GELU(conv). A stride above 1 shortens the sequence the
    mixer walks by that factor (as k-mer tokenisers do), and the mixer's cost with it.
    Patches start at each sequence's first base; padding embeds to zero and the patches past
    a sequence's end are zeroed (the convolution's bias and neighbours reach them), so a
    patch's features do not depend on how much padding follows its sequence."""

    def __init__(self, dim: int, width: int, stride: int = 1):
        super().__init__()
        if width < 1 or width % 2 == 0:
            raise ValueError(f"stem_width must be an odd number >= 1 (or 0: none), got {width}")
        if not 1 <= stride <= width:
            raise ValueError(
                f"stem_stride must be between 1 and stem_width ({width}) so that every base "
                f"is read, got {stride}"
            )
        self.width, self.stride = width, stride
        self.conv = nn.Conv1d(dim, dim, width, stride=stride)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        T, s = x.shape[1], self.stride
        patches = -(-T // s)
        # output j reads bases [j*s - left, j*s - left + width): its patch [j*s, j*s + s)
        # and (width - s) neighbours around it (width // 2 each side at stride 1)
        left = (self.width - s) // 2
        right = (patches - 1) * s + self.width - left - T
        channels = x.transpose(1, 2)  # [B, D, T]
        h = F.gelu(self.conv(F.pad(channels, (left, right))))
        skip = channels
        if s > 1:
            skip = F.avg_pool1d(F.pad(channels, (0, patches * s - T)), s)
        h = (skip + h).transpose(1, 2)  # [B, patches, D]
        patch_lengths = -(-lengths // s)
        keep = torch.arange(patches, device=x.device) < patch_lengths.unsqueeze(1)
        return h * keep.unsqueeze(-1).to(h.dtype), patch_lengths


class DNAClassifierNet(nn.Module):
    """ids [B, T] (0 = right padding), lengths [B] -> logits [B, num_classes].

    stem_width: the width of the `MotifStem` convolution before the backbone (0: none).
    stem_stride: bases per position the backbone reads (the stem's patch; 1: every base).
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
        stem_stride: int = 1,
        kmer_size: int = 0,
    ):
        super().__init__()
        if rc_mode not in RC_MODES:
            raise ValueError(f"rc_mode must be one of {RC_MODES}, got {rc_mode!r}")
        if num_classes < 2:
            raise ValueError(f"a classifier needs at least 2 classes, got {num_classes}")
        self.bidirectional, self.rc_mode = bidirectional, rc_mode
        self.embedding = nn.Embedding(VOCAB_SIZE, dim, padding_idx=PAD_ID)
        self.stem = MotifStem(dim, stem_width, stem_stride) if stem_width else None
        self.backbone = Backbone(
            dim, depth, mixer=mixer, mixer_options=mixer_options, heads=heads, dropout=dropout
        )
        self.classifier = nn.Linear(dim, num_classes)
        self.kmer = KmerProfileHead(kmer_size, num_classes) if kmer_size else None

    def encode(self, ids: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Features of right-padded ids [B, T]: ([B, T', D], lengths [B] in positions of
        T'), T' = ceil(T / stem_stride) (T without a stem)."""
        views = [ids]
        if self.bidirectional:
            views.append(reverse_within_length(ids, lengths))
        # the directions are independent sequences through the same weights: one backbone
        # call on their concatenation costs one pass of per-operation overhead, not two.
        # With a patching stem the backward reading's patches start at the last base, so
        # its patch j and the forward one it is added to overlap by all but < stride bases.
        x = self.embedding(torch.cat(views))
        if self.stem is not None:
            x, both_lengths = self.stem(x, torch.cat([lengths] * len(views)))
            lengths = both_lengths[: ids.shape[0]]
        h, _ = self.backbone(x)
        parts = h.chunk(len(views))
        features = parts[0]
        if self.bidirectional:
            features = features + reverse_within_length(parts[1], lengths)
        return features, lengths

    def pooled_logits(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Masked mean over each sequence's positions (patches), then the linear head:
        [B, classes]."""
        h, lengths = self.encode(ids, lengths)
        mask = (torch.arange(h.shape[1], device=h.device) < lengths.unsqueeze(1)).to(h.dtype)
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
