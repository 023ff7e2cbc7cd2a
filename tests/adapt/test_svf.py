"""SVF: identity at z = 1, gradients on z only, the parameter count, experts on disk
(round trip, checksum, base-mismatch refusal), mixtures, merge, for every mixer."""

import pytest
import torch
from mixer_checks import library_mixers

from titans_seq.adapt import SVF, ExpertMismatch, read_expert, select_targets
from titans_seq.backbone import Backbone
from titans_seq.training.checkpoint import CheckpointError

MIXERS = library_mixers()


def tiny(mixer: str, seed: int = 0) -> Backbone:
    torch.manual_seed(seed)
    return Backbone(16, 2, mixer=mixer, heads=2).double()


def perturb(svf: SVF, seed: int = 1) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in svf.parameters():
            p.mul_(1 + 0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))


@pytest.mark.parametrize("mixer", MIXERS)
def test_identity_at_z_one_and_gradients_only_on_z(mixer):
    model = tiny(mixer)
    x = torch.randn(2, 21, 16, dtype=torch.float64)
    before, _ = model(x)
    svf = SVF(model)
    after, _ = svf(x)
    assert torch.equal(before, after)  # exact: W + U·0·Vᵀ
    perturb(svf)
    y, _ = svf(x)
    assert not torch.allclose(y, before)
    y.square().mean().backward()
    trained = dict(svf.named_parameters())
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in trained.values())
    trained_ids = {id(p) for p in trained.values()}
    for name, p in model.named_parameters():
        if id(p) not in trained_ids:
            assert not p.requires_grad and p.grad is None, name


@pytest.mark.parametrize("mixer", MIXERS)
def test_parameter_count_is_the_number_of_singular_values(mixer):
    model = tiny(mixer)
    expected = 0
    for t in select_targets(model):
        weight = model.get_parameter(t.name)
        expected += weight[..., 0, 0].numel() * min(weight.shape[-2:])
    svf = SVF(model)
    assert svf.num_parameters == expected == sum(p.numel() for p in svf.parameters())
    assert all(p.dim() <= 2 for p in svf.parameters())


def test_default_targets_cover_mixers_mlps_and_memory_initial_weights():
    names = [t.name for t in select_targets(tiny("mag"))]
    assert "blocks.0.mixer.memory.memory_weights.0" in names
    assert "blocks.1.mixer.attention.qkv_proj.weight" in names
    assert "blocks.0.mlp.down_proj.weight" in names


def test_target_patterns_select_fewer_and_refuse_typos():
    model = tiny("lmm")
    chosen = select_targets(model, ["blocks.1.*"])
    assert chosen and all(t.name.startswith("blocks.1.") for t in chosen)
    with pytest.raises(ValueError, match="matches no adaptable matrix"):
        select_targets(model, ["blocks.9.*"])
    with pytest.raises(TypeError):
        select_targets(model, "blocks.*")


@pytest.mark.parametrize("mixer", MIXERS)
def test_expert_round_trip_and_base_mismatch(mixer, tmp_path):
    x = torch.randn(2, 19, 16, dtype=torch.float64)
    svf = SVF(tiny(mixer), base_name="base-a")
    perturb(svf)
    adapted, _ = svf(x)
    path = svf.save_expert(tmp_path / "expert.safetensors", task="demo")

    again = SVF(tiny(mixer))
    expert = again.load_expert(path)
    assert expert.task == "demo" and expert.base_name == "base-a"
    reloaded, _ = again(x)
    assert torch.equal(adapted, reloaded)

    other = SVF(tiny(mixer, seed=1))
    with pytest.raises(ExpertMismatch, match="another base model"):
        other.load_expert(path)
    fewer = SVF(tiny(mixer), targets=["blocks.0.*"])
    with pytest.raises(ExpertMismatch, match="other matrices"):
        fewer.load_expert(path)


def test_a_damaged_expert_file_is_refused(tmp_path):
    svf = SVF(tiny("lmm"))
    perturb(svf)
    path = svf.save_expert(tmp_path / "e.safetensors")
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        read_expert(path)
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(CheckpointError):
        read_expert(tmp_path / "empty.safetensors")


def test_mixture_is_the_weighted_sum_of_z_and_reset_restores_the_base(tmp_path):
    svf = SVF(tiny("mac"))
    perturb(svf, seed=1)
    first = svf.expert()
    perturb(svf, seed=2)
    second = svf.expert()
    svf.set_mixture([first, second], [0.25, 0.75])
    for name, scale in svf.scales.items():
        torch.testing.assert_close(scale.z, 0.25 * first.z[name] + 0.75 * second.z[name])
    with pytest.raises(ValueError, match="as many weights"):
        svf.set_mixture([first, second], [1.0])
    x = torch.randn(1, 9, 16, dtype=torch.float64)
    base, _ = tiny("mac")(x)
    svf.reset()
    assert torch.equal(svf(x)[0], base)


def test_merge_writes_the_adapted_weights_into_a_plain_model():
    svf = SVF(tiny("mal"))
    perturb(svf)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    merged = svf.merge()
    torch.testing.assert_close(merged(x)[0], svf(x)[0], rtol=1e-12, atol=1e-12)
    assert all(p.requires_grad for p in merged.parameters())
    assert not any(type(m).__name__.startswith("Parametrized") for m in merged.modules())


def test_disabled_runs_the_base_and_also_train_parameters_are_trained_and_saved(tmp_path):
    model = tiny("lmm")
    x = torch.randn(1, 11, 16, dtype=torch.float64)
    base, _ = model(x)
    svf = SVF(model)
    perturb(svf)
    with svf.disabled():
        assert torch.equal(svf(x)[0], base)
    assert not torch.equal(svf(x)[0], base)

    with_head = SVF(tiny("lmm"), also_train=["final_norm.*"])
    names = [n for n, _ in with_head.named_parameters()]
    assert "final_norm.weight" in names
    with torch.no_grad():
        with_head.model.final_norm.weight.mul_(2)
    path = with_head.save_expert(tmp_path / "e.safetensors")
    fresh = SVF(tiny("lmm"), also_train=["final_norm.*"])
    fresh.load_expert(path)
    torch.testing.assert_close(fresh.model.final_norm.weight, with_head.model.final_norm.weight)
    with pytest.raises(ExpertMismatch, match="extra"):
        SVF(tiny("lmm")).load_expert(path)
    with pytest.raises(ValueError, match="also_train"):
        with with_head.disabled():
            pass


def test_adapting_twice_is_refused():
    svf = SVF(tiny("lmm"))
    with pytest.raises(ValueError, match="already parametrized"):
        SVF(svf.model)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_identity_holds_in_low_precision(dtype):
    model = tiny("lmm").to(dtype)
    x = torch.randn(2, 17, 16, dtype=dtype)
    before, _ = model(x)
    after, _ = SVF(model)(x)
    assert torch.equal(before, after)


def test_evaluating_restores_the_mode_also_after_an_error():
    svf = SVF(tiny("lmm"))
    svf.model.train()
    with pytest.raises(RuntimeError, match="inside"):
        with svf.evaluating():
            assert not svf.model.training and not torch.is_grad_enabled()
            raise RuntimeError("inside")
    assert svf.model.training and torch.is_grad_enabled()
