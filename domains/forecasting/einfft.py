"""EinFFT: spectral channel mixing (SiMBA, Patro & Agneeswaran 2024).

The token axis is taken to the frequency domain; there a block-diagonal complex-valued
two-layer MLP mixes the channels of each frequency (Einstein matrix multiplication per
block), a soft-shrink keeps the spectrum sparse, and the inverse FFT returns to tokens.
Mixing all tokens through their spectrum is why this block belongs to encoders (the
forecaster's lookback window), not to causal stacks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class EinFFT(nn.Module):
    """x: [B, N, D] -> [B, N, D]. D is split into `num_blocks` blocks of D / num_blocks."""

    def __init__(
        self,
        dim: int,
        num_blocks: int = 4,
        sparsity_threshold: float = 0.01,
        init_scale: float = 0.02,
    ):
        super().__init__()
        if dim % num_blocks:
            raise ValueError(f"EinFFT: dim={dim} is not divisible by num_blocks={num_blocks}")
        self.num_blocks, self.block = num_blocks, dim // num_blocks
        self.sparsity_threshold = sparsity_threshold
        shape = (2, num_blocks, self.block, self.block)  # [real/imag, blocks, in, out]
        self.w1 = nn.Parameter(init_scale * torch.randn(shape))
        self.b1 = nn.Parameter(init_scale * torch.randn(2, num_blocks, self.block))
        self.w2 = nn.Parameter(init_scale * torch.randn(shape))
        self.b2 = nn.Parameter(init_scale * torch.randn(2, num_blocks, self.block))

    @staticmethod
    def _complex_block_linear(re, im, w, b):
        """(re + i im) @ (w_re + i w_im) + b, per block: re/im [B, F, K, blk]."""
        out_re = torch.einsum("bfki,kio->bfko", re, w[0]) - torch.einsum("bfki,kio->bfko", im, w[1])
        out_im = torch.einsum("bfki,kio->bfko", re, w[1]) + torch.einsum("bfki,kio->bfko", im, w[0])
        return out_re + b[0], out_im + b[1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, D = x.shape
        dtype = x.dtype
        spec = torch.fft.rfft(x.float(), dim=1, norm="ortho")  # [B, N//2+1, D] complex
        spec = spec.view(B, spec.shape[1], self.num_blocks, self.block)
        re, im = self._complex_block_linear(spec.real, spec.imag, self.w1, self.b1)
        re, im = F.relu(re), F.relu(im)
        re, im = self._complex_block_linear(re, im, self.w2, self.b2)
        spec = torch.complex(
            F.softshrink(re, self.sparsity_threshold), F.softshrink(im, self.sparsity_threshold)
        ).reshape(B, -1, D)
        return torch.fft.irfft(spec, n=N, dim=1, norm="ortho").to(dtype)
