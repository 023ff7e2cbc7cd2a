"""The hybrids' attention backend is a choice of its own: None follows the memory's
`backend`, an explicit one holds whatever the memory runs on, and every attention backend
computes the same function (MAC's per-token retrieval included)."""

from __future__ import annotations

import pytest
import torch

import titans_seq as ts
from titans_seq.attention import masked_attention
from titans_seq.errors import ConfigError

HYBRIDS = {
    "mag": {"window": 8},
    "mal": {"window": 8},
    "mac": {"segment_size": 8},
    "mac-segment": {"segment_size": 8, "retrieval": "segment"},
}


def build(case: str, **options):
    torch.manual_seed(0)
    name = case.split("-")[0]
    return ts.build_mixer(name, dim=16, heads=2, **HYBRIDS[case], **options).double()


@pytest.mark.parametrize("case", sorted(HYBRIDS))
def test_every_attention_backend_gives_the_same_outputs_and_gradients(case):
    x = torch.randn(2, 21, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    results = {}
    for attention_backend in ("reference", "sdpa", "auto"):
        mixer = build(case, backend="torch", attention_backend=attention_backend)
        xi = x.clone().requires_grad_()
        y, _ = mixer(xi)
        y.square().sum().backward()
        results[attention_backend] = (y.detach(), xi.grad, [p.grad for p in mixer.parameters()])
    y_ref, gx_ref, gp_ref = results["reference"]
    for name in ("sdpa", "auto"):
        y, gx, gp = results[name]
        torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(gx, gx_ref, rtol=1e-10, atol=1e-12)
        for a, b in zip(gp, gp_ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["mag", "mal", "mac"])
def test_none_follows_the_memory_backend_and_an_explicit_choice_holds(case):
    mixer = build(case, backend="triton")
    assert mixer.attention_backend == "flex"
    mixer.backend = "torch"
    assert mixer.attention_backend == "sdpa"
    mixer.attention_backend = "reference"
    mixer.backend = "triton"  # the memory moves; the attention stays where it was put
    assert mixer.attention_backend == "reference"
    assert "attention_backend='reference'" in repr(mixer)
    mixer.attention_backend = None
    assert mixer.attention_backend == "flex"


@pytest.mark.parametrize("case", ["mag", "mac"])
def test_the_triton_memory_with_sdpa_attention_can_be_chosen(case):
    mixer = build(case, backend="triton", attention_backend="sdpa")
    assert (mixer.backend, mixer.attention_backend) == ("triton", "sdpa")


@pytest.mark.parametrize("bad", ["torch", "triton", "fast", 3])
def test_an_unknown_attention_backend_is_refused(bad):
    with pytest.raises(ConfigError, match="attention_backend"):
        build("mag", attention_backend=bad)


def test_masked_attention_matches_the_explicit_softmax():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8, generator=g, dtype=torch.float64) for _ in range(3))
    k, v = torch.cat((k, k.flip(2)), 2), torch.cat((v, v.flip(2)), 2)
    mask = torch.rand(5, 10, generator=g) > 0.5
    mask[:, 0] = True  # every query sees a key
    reference = masked_attention(q, k, v, mask, backend="reference")
    scores = (q @ k.transpose(-1, -2)) / 8**0.5
    by_hand = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v
    torch.testing.assert_close(reference, by_hand)
    torch.testing.assert_close(masked_attention(q, k, v, mask), reference)
