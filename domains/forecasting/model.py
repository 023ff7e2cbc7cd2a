"""Simba-style forecaster: RevIN -> patch tokens -> [mixer, EinFFT] blocks -> linear head."""

from __future__ import annotations

import math

import torch
from torch import nn

from titans_seq.mixers.build import build_mixer
from titans_seq.nn.norm import RMSNorm

from .covariate_tokens import NO_COVARIATES, CovariateShape, CovariateTokens
from .einfft import EinFFT
from .revin import RevIN


def num_patches(lookback: int, patch_len: int, stride: int) -> int:
    """Patches of a lookback window padded at the end by `stride` steps (as in PatchTST)."""
    return (lookback + stride - patch_len) // stride + 1


def check_patching(lookback: int, patch_len: int, stride: int) -> None:
    """ValueError unless a window of `lookback` steps (end padded by `stride`) holds a patch."""
    if patch_len > lookback + stride:
        raise ValueError(
            f"patch_len={patch_len} is longer than lookback+stride={lookback + stride}"
        )


def patchify(series: torch.Tensor, patch_len: int, stride: int) -> torch.Tensor:
    """series [N, L] -> patches [N, num_patches, patch_len]: the window padded at the end by
    `stride` repeats of its last value, then cut every `stride` steps."""
    padded = torch.cat([series, series[:, -1:].expand(-1, stride)], dim=1)
    return padded.unfold(1, patch_len, stride)


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

    def forward(self, x: torch.Tensor, state=None):
        """(x [B, N, D] after the block, the mixer's state after these tokens). `state`:
        the mixer's state after earlier tokens of the same sequences (None: none)."""
        y, state = self.mixer(self.mixer_norm(x), state=state)
        x = x + self.dropout(y)
        return x + self.dropout(self.channel_mix(self.channel_norm(x))), state


class SimbaForecaster(nn.Module):
    """Channel-independent patch forecaster with any registered sequence mixer.

    forward(x [B, L, C]) -> [B, H, C] (or [B, H, C, Q] with Q quantile levels, in the order
    given by `quantiles`; stored in the buffer `quantile_levels`). Every channel is a
    separate sequence of patch tokens ([B*C, N, D]); the parameters are shared across
    channels, except RevIN's affine terms. With `covariates` (see `covariate_tokens`), every
    channel's tokens also carry the window's covariates: past [B, L, Kp], future over the
    horizon [B, H, Kf] (extra tokens after the history), static [B, Ks], and the observed
    mask [B, L] of left-padded windows.

    `history` [B, K, L, C] (with `history_past` [B, K, L, Kp] when the model reads past
    covariates): the K lookback windows before x, oldest first. They are streamed through
    the blocks without gradient, each window's tokens after the previous one's, and every
    mixer's state (the Titans memory's weights) is carried into x's window: the forecast
    conditions on K x L more rows at a cost linear in K.

    `center`: the level RevIN measures each window from, "mean", "last" or "trend"
    (see `RevIN`).
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
        covariates: CovariateShape = NO_COVARIATES,
        center: str = "mean",
    ):
        super().__init__()
        check_patching(lookback, patch_len, stride)
        self.lookback, self.horizon, self.num_channels = lookback, horizon, num_channels
        if any(not 0.0 < q < 1.0 for q in quantiles):
            raise ValueError(f"quantile levels must lie in (0, 1), got {list(quantiles)}")
        self.patch_len, self.stride, self.num_quantiles = patch_len, stride, len(quantiles)
        self.register_buffer("quantile_levels", torch.tensor(list(quantiles), dtype=torch.float32))
        self.num_patches = num_patches(lookback, patch_len, stride)
        self.revin = RevIN(num_channels, center=center)
        self.patch_embed = nn.Linear(patch_len, dim)
        self.position = nn.Parameter(torch.randn(self.num_patches, dim) * 0.02)
        self.blocks = nn.ModuleList(
            ForecastBlock(dim, mixer, heads, dict(mixer_options or {}), einfft_blocks, dropout)
            for _ in range(depth)
        )
        self.covariates = (
            CovariateTokens(covariates, dim, patch_len, stride, horizon) if covariates.any else None
        )
        tokens = self.num_patches + (self.covariates.num_future_tokens if self.covariates else 0)
        self.norm = RMSNorm(dim)
        outputs = horizon * max(1, self.num_quantiles)
        self.head = nn.Linear(tokens * dim, outputs)
        nn.init.normal_(self.head.weight, std=1.0 / math.sqrt(tokens * dim))
        nn.init.zeros_(self.head.bias)

    def forward(
        self,
        x: torch.Tensor,
        past: torch.Tensor | None = None,
        future: torch.Tensor | None = None,
        static: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
        history: torch.Tensor | None = None,
        history_past: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, L, C = x.shape
        if L != self.lookback or C != self.num_channels:
            raise ValueError(
                f"expected x of shape [B, {self.lookback}, {self.num_channels}], "
                f"got {tuple(x.shape)}"
            )
        if self.covariates is not None:
            self.covariates.check(B, L, past, future, static, mask)
        elif past is not None or future is not None or static is not None or mask is not None:
            raise ValueError("this model was built without covariates or a mask")
        states = self._history_states(history, history_past, static)
        tokens, stats = self._window_tokens(x, past, future, static, mask)
        for i, block in enumerate(self.blocks):
            tokens, _ = block(tokens, states[i])
        out = self.head(self.norm(tokens).flatten(1))  # [B*C, H*Q]
        if self.num_quantiles:
            out = out.view(B, C, self.horizon, self.num_quantiles).permute(0, 2, 1, 3)
        else:
            out = out.view(B, C, self.horizon).transpose(1, 2)
        return self.revin.denormalize(out, stats)

    @torch.no_grad()
    def _history_states(self, history, history_past, static) -> list:
        """Each block's mixer state after streaming the history windows (oldest first)."""
        states = [None] * len(self.blocks)
        if history is None:
            return states
        B, K, L, C = history.shape
        if L != self.lookback or C != self.num_channels:
            raise ValueError(
                f"expected history of shape [B, K, {self.lookback}, {self.num_channels}], "
                f"got {tuple(history.shape)}"
            )
        for k in range(K):
            past = None if history_past is None else history_past[:, k]
            tokens, _ = self._window_tokens(history[:, k], past, None, static, None)
            for i, block in enumerate(self.blocks):
                tokens, states[i] = block(tokens, states[i])
        return states

    def _window_tokens(self, x, past, future, static, mask):
        """A window x [B, L, C] as tokens [B*C, N (+ future tokens), D], and its RevIN
        statistics: each channel its own sequence of patch tokens, with the covariates."""
        B, L, C = x.shape
        z, stats = self.revin.normalize(x, mask)
        series = z.transpose(1, 2).reshape(B * C, L)  # channel independence
        tokens = self.patch_embed(patchify(series, self.patch_len, self.stride)) + self.position
        if self.covariates is not None:
            tokens = self._with_covariates(tokens, C, past, future, static, mask)
        return tokens, stats

    def _with_covariates(self, tokens, channels, past, future, static, mask):
        """tokens [B*C, N, D] -> [B*C, N (+ future tokens), D]; the covariates of window b
        reach each of its C channels (rows b*C .. b*C + C-1)."""
        cov = self.covariates
        if past is not None:
            past, future = cov.normalized(past, future, mask)
        extra = cov.past_tokens(past, mask, tokens.shape[0] // channels, self.lookback)
        if extra is not None:
            tokens = tokens + extra.repeat_interleave(channels, dim=0)
        if future is not None:
            ahead = cov.future_tokens(future).repeat_interleave(channels, dim=0)
            tokens = torch.cat([tokens, ahead], dim=1)
        if static is not None:
            tokens = tokens + cov.static_vector(static).repeat_interleave(channels, dim=0)
        return tokens
