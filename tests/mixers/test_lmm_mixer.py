"""The `lmm` mixer: backends, streaming, persistent tokens, ablations, long streams, bad input."""

import pytest
import torch
from mixer_checks import assert_memory_backends_agree

import titans_seq as ts


def build(**options):
    defaults = dict(dim=16, heads=2, chunk_size=4, memory_depth=2, num_persistent=3)
    return ts.build_mixer("lmm", **{**defaults, **options})


@pytest.mark.parametrize("memory_depth", [1, 2, 3])
@pytest.mark.parametrize("T", [1, 5, 16, 37])
def test_backends_agree_on_outputs_and_every_parameter_gradient(memory_depth, T):
    torch.manual_seed(T)
    mixer = build(memory_depth=memory_depth).double()
    assert_memory_backends_agree(mixer, torch.randn(2, T, 16, dtype=torch.float64))


def test_float32_backends_agree():
    mixer = build()
    x = torch.randn(2, 37, 16)
    mixer.backend = "reference"
    y_ref, _ = mixer(x)
    mixer.backend = "torch"
    y, _ = mixer(x)
    assert ((y - y_ref).norm() / y_ref.norm()).item() < 1e-4


def test_state_dict_loads_across_backends():
    a, b = build(backend="reference"), build(backend="torch")
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 9, 16)
    torch.testing.assert_close(a(x)[0], b(x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("num_persistent", [0, 3])
def test_streaming_equals_one_shot(num_persistent):
    mixer = build(num_persistent=num_persistent, chunk_size=5).double()
    x = torch.randn(2, 41, 16, dtype=torch.float64)
    y_full, s_full = mixer(x)
    for cuts in ([1, 2, 3], [7, 8, 30], [5, 10, 15, 20, 40], [17]):
        state, pieces = None, []
        for a, b in zip([0, *cuts], [*cuts, 41]):
            y, state = mixer(x[:, a:b], state)
            pieces.append(y)
        torch.testing.assert_close(torch.cat(pieces, 1), y_full, rtol=1e-10, atol=1e-12)
        assert state.position == s_full.position == 41


def test_state_size_is_constant_in_the_stream_length():
    mixer = build()
    _, s_short = mixer(torch.randn(1, 8, 16))
    _, s_long = mixer(torch.randn(1, 300, 16))
    assert s_short.num_bytes() == s_long.num_bytes()


def test_state_detach_cuts_the_graph():
    mixer = build()
    _, state = mixer(torch.randn(1, 8, 16))
    assert state.memory.memory.weights[0].requires_grad
    detached = state.detach()
    assert not any(t.requires_grad for t in detached.memory.memory.weights)
    y, _ = mixer(torch.randn(1, 3, 16), detached)
    assert y.shape == (1, 3, 16)


@pytest.mark.parametrize(
    "option",
    [
        dict(use_momentum=False),
        dict(use_forgetting=False),
        dict(memory_depth=1),
        dict(conv_size=0),
        dict(num_persistent=0),
        dict(activation="gelu"),
    ],
)
def test_ablation_switches_change_the_output(option):
    torch.manual_seed(0)
    base = build()
    torch.manual_seed(0)
    ablated = build(**option)
    # copy every parameter the two share, so only the switch differs
    shared = {
        k: v
        for k, v in base.state_dict().items()
        if k in ablated.state_dict() and ablated.state_dict()[k].shape == v.shape
    }
    ablated.load_state_dict(shared, strict=False)
    x = torch.randn(2, 20, 16)
    assert not torch.allclose(base(x)[0], ablated(x)[0], atol=1e-6)


def test_no_nan_over_a_64k_token_stream_with_default_settings():
    mixer = ts.build_mixer("lmm", dim=64, heads=4)
    x = torch.randn(1, 65536, 64)
    with torch.no_grad():
        y, state = mixer(x)
    assert torch.isfinite(y).all()
    assert all(torch.isfinite(w).all() for w in state.memory.memory.weights)


def test_memory_actually_memorises_a_pair():
    """Writing (k, v) into a linear memory and reading with k returns something close to v."""
    from titans_seq.ops.lmm import lmm_memory

    d = 8
    k = torch.nn.functional.normalize(torch.randn(1, 1, 1, d), dim=-1)
    v = torch.randn(1, 1, 1, d)
    W0 = torch.zeros(1, d, d)
    theta = torch.full((1, 1, 1), 0.5)  # 2 * theta * |k|^2 = 1: one exact delta-rule write
    y, _ = lmm_memory(k, k, v, theta, None, None, (W0,), chunk_size=1)
    torch.testing.assert_close(y, v, rtol=1e-5, atol=1e-5)


def test_memory_options_flat_only_where_options_are_parsed():
    from titans_seq.mixers import LMMMixer, MemoryConfig

    flat = ts.build_mixer("lmm", dim=16, heads=2, chunk_size=8, memory_depth=1)
    nested = LMMMixer(16, heads=2, memory={"chunk_size": 8, "depth": 1})
    assert flat.memory.config == nested.memory.config == MemoryConfig(chunk_size=8, depth=1)
    assert flat.signature() == nested.signature()
    with pytest.raises(TypeError, match="chunk_size"):
        LMMMixer(16, heads=2, chunk_size=8)


def test_bad_options_and_states():
    with pytest.raises(ValueError, match="does not divide dim=10"):
        ts.build_mixer("lmm", dim=10, heads=3)
    with pytest.raises(ValueError, match="memory_depth"):
        build(memory_depth=0)
    with pytest.raises(ValueError, match="backend"):
        build(backend="nope")
    with pytest.raises(TypeError, match="unknown option"):
        ts.build_mixer("lmm", dim=16, heads=2, memory_dept=2)
    mixer, other = build(), build(chunk_size=8)
    _, state = other(torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="different mixer configuration"):
        mixer(torch.randn(1, 5, 16), state)
    _, state = mixer(torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="batch size"):
        mixer(torch.randn(2, 5, 16), state)
