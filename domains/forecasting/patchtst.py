"""PatchTST-style baseline (Nie et al. 2023): RevIN -> patches -> bidirectional Transformer
encoder (post-norm, BatchNorm, residual attention) -> flatten head, channel-independent."""

from __future__ import annotations

import math

import torch
from torch import nn

from .model import check_patching, num_patches, patchify
from .revin import RevIN


class PatchBatchNorm(nn.Module):
    """BatchNorm over the width of patch tokens x [B, N, D] (statistics over B and N), the
    normalisation PatchTST prefers to LayerNorm for time series."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class ResidualAttention(nn.Module):
    """Bidirectional multi-head self-attention over x [B, N, D] whose pre-softmax scores
    [B, heads, N, N] are handed on to the next layer and added to its own (PatchTST's
    `res_attention`); forward returns (output [B, N, D], scores)."""

    def __init__(self, dim: int, heads: int, dropout: float):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} is not divisible by heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, previous_scores: torch.Tensor | None):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.heads)  # [B, heads, N, N]
        if previous_scores is not None:
            scores = scores + previous_scores
        weights = torch.softmax(scores, dim=-1)
        y = (weights @ v).transpose(1, 2).reshape(B, N, D)
        return self.dropout(self.out(y)), scores


class PatchTSTLayer(nn.Module):
    """x [B, N, D] -> [B, N, D]: attention -> residual -> BatchNorm; GELU MLP (width
    `ffn_mult` x D) -> residual -> BatchNorm (post-norm, as PatchTST)."""

    def __init__(self, dim: int, heads: int, ffn_mult: int, dropout: float):
        super().__init__()
        self.attention = ResidualAttention(dim, heads, dropout)
        self.attention_norm = PatchBatchNorm(dim)
        self.ffn = nn.Sequential(
            nn.Linear(dim, ffn_mult * dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(ffn_mult * dim, dim),
        )
        self.ffn_norm = PatchBatchNorm(dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, scores: torch.Tensor | None):
        y, scores = self.attention(x, scores)
        x = self.attention_norm(x + y)
        return self.ffn_norm(x + self.dropout(self.ffn(x))), scores


class PatchTST(nn.Module):
    """x [B, L, C] -> [B, H, C]: every channel a separate sequence of N patch tokens (the
    window padded at the end by `stride` repeats of its last value), a learned position per
    patch, `depth` encoder layers that see every patch (no causal mask), and one linear map
    from the N x D flattened tokens to the horizon, shared across channels. Window statistics
    are removed and restored by RevIN (`center`: the level, see `RevIN`). The paper's
    supervised model, at the harness's width and depth; its FFN is 2x the width (d_ff 256 at
    d_model 128 in the paper)."""

    def __init__(
        self,
        num_channels: int,
        lookback: int,
        horizon: int,
        dim: int = 64,
        depth: int = 2,
        heads: int = 4,
        patch_len: int = 16,
        stride: int = 8,
        dropout: float = 0.1,
        ffn_mult: int = 2,
        center: str = "mean",
    ):
        super().__init__()
        check_patching(lookback, patch_len, stride)
        self.lookback, self.horizon, self.num_channels = lookback, horizon, num_channels
        self.patch_len, self.stride = patch_len, stride
        self.num_patches = num_patches(lookback, patch_len, stride)
        self.revin = RevIN(num_channels, center=center)
        self.patch_embed = nn.Linear(patch_len, dim)
        self.position = nn.Parameter(torch.empty(self.num_patches, dim).uniform_(-0.02, 0.02))
        self.embed_dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            PatchTSTLayer(dim, heads, ffn_mult, dropout) for _ in range(depth)
        )
        self.head = nn.Linear(self.num_patches * dim, horizon)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, C = x.shape
        if L != self.lookback or C != self.num_channels:
            raise ValueError(
                f"expected x of shape [B, {self.lookback}, {self.num_channels}], "
                f"got {tuple(x.shape)}"
            )
        z, stats = self.revin.normalize(x)
        series = z.transpose(1, 2).reshape(B * C, L)  # channel independence
        patches = patchify(series, self.patch_len, self.stride)  # [B*C, N, patch_len]
        tokens = self.embed_dropout(self.patch_embed(patches) + self.position)
        scores = None
        for layer in self.layers:
            tokens, scores = layer(tokens, scores)
        out = self.head(tokens.flatten(1)).view(B, C, self.horizon).transpose(1, 2)
        return self.revin.denormalize(out, stats)
