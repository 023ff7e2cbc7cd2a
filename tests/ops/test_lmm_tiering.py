"""`backend="auto"` on a CPU: a memory layer trains on eager chunk steps until its eager
work reaches the tier's threshold, then on compiled ones (the same function to float32
rounding); inference, explicit backends, GPUs and sequences without a full chunk never
switch; a training run checkpoints where each layer stands."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import titans_seq as ts
from titans_seq.ops.lmm import torch_backend
from titans_seq.ops.lmm.compiled_step import StepCompiler
from titans_seq.ops.lmm.segment_step import step_backward, step_forward
from titans_seq.ops.lmm.tiering import CompileTier, load_tier_states, tier_states

WEIGHTS = (torch.zeros(2, 8, 8), torch.zeros(2, 8, 8))  # [H, out, in]: 128 per head


def choose(tier, requested="auto", shape=(2, 32, 2, 8), device="cpu", grad=True):
    with torch.set_grad_enabled(grad):
        return tier.backend(requested, torch.Size(shape), torch.device(device), WEIGHTS, 16)


def test_auto_trains_eagerly_until_the_work_reaches_the_threshold():
    per_call = 2 * 32 * 2 * 128  # B x T x H x weights per head
    tier = CompileTier(work_before_compiling=2.5 * per_call)
    assert [choose(tier) for _ in range(4)] == ["auto", "auto", "compiled", "compiled"]
    assert tier.compiled and tier.work == 3 * per_call  # counting stops once compiled


def test_inference_short_sequences_explicit_backends_and_gpus_never_count():
    tier = CompileTier(work_before_compiling=0)
    assert choose(tier, grad=False) == "auto"
    assert choose(tier, shape=(2, 15, 2, 8)) == "auto"  # no full chunk: nothing to compile
    assert choose(tier, requested="torch") == "torch"
    assert choose(tier, requested="triton", device="cuda") == "triton"
    assert choose(tier, device="cuda") == "auto"
    assert tier.work == 0 and not tier.compiled
    never = CompileTier(work_before_compiling=math.inf)
    assert {choose(never) for _ in range(3)} == {"auto"}


def test_a_layer_switches_to_compiled_steps_with_the_same_function(monkeypatch):
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=16, heads=2, memory={"chunk_size": 16})
    eager = copy.deepcopy(mixer)
    eager.backend = "torch"
    tier = mixer.memory.compile_tier
    tier.work_before_compiling = 0  # the first training call compiles
    compiler = StepCompiler(step_forward, step_backward)
    monkeypatch.setattr(torch_backend, "shared_step_compiler", lambda: compiler)
    x = torch.randn(2, 37, 16)
    outputs = []
    for layer in (mixer, eager):
        xi = x.clone().requires_grad_()
        y, _ = layer(xi)
        y.square().sum().backward()
        grads = [xi.grad, *(p.grad for p in layer.parameters())]
        outputs.append((y.detach(), grads))
    assert tier.compiled and len(compiler.graphs(False)) > 0
    (y_a, g_a), (y_b, g_b) = outputs
    torch.testing.assert_close(y_a, y_b, rtol=1e-5, atol=1e-6)
    for a, b in zip(g_a, g_b, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * max(b.abs().max().item(), 1e-6))


def test_tier_states_round_trip_by_module_name():
    model = torch.nn.Sequential(
        ts.build_mixer("lmm", dim=16, heads=2), ts.build_mixer("mag", dim=16, heads=2, window=8)
    )
    model[1].memory.compile_tier.load_state_dict({"work": 5.0, "compiled": True})
    states = tier_states(model)
    assert states == {
        "0.memory": {"work": 0.0, "compiled": False},
        "1.memory": {"work": 5.0, "compiled": True},
    }
    fresh = torch.nn.Sequential(
        ts.build_mixer("lmm", dim=16, heads=2), ts.build_mixer("mag", dim=16, heads=2, window=8)
    )
    load_tier_states(fresh, states)
    assert tier_states(fresh) == states


def test_a_training_checkpoint_records_each_memory_layers_tier(tmp_path):
    from titans_seq.training import load_config, train
    from titans_seq.training.checkpoint import load_checkpoint

    cfg = load_config(
        "synthetic/tiny",
        {
            "data.num_train": 64,
            "data.num_val": 16,
            "train.max_steps": 4,
            "optim.warmup_steps": 0,
            "train.checkpoint_every": 4,
            "eval.every": 4,
            "train.progress": False,
            "train.plot": False,
            "train.out_dir": str(tmp_path / "run"),
        },
    )
    result = train(cfg, quiet=True)
    ckpt = load_checkpoint(sorted((result.run_dir / "checkpoints").glob("step_*"))[-1])
    tiers = ckpt.training_state["memory_tiers"]
    assert len(tiers) == 1
    (state,) = tiers.values()
    assert state["work"] > 0 and state["compiled"] is False


@pytest.mark.parametrize("name", ["lmm", "mag", "mal", "mac"])
def test_every_memory_mixer_has_a_tier(name):
    options = {} if name == "lmm" else {"window": 8} if name != "mac" else {"segment_size": 8}
    mixer = ts.build_mixer(name, dim=16, heads=2, **options)
    assert isinstance(mixer.memory.compile_tier, CompileTier)
