"""EinFFT: spectral channel mixing (SiMBA, Patro & Agneeswaran 2024).

The token axis is taken to the frequency domain; there a block-diagonal complex-valued
two-layer MLP mixes the channels of each frequency (Einstein matrix multiplication per
block), a soft-shrink keeps the spectrum sparse, and the inverse FFT returns to tokens.
Mixing all tokens through their spectrum is why this block belongs to encoders (the
forecaster's lookback window), not to causal stacks.

Two forms compute the same function. For short token axes (up to `DFT_MAX_TOKENS`, the
forecaster's 12-60 patches) the transforms are matrix products with the real DFT matrices
and the complex block MLP is one real matrix product per layer: a handful of large
operations where the FFT form takes some twenty small ones (per-block einsums with their
layout copies, separate real and imaginary parts), about twice as fast on a CPU. Longer
axes take the FFT form, whose cost grows as N log N rather than N^2; it is also the
reference the matrix form is tested against (`EinFFT.forward_fft`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# the longest token axis that takes the DFT-matrix form (N^2 work against the FFT's N log N)
DFT_MAX_TOKENS = 64


def real_dft_matrices(n: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """The orthonormal real FFT of n points and its inverse as real matrices, with the real
    and imaginary parts of each frequency interleaved (row 2f: real, 2f + 1: imaginary):

        forward [2F, n], F = n // 2 + 1:   spectrum = forward @ x   (torch.fft.rfft, "ortho")
        inverse [n, 2F]:                   x = inverse @ spectrum   (torch.fft.irfft, n, "ortho")

    The inverse reads a real signal's spectrum as irfft does: the imaginary parts of the
    zero frequency and (even n) of the Nyquist frequency are ignored, the others count twice.
    """
    freqs = n // 2 + 1
    t = torch.arange(n, dtype=torch.float64, device=device)
    f = torch.arange(freqs, dtype=torch.float64, device=device)
    angle = 2 * math.pi * torch.outer(f, t) / n  # [F, n]
    scale = 1 / math.sqrt(n)
    forward = torch.stack([angle.cos(), -angle.sin()], dim=1).reshape(2 * freqs, n) * scale
    twice = torch.full((freqs,), 2.0, dtype=torch.float64, device=device)
    twice[0] = 1.0
    if n % 2 == 0:
        twice[-1] = 1.0
    parts = torch.stack([angle.cos(), -angle.sin()], dim=1) * (twice * scale)[:, None, None]
    inverse = parts.reshape(2 * freqs, n).t()
    return forward.to(dtype), inverse.contiguous().to(dtype)


def complex_block_matrix(w: torch.Tensor) -> torch.Tensor:
    """w [2, K, blk, blk] (real/imaginary parts of K complex blocks) -> the real [2D, 2D]
    matrix M, D = K blk, with [re | im] @ M = [re A - im B | re B + im A] for A and B the
    block-diagonal real and imaginary parts: the complex block-diagonal product
    (re + i im) @ (A + i B) on a row that holds the real parts, then the imaginary ones."""
    A, B = torch.block_diag(*w[0]), torch.block_diag(*w[1])
    return torch.cat([torch.cat([A, B], dim=1), torch.cat([-B, A], dim=1)], dim=0)


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
        if x.shape[1] <= DFT_MAX_TOKENS:
            return self.forward_dft(x)
        return self.forward_fft(x)

    def forward_dft(self, x: torch.Tensor) -> torch.Tensor:
        """The DFT-matrix form: x [B, N, D] -> [B, N, D]."""
        B, N, D = x.shape
        dtype = x.dtype
        work = torch.promote_types(dtype, torch.float32)  # float64 stays, 16-bit widens
        forward, inverse = real_dft_matrices(N, work, x.device)
        with torch.autocast(x.device.type, enabled=False):  # transforms in `work`, as the FFTs
            spec = torch.matmul(forward, x.to(work))  # [B, 2F, D], row 2f + (0: re, 1: im)
        spec = spec.view(B, -1, 2 * D)  # [B, F, re (D) | im (D)]
        w1, w2 = complex_block_matrix(self.w1).to(work), complex_block_matrix(self.w2).to(work)
        hidden = F.relu(spec @ w1 + self.b1.reshape(2 * D).to(work))
        out = hidden @ w2 + self.b2.reshape(2 * D).to(work)
        out = F.softshrink(out, self.sparsity_threshold).to(work).view(B, -1, D)
        with torch.autocast(x.device.type, enabled=False):
            return torch.matmul(inverse, out).to(dtype)

    def forward_fft(self, x: torch.Tensor) -> torch.Tensor:
        """The FFT form (any N; the reference for `forward_dft`): x [B, N, D] -> [B, N, D]."""
        B, N, D = x.shape
        dtype = x.dtype
        work = torch.promote_types(dtype, torch.float32)  # float64 stays, 16-bit widens
        spec = torch.fft.rfft(x.to(work), dim=1, norm="ortho")  # [B, N//2+1, D] complex
        spec = spec.view(B, spec.shape[1], self.num_blocks, self.block)
        w1, b1, w2, b2 = (p.to(work) for p in (self.w1, self.b1, self.w2, self.b2))
        re, im = self._complex_block_linear(spec.real, spec.imag, w1, b1)
        re, im = F.relu(re), F.relu(im)
        re, im = self._complex_block_linear(re, im, w2, b2)
        spec = torch.complex(
            F.softshrink(re, self.sparsity_threshold), F.softshrink(im, self.sparsity_threshold)
        ).reshape(B, -1, D)
        return torch.fft.irfft(spec, n=N, dim=1, norm="ortho").to(dtype)
