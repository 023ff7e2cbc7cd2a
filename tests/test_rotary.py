"""Rotary position embedding at absolute stream positions."""

import pytest
import torch

from titans_seq.nn.rotary import RotaryEmbedding, apply_rotary


def test_rotation_preserves_norm_and_identity_at_position_zero():
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    rotated = apply_rotary(x, offset=7)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rotary(x[:, :, :1]), x[:, :, :1])


def test_offset_equals_slicing_a_longer_sequence():
    x = torch.randn(1, 2, 20, 6, dtype=torch.float64)
    whole = apply_rotary(x)
    torch.testing.assert_close(apply_rotary(x[:, :, 13:], offset=13), whole[:, :, 13:])


def test_scores_depend_only_on_relative_position():
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, dtype=torch.float64)

    def score(m, n):
        return (apply_rotary(q, offset=m) * apply_rotary(k, offset=n)).sum()

    torch.testing.assert_close(score(5, 2), score(105, 102))
    assert not torch.allclose(score(5, 2), score(5, 3))


def test_low_precision_input_keeps_dtype():
    x = torch.randn(1, 1, 4, 8).to(torch.bfloat16)
    assert apply_rotary(x, offset=3).dtype == torch.bfloat16


@pytest.mark.parametrize("head_dim", [0, 3, -2])
def test_bad_head_dim(head_dim):
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEmbedding(head_dim)


def test_wrong_input_size_and_negative_offset():
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match="head_dim=8"):
        rope(torch.randn(1, 1, 2, 6))
    with pytest.raises(ValueError, match="offset"):
        rope(torch.randn(1, 1, 2, 8), offset=-1)
