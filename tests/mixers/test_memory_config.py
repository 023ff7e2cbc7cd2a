"""MemoryConfig passed whole, typed mixer options checked once with a did-you-mean, and
FLOP counts read from the built modules."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import titans_seq as ts
from titans_seq.errors import ConfigError
from titans_seq.mixers import MemoryConfig, UnknownOptionError, check_layer_options
from titans_seq.mixers.options import canonical_mixer_options

MEMORY_MIXERS = {
    "lmm": {},
    "mag": {"window": 8},
    "mal": {"window": 8},
    "mac": {"segment_size": 8, "num_memory_tokens": 2},
}


def built(name, **options):
    torch.manual_seed(0)
    return ts.build_mixer(name, dim=16, heads=2, **MEMORY_MIXERS[name], **options)


@pytest.mark.parametrize("name", sorted(MEMORY_MIXERS))
def test_nested_flat_and_config_object_build_the_same_mixer(name):
    flat = built(name, chunk_size=4, memory_depth=1, theta_max=0.5)
    nested = built(name, memory={"chunk_size": 4, "depth": 1, "theta_max": 0.5})
    config = built(name, memory=MemoryConfig(chunk_size=4, depth=1, theta_max=0.5))
    x = torch.randn(2, 11, 16)
    y, _ = flat(x)
    for other in (nested, config):
        assert other.memory.config == flat.memory.config
        torch.testing.assert_close(other(x)[0], y, rtol=0, atol=0)
        for (k1, p1), (k2, p2) in zip(flat.named_parameters(), other.named_parameters()):
            assert k1 == k2 and torch.equal(p1, p2)


def test_the_config_is_validated_once_with_clear_messages():
    with pytest.raises(ConfigError, match="chunk_size must be an integer >= 1, got 0"):
        MemoryConfig(chunk_size=0)
    with pytest.raises(ConfigError, match="memory_depth"):
        MemoryConfig(depth=0)
    with pytest.raises(ConfigError, match="activation must be one of"):
        MemoryConfig(activation="relu")
    with pytest.raises(ConfigError, match="inner_grad_clip must be > 0, 'auto' or None"):
        MemoryConfig(inner_grad_clip="sometimes")
    with pytest.raises(dataclasses.FrozenInstanceError):
        MemoryConfig().chunk_size = 8  # frozen: one config, shared safely
    assert MemoryConfig(chunk_size=8, theta_max=None).step_bound == 1 / 8
    assert MemoryConfig().clip_bound(16) == pytest.approx(8.0)


def test_options_given_twice_or_misspelt_are_refused():
    with pytest.raises(ConfigError, match="given both flat and under memory"):
        ts.build_mixer("lmm", dim=16, chunk_size=4, memory={"chunk_size": 8})
    with pytest.raises(UnknownOptionError, match="did you mean 'chunk_size'"):
        ts.build_mixer("lmm", dim=16, chunk_sise=4)
    with pytest.raises(TypeError, match="unknown option"):  # still a TypeError for Python
        ts.build_mixer("mag", dim=16, segment_size=4)
    with pytest.raises(ConfigError, match=r"chunk_size: expected an integer, got 'abc'"):
        ts.build_mixer("lmm", dim=16, chunk_size="abc")
    with pytest.raises(ConfigError, match=r"memory.chunk_sise.*did you mean 'memory.chunk_size'"):
        ts.build_mixer("lmm", dim=16, memory={"chunk_sise": 4})
    with pytest.raises(UnknownOptionError, match="unknown option"):
        ts.build_mixer("lmm", dim=16, depth=1)  # flat, the memory's depth is memory_depth


def test_stack_options_are_checked_per_mixer_before_anything_is_built():
    check_layer_options("lmm*2,swa", {"lmm": {"memory": {"chunk_size": 8}}, "swa": {"window": 4}})
    check_layer_options("mag", {"window": 4, "memory": {"depth": 1}})
    with pytest.raises(UnknownOptionError, match=r"mixer_options.swa: .*did you mean 'window'"):
        check_layer_options("lmm,swa", {"swa": {"windw": 4}})
    with pytest.raises(ConfigError, match="mixes sections per mixer"):
        check_layer_options("lmm,swa", {"swa": {"window": 4}, "num_persistent": 2})
    with pytest.raises(ConfigError, match="which no layer uses"):
        check_layer_options("lmm", {"swa": {"window": 4}})
    with pytest.raises(ConfigError, match="unknown mixer 'lmn' \\(did you mean 'lmm'\\?\\)"):
        check_layer_options("lmn", {})


def test_canonical_options_equal_for_flat_and_nested_spellings():
    flat = canonical_mixer_options("lmm", {"chunk_size": 8, "memory_depth": 1}, depth=2)
    nested = canonical_mixer_options("lmm", {"memory": {"chunk_size": 8, "depth": 1}}, depth=2)
    assert flat == nested and flat[0]["memory"]["chunk_size"] == 8


@pytest.mark.parametrize("name", sorted(MEMORY_MIXERS) + ["attention", "swa"])
def test_flops_read_the_built_modules(name):
    options = dict(MEMORY_MIXERS.get(name, {"window": 8} if name == "swa" else {}))
    if name in MEMORY_MIXERS:
        options["memory"] = {"chunk_size": 4, "depth": 2, "expansion": 2.0}
    mixer = ts.build_mixer(name, dim=16, heads=2, **options)
    d, seq_len = 8, 32
    attention = {
        "attention": seq_len,
        "swa": 8,
        "mag": 8 + 4,
        "mal": 8 + 4,
        "mac": 8 + 4 + 2,
        "lmm": 0,
    }[name]
    expected = 12.0 * 2 * d * attention
    if name in MEMORY_MIXERS:
        shapes = [(8, 16), (16, 8)]  # (in, out) of the depth-2 memory with expansion 2
        weights = sum(i * o for i, o in shapes)
        expected += 3.0 * 2 * (8.0 * weights + 2.0 * 4 * sum(i + o for i, o in shapes))
    assert mixer.flops_per_token(seq_len) == pytest.approx(expected)


def test_triton_options_come_from_the_memory_config_and_reach_the_op(monkeypatch):
    from titans_seq.mixers import neural_memory
    from titans_seq.ops.lmm.triton import TritonOptions

    mixer = ts.build_mixer(
        "mag", dim=16, heads=2, window=8, memory={"triton": {"save_every": 2, "backward": "torch"}}
    )
    expected = TritonOptions(save_every=2, backward="torch")
    assert mixer.memory.config.triton == expected
    seen = []
    real = neural_memory.lmm_memory

    def spy(*args, **kwargs):
        seen.append(kwargs.get("triton_options"))
        return real(*args, **kwargs)

    monkeypatch.setattr(neural_memory, "lmm_memory", spy)
    mixer(torch.randn(1, 5, 16))
    assert seen == [expected]
    # a config round trip (what a saved model stores) keeps them
    again = MemoryConfig.from_options(mixer.memory.config.to_dict())
    assert again.triton == expected


@pytest.mark.parametrize(
    "bad", [{"save_every": 0}, {"dot_precision": "fp8"}, {"backwards": "split"}, "fast"]
)
def test_bad_triton_options_are_refused_when_the_mixer_is_built(bad):
    with pytest.raises(ValueError):
        ts.build_mixer("lmm", dim=16, heads=2, memory={"triton": bad})


@pytest.mark.parametrize("chunk_size", [1, 4, 16, 64])
def test_the_default_step_bound_does_not_follow_the_chunk_size(chunk_size):
    from titans_seq.mixers.memory_config import DEFAULT_THETA_MAX

    assert MemoryConfig(chunk_size=chunk_size).step_bound == DEFAULT_THETA_MAX
    assert MemoryConfig(chunk_size=chunk_size, theta_max=None).step_bound == 1 / chunk_size
    mixer = built("lmm", chunk_size=chunk_size)
    assert mixer.memory.theta_max == DEFAULT_THETA_MAX


@pytest.mark.parametrize("name", sorted(MEMORY_MIXERS))
def test_every_memory_mixer_forgets_toward_its_initial_weights_when_asked(name):
    # the option reaches the op: a long stream with strong forgetting and no writes ends
    # near W_0 rather than near zero, so the reads differ from the paper's rule
    x = torch.randn(2, 40, 16)
    zero, anchored = built(name), built(name, memory={"forget_toward": "initial"})
    assert anchored.memory.config.forget_toward == "initial"
    assert anchored.signature() != zero.signature()
    y0, _ = zero(x)
    y1, state = anchored(x)
    assert torch.isfinite(y1).all() and not torch.allclose(y0, y1)
    # streaming equals one shot under the anchored rule too
    first, state = anchored(x[:, :13])
    second, _ = anchored(x[:, 13:], state=state)
    torch.testing.assert_close(torch.cat([first, second], 1), y1, rtol=1e-5, atol=1e-6)


def test_forget_toward_is_checked_by_name():
    with pytest.raises(ConfigError, match="forget_toward must be one of"):
        MemoryConfig(forget_toward="init")
    with pytest.raises(ValueError, match="forget_toward='initial' runs the backends"):
        ts.build_mixer(
            "lmm", dim=16, heads=2, backend="triton", memory={"forget_toward": "initial"}
        )
