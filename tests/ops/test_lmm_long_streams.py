"""Rounding error over long streams: float32 tracks float64, streaming equals one shot.

The memory is a recurrence over the whole stream: if its dynamics amplify perturbations,
float32 rounding grows until float32 and float64 disagree in the first digit. With the
default parametrisation the dynamics contract and the two agree to about 1e-5 (figures in
docs/benchmarks.md, `benchmarks/studies/memory_precision.py`).
"""

from __future__ import annotations

import pytest
import torch

import titans_seq as ts

TOLERANCE = 1e-3  # max|a - b| / max|b| over all outputs


def relative_error(a, b):
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def default_mixer_outputs(T: int, backend: str, piece: int | None = None):
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=64, heads=4, backend=backend)
    x = torch.randn(1, T, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y64, _ = mixer.double()(x.double())
        mixer.float()
        y32, _ = mixer(x)
        streamed = None
        if piece:
            state, pieces = None, []
            for start in range(0, T, piece):
                y, state = mixer(x[:, start : start + piece], state)
                pieces.append(y)
            streamed = torch.cat(pieces, 1)
    return y32, y64, streamed


def test_float32_tracks_float64_over_4k_tokens():
    y32, y64, streamed = default_mixer_outputs(4096, "torch", piece=1000)
    assert relative_error(y32, y64) < TOLERANCE
    assert relative_error(streamed, y32) < TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "reference"])
def test_float32_tracks_float64_over_16k_tokens(backend):
    y32, y64, streamed = default_mixer_outputs(16384, backend, piece=1000)
    assert torch.isfinite(y32).all()
    assert relative_error(y32, y64) < TOLERANCE
    assert relative_error(streamed, y32) < TOLERANCE
