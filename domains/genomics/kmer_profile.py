"""A sequence's k-mer profile and a linear read-out of it: the bag-of-k-mers model that
works from a few hundred labelled sequences, as a branch of the DNA classifier."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .tokenizer import BASES, PAD_ID

# the tokenizer's ids: padding, then A C G T N in that order; a k-mer is made of A C G T
FIRST_BASE_ID = PAD_ID + 1
NUM_BASES = BASES.index("N")
# the profile's norm as the head reads it: a unit-norm profile spreads over hundreds of
# k-mers (entries of about 0.05), so at the backbone's learning rate the head's logits
# would move slowly; at norm 3 they move as a k-mer model trained alone at 3x that rate,
# which reached its best accuracy within the classifier's epochs (at 1,000 sequences:
# NonTATA 0.838 against 0.817 at norm 1, Cohn 0.703 against 0.702)
PROFILE_SCALE = 3.0


def kmer_profile(ids: torch.Tensor, lengths: torch.Tensor, k: int) -> torch.Tensor:
    """Counts of every k-mer of both strands, L2-normalised: ids [B, T] (right-padded),
    lengths [B] -> [B, 4**k] float32.

    A k-mer and its reverse complement are each counted at every window of k bases, so the
    profile is the same for a sequence and its reverse complement; windows that reach
    padding or an N are skipped. Normalising by the norm makes the profile independent of
    the sequence's length for a sequence made of repeats of one motif set, and of how much
    padding follows it."""
    B, T = ids.shape
    out = torch.zeros(B, NUM_BASES**k + 1, device=ids.device)  # last column: skipped windows
    if T < k:
        return out[:, :-1]
    base = ids - FIRST_BASE_ID  # A C G T -> 0 1 2 3
    is_base = (base >= 0) & (base < NUM_BASES)
    positions = torch.arange(T, device=ids.device)
    is_base &= positions < lengths.unsqueeze(1)
    base = torch.where(is_base, base, torch.zeros_like(base))
    windows = base.unfold(1, k, 1)  # [B, T-k+1, k]
    valid = is_base.unfold(1, k, 1).all(-1)  # [B, T-k+1]
    powers = NUM_BASES ** torch.arange(k - 1, -1, -1, device=ids.device)  # most significant first
    forward = (windows * powers).sum(-1)
    # the reverse complement reads the complemented bases (3 - b) in reverse order
    reverse = ((NUM_BASES - 1 - windows) * powers.flip(0)).sum(-1)
    skipped = torch.full_like(forward, NUM_BASES**k)
    ones = valid.to(out.dtype)
    out.scatter_add_(1, torch.where(valid, forward, skipped), ones)
    out.scatter_add_(1, torch.where(valid, reverse, skipped), ones)
    return F.normalize(out[:, :-1], dim=1)


class KmerProfileHead(nn.Module):
    """ids [B, T], lengths [B] -> logits [B, num_classes]: a linear map of `kmer_profile`.

    Added to the backbone's logits, it is the k-mer model a user fits first (counts of
    both strands, normalised, then a linear classifier), trained jointly with the
    backbone, which learns what the counts miss (order, position, longer motifs). Its
    logits do not depend on the strand nor on the padding. It reads the profile at norm
    `scale` (see PROFILE_SCALE) and starts at zero, so the untrained classifier's logits
    are the backbone's."""

    def __init__(self, k: int, num_classes: int, scale: float = PROFILE_SCALE):
        super().__init__()
        if k < 1:
            raise ValueError(f"kmer_size must be a positive integer (or 0: none), got {k}")
        self.k, self.scale = k, scale
        self.linear = nn.Linear(NUM_BASES**k, num_classes)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.linear(self.scale * kmer_profile(ids, lengths, self.k))
