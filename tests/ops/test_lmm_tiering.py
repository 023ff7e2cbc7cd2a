"""`backend="auto"` on a CPU: a memory layer trains on eager chunk steps until its eager
work reaches the tier's threshold, then on compiled ones (the same function to float32
rounding), or on compiled ones from the start when the run's planned work exceeds it;
inference, explicit backends, GPUs and sequences without a full chunk never switch; a
training run plans and checkpoints where each layer stands."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import titans_seq as ts
from titans_seq.ops.lmm import torch_backend
from titans_seq.ops.lmm.compiled_step import StepCompiler
from titans_seq.ops.lmm.segment_step import step_backward, step_forward
from titans_seq.ops.lmm.tiering import (
    CompileTier,
    load_tier_states,
    plan_compilation,
    tier_states,
)

WEIGHTS = (torch.zeros(2, 8, 8), torch.zeros(2, 8, 8))  # [H, out, in]: 128 per head
PER_CALL = 2 * 32 * 2 * 128  # B x T x H x weights per head: the work of one `choose` call


def choose(tier, requested="auto", shape=(2, 32, 2, 8), device="cpu", grad=True):
    with torch.set_grad_enabled(grad):
        return tier.backend(requested, torch.Size(shape), torch.device(device), WEIGHTS, 16)


def test_auto_trains_eagerly_until_the_work_reaches_the_threshold():
    tier = CompileTier(work_before_compiling=2.5 * PER_CALL)
    assert [choose(tier) for _ in range(4)] == ["auto", "auto", "compiled", "compiled"]
    assert tier.compiled and tier.work == 3 * PER_CALL  # counting stops once compiled


def test_a_plan_long_enough_to_pay_compiles_from_the_first_call():
    tier = CompileTier(work_before_compiling=10 * PER_CALL, planned_calls=11)
    assert choose(tier) == "compiled"
    assert tier.compiled and tier.work == 0


def test_a_plan_too_short_to_pay_leaves_the_ski_rental_rule():
    tier = CompileTier(work_before_compiling=2.5 * PER_CALL, planned_calls=2)
    assert [choose(tier) for _ in range(4)] == ["auto", "auto", "compiled", "compiled"]


def test_only_the_first_training_call_reads_the_plan():
    """A resumed run (work restored, plan of its remaining calls) keeps the course the
    uninterrupted run took at its first call, whatever the plan says now."""
    tier = CompileTier(work_before_compiling=3.5 * PER_CALL)
    assert choose(tier) == "auto"
    tier.planned_calls = 1000
    assert [choose(tier) for _ in range(3)] == ["auto", "auto", "compiled"]
    # calls that never count (inference, no full chunk) do not spend the decision either
    tier = CompileTier(work_before_compiling=10 * PER_CALL, planned_calls=11)
    assert choose(tier, grad=False) == "auto" and choose(tier, shape=(2, 15, 2, 8)) == "auto"
    assert choose(tier) == "compiled"


def test_plan_compilation_reaches_every_memory_layer():
    model = torch.nn.Sequential(
        ts.build_mixer("lmm", dim=16, heads=2), ts.build_mixer("mac", dim=16, segment_size=8)
    )
    plan_compilation(model, 300)
    tiers = [m.compile_tier for m in model.modules() if hasattr(m, "compile_tier")]
    assert len(tiers) == 2 and {t.planned_calls for t in tiers} == {300}
    plan_compilation(model, None)
    assert {t.planned_calls for t in tiers} == {None}


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
    # chunk by chunk: the switch is what this test checks (the CPU's chunk scan compiles
    # for longer; test_lmm_chunk_scan.py compares it with the eager steps)
    monkeypatch.setattr(torch_backend, "shared_chunk_scan", lambda: None)
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


def test_the_training_loop_plans_the_calls_a_run_still_makes(tmp_path, monkeypatch):
    from titans_seq.training import load_config, loop, train

    plans = []
    monkeypatch.setattr(loop, "plan_compilation", lambda model, calls: plans.append(calls))
    overrides = {
        "data.num_train": 64,
        "data.num_val": 16,
        "train.max_steps": 4,
        "train.grad_accum": 2,
        "optim.warmup_steps": 0,
        "train.checkpoint_every": 2,
        "eval.every": 2,
        "train.progress": False,
        "train.plot": False,
        "train.out_dir": str(tmp_path / "run"),
    }
    train(load_config("synthetic/tiny", overrides), quiet=True)
    with pytest.warns(UserWarning, match="differs from the checkpoint"):
        train(
            load_config("synthetic/tiny", {**overrides, "train.max_steps": 7}),
            resume=True,
            quiet=True,
        )
    assert plans == [4 * 2, 3 * 2]
