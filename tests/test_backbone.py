"""Backbone: shapes, per-layer streaming states, causality, bidirectional mode, layer specs."""

import math

import pytest
import torch

import titans_seq.mixers.attention  # noqa: F401  (registers "attention" and "swa")
from titans_seq.backbone import Backbone, detach_states, layer_mixer_names, layer_mixer_options
from titans_seq.mixers.attention import CausalSelfAttention, SlidingWindowAttention

DIM = 16


def make_backbone(seed=0, **kwargs):
    torch.manual_seed(seed)
    options = dict(dim=DIM, depth=2, mixer="swa", mixer_options={"window": 3}, heads=2)
    options.update(kwargs)
    return Backbone(**options).double()


def test_shapes_and_state_list():
    backbone = make_backbone(depth=3)
    x = torch.randn(2, 11, DIM, dtype=torch.float64)
    y, states = backbone(x)
    assert y.shape == x.shape
    assert len(states) == 3 and all(s.position == 11 for s in states)


@pytest.mark.parametrize(
    "mixer, options",
    [
        ("swa", {"window": 3}),
        ("swa,attention", {"swa": {"window": 4, "num_persistent": 2}}),
        (["attention", "swa"], [{"qk_norm": True}, {"window": 1}]),
    ],
)
def test_streaming_equals_one_shot(mixer, options):
    backbone = make_backbone(mixer=mixer, mixer_options=options)
    x = torch.randn(2, 15, DIM, dtype=torch.float64)
    y_once, _ = backbone(x)
    for pieces in ([1] * 15, [4, 1, 10], [7, 8]):
        states, outputs, start = None, [], 0
        for size in pieces:
            y, states = backbone(x[:, start : start + size], states)
            outputs.append(y)
            start += size
        torch.testing.assert_close(torch.cat(outputs, 1), y_once, rtol=1e-10, atol=1e-10)


def test_fresh_layer_state_may_be_none():
    backbone = make_backbone()
    x = torch.randn(1, 6, DIM, dtype=torch.float64)
    y_once, _ = backbone(x)
    y_first, states = backbone(x[:, :2], [None, None])
    y_rest, _ = backbone(x[:, 2:], states)
    torch.testing.assert_close(torch.cat((y_first, y_rest), 1), y_once)


def test_causal():
    backbone = make_backbone(mixer="attention,swa", mixer_options={"swa": {"window": 2}})
    x = torch.randn(2, 12, DIM, dtype=torch.float64)
    y, _ = backbone(x)
    perturbed = x.clone()
    perturbed[:, 6:] = torch.randn_like(perturbed[:, 6:])
    y_perturbed, _ = backbone(perturbed)
    torch.testing.assert_close(y_perturbed[:, :6], y[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(y_perturbed[:, 6:], y[:, 6:])


@pytest.mark.parametrize("merge", ["add", "linear"])
def test_bidirectional_sees_the_future_and_rejects_states(merge):
    backbone = make_backbone(bidirectional=True, merge=merge, mixer="attention", mixer_options={})
    x = torch.randn(2, 12, DIM, dtype=torch.float64)
    y, states = backbone(x)
    assert y.shape == x.shape and states is None
    perturbed = x.clone()
    perturbed[:, -1] += 1.0
    y_perturbed, _ = backbone(perturbed)
    assert not torch.allclose(y_perturbed[:, 0], y[:, 0])
    with pytest.raises(ValueError, match="no streaming state"):
        backbone(x, [None, None])


def test_bidirectional_is_reversal_symmetric_with_add_merge():
    """With a shared mixer and a sum, reversing the input reverses the output."""
    backbone = make_backbone(bidirectional=True, merge="add")
    x = torch.randn(1, 9, DIM, dtype=torch.float64)
    torch.testing.assert_close(backbone(x.flip(1))[0], backbone(x)[0].flip(1))


def test_linear_merge_starts_as_sum():
    x = torch.randn(1, 9, DIM, dtype=torch.float64)
    add = make_backbone(bidirectional=True, merge="add")
    linear = make_backbone(bidirectional=True, merge="linear")
    missing, unexpected = linear.load_state_dict(add.state_dict(), strict=False)
    assert not unexpected and all(".merge." in key for key in missing) and missing
    torch.testing.assert_close(linear(x)[0], add(x)[0])


def test_mixed_pattern_builds_the_right_layers():
    backbone = make_backbone(depth=6, mixer="swa*2,attention", mixer_options={"swa": {"window": 5}})
    assert backbone.layer_mixers == ["swa", "swa", "attention"] * 2
    kinds = [type(block.mixer) for block in backbone.blocks]
    assert kinds == [SlidingWindowAttention, SlidingWindowAttention, CausalSelfAttention] * 2
    assert all(block.mixer.window == 5 for block in backbone.blocks if block.mixer.window)


def test_parameters_get_finite_gradients():
    backbone = make_backbone(
        depth=2,
        mixer=["swa", "attention"],
        mixer_options=[{"window": 2, "num_persistent": 2, "qk_norm": True}, {}],
    )
    x = torch.randn(2, 8, DIM, dtype=torch.float64, requires_grad=True)
    y, _ = backbone(x)
    y.square().mean().backward()
    for name, p in backbone.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert torch.isfinite(x.grad).all()


def test_bidirectional_gradients_reach_merge():
    backbone = make_backbone(bidirectional=True, merge="linear")
    y, _ = backbone(torch.randn(2, 5, DIM, dtype=torch.float64))
    y.square().mean().backward()
    assert all(torch.isfinite(p.grad).all() for p in backbone.parameters())


def test_residual_projections_are_scaled_by_depth():
    depth, dim = 8, 64
    torch.manual_seed(0)
    backbone = Backbone(dim, depth, mixer="attention", heads=4)
    expected_mixer = dim**-0.5 / math.sqrt(2 * depth)
    for block in backbone.blocks:
        std = block.mixer.out_proj.weight.std().item()
        assert abs(std - expected_mixer) / expected_mixer < 0.1
        hidden = block.mlp.down_proj.weight.shape[1]
        expected_mlp = hidden**-0.5 / math.sqrt(2 * depth)
        assert abs(block.mlp.down_proj.weight.std().item() - expected_mlp) / expected_mlp < 0.1


def test_output_scale_stays_bounded_with_depth():
    """The final norm and scaled residuals keep activations O(1) for a deep stack."""
    torch.manual_seed(0)
    backbone = Backbone(32, 12, mixer="swa", mixer_options={"window": 4}, heads=4)
    y, _ = backbone(torch.randn(2, 16, 32))
    assert torch.isfinite(y).all()
    assert 0.5 < y.pow(2).mean().sqrt().item() < 2.0


def test_no_mlp():
    backbone = make_backbone(mlp_ratio=0)
    assert all(block.mlp is None for block in backbone.blocks)
    assert backbone(torch.randn(1, 4, DIM, dtype=torch.float64))[0].shape == (1, 4, DIM)


def test_detach_states():
    backbone = make_backbone()
    _, states = backbone(torch.randn(1, 4, DIM, dtype=torch.float64))
    assert states[0].keys.requires_grad
    detached = detach_states(states)
    assert not any(s.keys.requires_grad for s in detached)
    assert detach_states(None) is None


# -- layer specification ---------------------------------------------------------------------
def test_layer_mixer_names():
    assert layer_mixer_names("swa", 3) == ["swa"] * 3
    assert layer_mixer_names("attention, swa", 4) == ["attention", "swa"] * 2
    assert layer_mixer_names("swa*3,attention", 8) == (["swa"] * 3 + ["attention"]) * 2
    assert layer_mixer_names(["attention", "swa"], 2) == ["attention", "swa"]


@pytest.mark.parametrize(
    "mixer, depth, error, message",
    [
        ("swa,attention", 3, ValueError, "does not divide depth=3"),
        (["swa"], 2, ValueError, "1 entries but depth=2"),
        ("nonexistent", 2, ValueError, "unknown mixer 'nonexistent'"),
        ("swa*0", 2, ValueError, "bad repeat count"),
        ("swa,,attention", 3, ValueError, "empty mixer name"),
        (3, 2, TypeError, "mixer must be a name"),
        (["swa", 4], 2, TypeError, "must be names"),
    ],
)
def test_bad_mixer_spec(mixer, depth, error, message):
    with pytest.raises(error, match=message):
        layer_mixer_names(mixer, depth)


def test_layer_mixer_options():
    names = ["swa", "attention"]
    assert layer_mixer_options(None, names) == [{}, {}]
    assert layer_mixer_options({"qk_norm": True}, names) == [{"qk_norm": True}] * 2
    assert layer_mixer_options({"swa": {"window": 3}}, names) == [{"window": 3}, {}]
    assert layer_mixer_options([None, {"qk_norm": True}], names) == [{}, {"qk_norm": True}]
    with pytest.raises(ValueError, match="which no layer uses"):
        layer_mixer_options({"attention": {}, "swa": {}}, ["swa"])
    with pytest.raises(ValueError, match="1 entries but depth=2"):
        layer_mixer_options([{}], names)
    with pytest.raises(TypeError, match="dicts or None"):
        layer_mixer_options([{}, 3], names)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(depth=0), ValueError, "depth must be a positive integer"),
        (dict(dim=0), ValueError, "dim must be a positive integer"),
        (dict(mlp_ratio=-1), ValueError, "mlp_ratio"),
        (dict(merge="mean"), ValueError, "merge must be one of"),
        (dict(dropout=1.0), ValueError, "dropout"),
        (dict(mixer_options={"window": 3, "bogus": 1}), TypeError, "unknown option"),
    ],
)
def test_bad_backbone_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_backbone(**kwargs)


def test_bad_forward_arguments():
    backbone = make_backbone()
    x = torch.randn(1, 4, DIM, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\[B, T, 16\]"):
        backbone(x[0])
    with pytest.raises(ValueError, match="list of 2 per-layer states"):
        backbone(x, [None])


@pytest.mark.slow
def test_compiles_without_graph_breaks():
    """The hot path (mixers, states, bidirectional merge) traces as one graph."""
    torch.manual_seed(0)
    x = torch.randn(2, 9, DIM)
    for kwargs in (
        dict(mixer="swa,attention", mixer_options={"swa": {"window": 4, "num_persistent": 2}}),
        dict(mixer="attention", bidirectional=True, merge="linear"),
    ):
        backbone = Backbone(DIM, 2, heads=2, **kwargs)
        compiled = torch.compile(backbone, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(x)[0], backbone(x)[0])
    streaming = torch.compile(
        Backbone(DIM, 2, mixer="swa", heads=2), backend="eager", fullgraph=True
    )
    y_once, _ = streaming(x)
    y_first, states = streaming(x[:, :4])
    y_rest, _ = streaming(x[:, 4:], states)
    torch.testing.assert_close(torch.cat((y_first, y_rest), 1), y_once, rtol=1e-5, atol=1e-5)
