"""benchmarks/grids/fla_gated_deltanet.py: fla's Gated DeltaNet as a mixer for the side-by-side
studies. Causal, streaming equals one shot (the delta rule's matrix and the convolution's
tail carried), gradients finite, and its chunked rule equals fla's token-by-token one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from mixer_checks import run_in_pieces

pytest.importorskip("fla.ops.gated_delta_rule.naive", reason="flash-linear-attention not installed")
pytest.importorskip("einops")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "grids"))

import fla_gated_deltanet  # noqa: E402

import titans_seq as ts  # noqa: E402


def _mixer():
    torch.manual_seed(0)
    return ts.build_mixer(fla_gated_deltanet.NAME, dim=16, heads=2)


@pytest.mark.parametrize("T", [1, 5, 64, 77])
def test_streaming_equals_one_shot_and_the_output_is_causal(T):
    mixer = _mixer()
    x = torch.randn(2, T, 16)
    y, state = mixer(x)
    assert y.shape == x.shape and state.position == T
    for cut in {0, T // 3, T - 1} - {0}:
        torch.testing.assert_close(run_in_pieces(mixer, x, [cut]), y, rtol=1e-4, atol=1e-5)
    changed = x.clone()
    changed[:, -1] += 1.0  # the last input changes only the last output
    torch.testing.assert_close(mixer(changed)[0][:, :-1], y[:, :-1], rtol=0, atol=0)


def test_the_chunked_rule_equals_flas_recurrent_form_and_gradients_are_finite():
    from fla.ops.gated_delta_rule.naive import (
        naive_chunk_gated_delta_rule,
        naive_recurrent_gated_delta_rule,
    )

    torch.manual_seed(1)
    B, T, H, d = 2, 70, 2, 8
    q, k = (torch.nn.functional.normalize(torch.randn(B, T, H, d), dim=-1) for _ in range(2))
    v, beta, g = torch.randn(B, T, H, d), torch.rand(B, T, H), -torch.rand(B, T, H)
    chunked, s1 = naive_chunk_gated_delta_rule(q, k, v, g, beta, 64, output_final_state=True)
    stepped, s2 = naive_recurrent_gated_delta_rule(q, k, v, beta, g, output_final_state=True)
    torch.testing.assert_close(chunked, stepped, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(s1, s2, rtol=1e-4, atol=1e-5)
    mixer = _mixer()
    x = (torch.randn(2, 40, 16) * 50).requires_grad_()
    mixer(x)[0].square().sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mixer.parameters())
