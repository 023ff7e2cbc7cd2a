"""The single-token decode step against the token-by-token reference: output, state and
gradients, at every chunk offset, and a whole stream fed one token at a time against the
chunk-parallel form."""

import pytest
import torch
from lmm_helpers import make_inputs

from titans_seq.ops.lmm import lmm_memory, lmm_memory_reference, lmm_memory_step

FEATURES = {
    "default": dict(),
    "depth1": dict(depth=1),
    "no_momentum": dict(momentum=False),
    "no_forgetting": dict(forgetting=False),
    "clip": dict(clip=0.05),
    "gelu_expansion": dict(activation="gelu", hidden=7),
}


def _inputs(T, depth=2, momentum=True, forgetting=True, hidden=None, seed=0):
    gates, weights = make_inputs(
        2, T, 3, 5, depth, hidden, momentum=momentum, forgetting=forgetting, seed=seed
    )
    return gates, weights


def _state_tensors(state):
    return [*state.weights, *state.momentum, *state.chunk_weights]


@pytest.mark.parametrize("name", list(FEATURES))
@pytest.mark.parametrize("prefix", [0, 3, 4, 6])  # the token at offsets 0, 3, 0, 2 (chunk 4)
def test_step_equals_reference_output_state_and_gradients(name, prefix):
    spec = dict(FEATURES[name])
    clip, activation = spec.pop("clip", None), spec.pop("activation", "silu")
    gates, weights = _inputs(prefix + 1, **spec)
    options = dict(chunk_size=4, activation=activation, inner_grad_clip=clip)
    state = None
    if prefix:
        head = [None if g is None else g[:, :prefix] for g in gates]
        _, state = lmm_memory_reference(*head, weights, output_final_state=True, **options)
    token = [None if g is None else g[:, prefix:].clone().requires_grad_() for g in gates]
    leaves = [t for t in token if t is not None]
    results = []
    for fn in (lmm_memory_step, lmm_memory_reference):
        y, final = fn(*token, weights, initial_state=state, output_final_state=True, **options)
        loss = y.pow(2).sum() + sum(t.pow(2).sum() for t in _state_tensors(final))
        results.append((y, final, torch.autograd.grad(loss, leaves)))
    (y, final, grads), (y_ref, final_ref, grads_ref) = results
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    assert final.offset == final_ref.offset == (prefix + 1) % 4
    for a, b in zip(_state_tensors(final), _state_tensors(final_ref)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_token_by_token_equals_one_shot(dtype):
    """lmm_memory dispatches T = 1 to the step; 11 single-token calls (crossing chunk
    boundaries, chunk 4) equal one chunk-parallel call over the 11 tokens."""
    gates, weights = _inputs(11, seed=2)
    gates = [None if g is None else g.to(dtype) for g in gates]
    weights = tuple(
        w.to(torch.float64 if dtype == torch.float64 else torch.float32) for w in weights
    )
    y_full, s_full = lmm_memory(*gates, weights, chunk_size=4, output_final_state=True)
    state, pieces = None, []
    for t in range(11):
        token = [None if g is None else g[:, t : t + 1] for g in gates]
        y, state = lmm_memory(
            *token, weights, chunk_size=4, initial_state=state, output_final_state=True
        )
        pieces.append(y)
    tol = {torch.float64: 1e-10, torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    torch.testing.assert_close(torch.cat(pieces, 1), y_full, rtol=tol, atol=tol)
    assert state.offset == s_full.offset == 3
    for a, b in zip(_state_tensors(state), _state_tensors(s_full)):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_step_refuses_more_than_one_token():
    gates, weights = _inputs(2)
    with pytest.raises(ValueError, match="one token"):
        lmm_memory_step(*gates, weights)
