"""A minimal token model for synthetic tasks: embedding -> Backbone -> linear head."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..backbone import Backbone


class TokenModel(nn.Module):
    """tokens [B, T] (int64) -> (logits [B, T, vocab_size], per-layer states).

    Args:
        vocab_size: number of token ids.
        dim, depth, mixer, mixer_options, heads, mlp_ratio: as for `Backbone`.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 64,
        depth: int = 2,
        mixer: str | Sequence[str] = "lmm",
        mixer_options: Mapping | Sequence[Mapping | None] | None = None,
        heads: int = 1,
        mlp_ratio: float = 4.0,
    ):
        super().__init__()
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        self.embedding = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embedding.weight, std=1.0)  # unit-RMS inputs for the pre-norm stack
        self.backbone = Backbone(
            dim, depth, mixer=mixer, mixer_options=mixer_options, heads=heads, mlp_ratio=mlp_ratio
        )
        self.head = nn.Linear(dim, vocab_size, bias=False)
        nn.init.normal_(self.head.weight, std=dim**-0.5)

    def forward(self, tokens: torch.Tensor, states=None):
        if tokens.dim() != 2 or tokens.dtype != torch.long:
            raise ValueError(
                f"TokenModel expects int64 tokens of shape [B, T], got {tokens.dtype} "
                f"{tuple(tokens.shape)}"
            )
        hidden, states = self.backbone(self.embedding(tokens), states)
        return self.head(hidden), states
