"""benchmarks/grids/titans_pytorch_memory.py: titans-pytorch's NeuralMemory as a mixer for
the side-by-side studies. Its output equals the library's own one-shot call, streaming in
pieces of any length equals one shot, it is causal, and its gradients are finite."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from mixer_checks import run_in_pieces

pytest.importorskip("titans_pytorch", reason="titans-pytorch not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "grids"))

import titans_pytorch_memory  # noqa: E402

import titans_seq as ts  # noqa: E402

CHUNK = 4


def _mixer():
    torch.manual_seed(0)
    return ts.build_mixer(titans_pytorch_memory.NAME, dim=16, heads=2, chunk_size=CHUNK)


@pytest.mark.parametrize(
    "position, length",
    [(0, 0), (0, 3), (0, 4), (0, 11), (1, 1), (1, 2), (3, 9), (5, 12), (4, 8)],
)
def test_pieces_cover_the_call_with_whole_chunks_or_single_tokens(position, length):
    pieces = titans_pytorch_memory.pieces(position, length, CHUNK)
    covered = [i for start, stop in pieces for i in range(start, stop)]
    assert covered == list(range(length))
    at = position
    for start, stop in pieces:  # a piece of several tokens starts and ends on chunk edges
        if stop - start > 1:
            assert at % CHUNK == 0 and (stop - start) % CHUNK == 0
        at += stop - start


@pytest.mark.parametrize("T", [1, 3, 16, 23])
def test_one_shot_equals_the_library_and_streaming_equals_one_shot(T):
    mixer = _mixer()
    x = torch.randn(2, T, 16)
    y, state = mixer(x)
    assert y.shape == x.shape and state.position == T
    torch.testing.assert_close(y, mixer.memory(x)[0], rtol=1e-4, atol=1e-5)
    for cuts in ([T // 3], [1, 2], [3, 4, 5]):
        torch.testing.assert_close(run_in_pieces(mixer, x, cuts), y, rtol=1e-4, atol=1e-5)


def test_causal_and_finite_gradients_and_the_state_detaches():
    mixer = _mixer()
    x = torch.randn(2, 21, 16)
    y, state = mixer(x)
    changed = x.clone()
    changed[:, 13:] += 1.0  # later inputs leave earlier outputs alone
    torch.testing.assert_close(mixer(changed)[0][:, :13], y[:, :13], rtol=0, atol=0)
    big = (torch.randn(2, 21, 16) * 50).requires_grad_()
    mixer(big)[0].square().sum().backward()
    assert torch.isfinite(big.grad).all()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in mixer.parameters())
    detached = state.detach()
    assert detached.position == 21 and detached.num_bytes() == state.num_bytes() > 0
    doubled = state.to(torch.float64)
    assert all(t.dtype == torch.float64 for t in doubled.memory.weights.values())
    torch.optim.AdamW(mixer.parameters(), weight_decay=0.1).step()  # own storage per weight
