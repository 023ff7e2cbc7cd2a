"""Simba-style forecaster: RevIN -> patch tokens -> [mixer, EinFFT] blocks -> linear head."""

from __future__ import annotations

import math

import torch
from torch import nn

from titans_seq.mixers.build import build_mixer
from titans_seq.nn.norm import RMSNorm

from .einfft import EinFFT
from .revin import RevIN


def num_patches(lookback: int, patch_len: int, stride: int) -> int:
    """Patches of a lookback window padded at the end by `stride` steps (as in PatchTST)."""
    return (lookback + stride - patch_len) // stride + 1


class ForecastBlock(nn.Module):
    """x [B, N, D] -> [B, N, D]: norm -> sequence mixer -> residual; norm -> EinFFT -> residual."""

    def __init__(
        self,
        dim: int,
        mixer: str,
        heads: int,
        mixer_options: dict,
        einfft_blocks: int,
        dropout: float,
    ):
        super().__init__()
        self.mixer_norm = RMSNorm(dim)
        self.mixer = build_mixer(mixer, dim=dim, heads=heads, **mixer_options)
        self.mixer.check_finite = False  # patches of a validated series (see SimbaForecaster)
        self.channel_norm = RMSNorm(dim)
        self.channel_mix = EinFFT(dim, num_blocks=einfft_blocks)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.mixer(self.mixer_norm(x))
        x = x + self.dropout(y)
        return x + self.dropout(self.channel_mix(self.channel_norm(x)))


class SimbaForecaster(nn.Module):
    """Channel-independent patch forecaster with any registered sequence mixer.

    forward(x [B, L, C]) -> [B, H, C] (or [B, H, C, Q] with Q quantile levels, in the order
    given by `quantiles`; stored in the buffer `quantile_levels`). Every channel is a
    separate sequence of patch tokens ([B*C, N, D]); the parameters are shared across
    channels, except RevIN's affine terms.
    """

    def __init__(
        self,
        num_channels: int,
        lookback: int,
        horizon: int,
        dim: int = 64,
        depth: int = 2,
        mixer: str = "lmm",
        heads: int = 4,
        mixer_options: dict | None = None,
        patch_len: int = 16,
        stride: int = 8,
        einfft_blocks: int = 4,
        dropout: float = 0.1,
        quantiles: tuple[float, ...] | list[float] = (),
    ):
        super().__init__()
        if patch_len > lookback + stride:
            raise ValueError(
                f"patch_len={patch_len} is longer than lookback+stride={lookback + stride}"
            )
        self.lookback, self.horizon, self.num_channels = lookback, horizon, num_channels
        if any(not 0.0 < q < 1.0 for q in quantiles):
            raise ValueError(f"quantile levels must lie in (0, 1), got {list(quantiles)}")
        self.patch_len, self.stride, self.num_quantiles = patch_len, stride, len(quantiles)
        self.register_buffer("quantile_levels", torch.tensor(list(quantiles), dtype=torch.float32))
        self.num_patches = num_patches(lookback, patch_len, stride)
        self.revin = RevIN(num_channels)
        self.patch_embed = nn.Linear(patch_len, dim)
        self.position = nn.Parameter(torch.randn(self.num_patches, dim) * 0.02)
        self.blocks = nn.ModuleList(
            ForecastBlock(dim, mixer, heads, dict(mixer_options or {}), einfft_blocks, dropout)
            for _ in range(depth)
        )
        self.norm = RMSNorm(dim)
        outputs = horizon * max(1, self.num_quantiles)
        self.head = nn.Linear(self.num_patches * dim, outputs)
        nn.init.normal_(self.head.weight, std=1.0 / math.sqrt(self.num_patches * dim))
        nn.init.zeros_(self.head.bias)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """x [B*C, L] -> patches [B*C, N, patch_len] (end padded by repeating the last value)."""
        padded = torch.cat([x, x[:, -1:].expand(-1, self.stride)], dim=1)
        return padded.unfold(1, self.patch_len, self.stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, C = x.shape
        if L != self.lookback or C != self.num_channels:
            raise ValueError(
                f"expected x of shape [B, {self.lookback}, {self.num_channels}], "
                f"got {tuple(x.shape)}"
            )
        z, stats = self.revin.normalize(x)
        series = z.transpose(1, 2).reshape(B * C, L)  # channel independence
        tokens = self.patch_embed(self.patchify(series)) + self.position
        for block in self.blocks:
            tokens = block(tokens)
        out = self.head(self.norm(tokens).flatten(1))  # [B*C, H*Q]
        if self.num_quantiles:
            out = out.view(B, C, self.horizon, self.num_quantiles).permute(0, 2, 1, 3)
        else:
            out = out.view(B, C, self.horizon).transpose(1, 2)
        return self.revin.denormalize(out, stats)
