"""The shared training loop on the tiny regression task (fast, in-process)."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import pytest
import torch
import yaml

from titans_seq.training import from_dict, load_config, train
from titans_seq.training.checkpoint import load_checkpoint, load_weights
from titans_seq.training.config import ConfigError
from titans_seq.training.logs import read_csv
from titans_seq.training.optim import WarmupCosine, build_optimizer, decay_split


def final_weights(run_dir):
    ckpt = load_checkpoint(sorted((run_dir / "checkpoints").glob("step_*"))[-1])
    return ckpt.step, ckpt.model_state


def test_training_learns_and_writes_the_run_folder(tiny):
    cfg = from_dict(
        tiny(train={"max_steps": 60, "plot": True}, model={"dropout": 0.0}, optim={"lr": 2e-2})
    )
    result = train(cfg)
    run = cfg.run_dir()
    assert result.step == 60 and not result.stopped_early
    val = read_csv(run / "eval_log.csv")
    assert [r["step"] for r in val] == [10, 20, 30, 40, 50, 60]
    assert val[-1]["loss"] < 0.5 * val[0]["loss"]  # it learns
    assert {"loss", "mae"} <= set(val[0])
    rows = read_csv(run / "train_log.csv")
    assert [r["step"] for r in rows] == list(range(5, 61, 5))
    assert {"loss", "lr", "grad_norm", "examples_per_s"} <= set(rows[0])
    assert (run / "learning_curves.png").read_bytes()[:4] == b"\x89PNG"
    # the saved config is a recipe that reproduces the run's config
    assert load_config(run / "config.yaml") == cfg
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_step"] == result.best_step and summary["metric"] == "loss"
    best = load_weights(run / "best_model.safetensors")
    assert set(best) == set(final_weights(run)[1])
    assert result.best_metric == min(r["loss"] for r in val)


def test_no_weight_decay_on_norms_biases_and_persistent_parameters(tiny):
    from training_tiny_task import TinyNet

    model = TinyNet(8, 16, 0.0)
    model.extra = torch.nn.Parameter(torch.zeros(2, 2))
    model.extra._no_weight_decay = True
    decay, keep = decay_split(model, ["persistent"])
    assert decay == ["net.0.weight", "net.3.weight"]
    assert set(keep) == {"persistent_offset", "net.0.bias", "net.3.bias", "extra"}
    cfg = from_dict(tiny(optim={"weight_decay": 0.3}))
    groups = build_optimizer(model, cfg.optim).param_groups
    assert [g["weight_decay"] for g in groups] == [0.3, 0.0]
    assert [len(g["params"]) for g in groups] == [2, 4]


def test_warmup_cosine_schedule():
    f = WarmupCosine(warmup_steps=4, total_steps=14, min_ratio=0.1)
    assert [f(s) for s in range(4)] == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert f(4) == pytest.approx(1.0)
    assert f(9) == pytest.approx(0.1 + 0.9 * 0.5)
    assert f(14) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)
    assert all(f(s) >= f(s + 1) for s in range(4, 20))


def test_gradient_accumulation_keeps_the_global_batch(tmp_path, tiny):
    runs = []
    for accum in (1, 4):
        raw = tiny(model={"dropout": 0.0}, train={"grad_accum": accum, "max_steps": 20})
        raw["train"]["out_dir"] = str(tmp_path / f"accum{accum}")
        runs.append(train(from_dict(raw)))
    (_, a), (_, b) = final_weights(runs[0].run_dir), final_weights(runs[1].run_dir)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    assert runs[0].history[-1]["loss"] == pytest.approx(runs[1].history[-1]["loss"], rel=1e-5)


def test_resume_from_a_checkpoint_is_exact(tmp_path, tiny):
    """Continue from the step-20 checkpoint in a new folder: same weights, logs, metrics."""
    # log_every=6 does not divide the checkpoint step: a loss window spans the resume
    raw = tiny(train={"keep_checkpoints": 10, "log_every": 6})
    full = train(from_dict(raw))
    source = full.run_dir / "checkpoints" / "step_00000020"
    raw["train"]["out_dir"] = str(tmp_path / "resumed")
    resumed = train(from_dict(raw), resume=source)
    step_a, a = final_weights(full.run_dir)
    step_b, b = final_weights(resumed.run_dir)
    assert step_a == step_b == 40
    assert all(torch.equal(a[k], b[k]) for k in a)  # bitwise: dropout RNG restored too
    assert resumed.history == full.history
    logged = [(r["step"], r["loss"]) for r in read_csv(resumed.run_dir / "train_log.csv")]
    expected = [(r["step"], r["loss"]) for r in read_csv(full.run_dir / "train_log.csv")]
    assert logged == [e for e in expected if e[0] > 20]


def test_a_different_seed_changes_the_run(tmp_path, tiny):
    raws = [tiny(train={"max_steps": 10, "seed": s}) for s in (0, 1)]
    for s, raw in enumerate(raws):
        raw["train"]["out_dir"] = str(tmp_path / f"seed{s}")
    (_, a), (_, b) = (final_weights(train(from_dict(r)).run_dir) for r in raws)
    assert not torch.equal(a["net.0.weight"], b["net.0.weight"])


def test_early_stopping_and_hooks(tiny):
    seen = []
    # min_delta larger than any possible improvement: the first evaluation is the best
    cfg = from_dict(tiny(eval={"every": 5, "patience": 2, "min_delta": 1e9, "mode": "min"}))
    result = train(cfg, hooks=[lambda step, metrics: seen.append((step, metrics["loss"]))])
    assert result.stopped_early and result.step == 15
    assert [s for s, _ in seen] == [5, 10, 15] and result.best_step == 5
    assert result.best_metric == seen[0][1]
    # resuming a run that stopped early does not train further
    again = train(cfg, resume=True)
    assert again.step == 15 and again.stopped_early


def test_unknown_eval_metric_is_reported_with_the_available_ones(tiny):
    with pytest.raises(ConfigError, match="eval.metric is 'accuracy'.*\\['loss', 'mae'\\]"):
        train(from_dict(tiny(eval={"metric": "accuracy"})))


def test_a_quiet_run_prints_nothing_but_keeps_its_logs(tiny, capsys):
    result = train(from_dict(tiny(train={"progress": True})), quiet=True)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert read_csv(result.run_dir / "eval_log.csv")


def test_resume_truncates_logs_written_after_the_checkpoint(tiny):
    """A run killed after its last checkpoint logged extra rows: they must go on resume."""
    raw = tiny(train={"max_steps": 30, "keep_checkpoints": 5})
    first = train(from_dict(raw))
    shutil.rmtree(first.run_dir / "checkpoints" / "step_00000030")
    (first.run_dir / "checkpoints" / "latest").write_text("step_00000020\n")
    second = train(from_dict(raw), resume=True)
    steps = [r["step"] for r in read_csv(second.run_dir / "train_log.csv")]
    assert steps == sorted(set(steps)) == list(range(5, 31, 5))
    assert [r["step"] for r in read_csv(second.run_dir / "eval_log.csv")] == [10, 20, 30]


def test_config_change_on_resume_is_warned(tiny):
    raw = tiny(train={"max_steps": 20})
    train(from_dict(raw))
    raw["train"]["max_steps"] = 30
    with pytest.warns(UserWarning, match="train.max_steps: 20 -> 30"):
        result = train(from_dict(raw), resume=True)
    assert result.step == 30
    # the schedule follows the new horizon: still above its floor at step 25
    lrs = {r["step"]: r["lr"] for r in read_csv(result.run_dir / "train_log.csv")}
    assert lrs[25] > 1.01 * raw["optim"]["lr"] * 0.1
    assert lrs[30] == pytest.approx(raw["optim"]["lr"] * 0.1)
    assert yaml.safe_load((result.run_dir / "config.yaml").read_text())["train"]["max_steps"] == 30


def test_nan_metrics_never_count_as_improvement():
    from titans_seq.training.loop import EarlyStopping

    es = EarlyStopping("min", patience=2, min_delta=0.0)
    assert es.update(1.0, 1) and not es.update(math.nan, 2) and not es.update(math.nan, 3)
    assert es.should_stop and es.best == 1.0


def test_tensorboard_events_are_written_when_tensorboard_is_installed(tiny):
    pytest.importorskip("tensorboard", reason="tensorboard is optional; CSV logs are always on")
    cfg = from_dict(tiny(train={"max_steps": 10, "tensorboard": True}))
    train(cfg)
    assert list((cfg.run_dir() / "tensorboard").glob("events.out.tfevents.*"))


def test_tensorboard_true_without_the_package_says_so(tiny, monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name.startswith("torch.utils.tensorboard") or name.startswith("tensorboard"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.warns(UserWarning, match="tensorboard package is not installed"):
        train(from_dict(tiny(train={"max_steps": 5, "tensorboard": True})))
    with warnings.catch_warnings():  # "auto" (the default) and false stay quiet
        warnings.filterwarnings("error", message=".*tensorboard.*")
        auto = {"max_steps": 5, "tensorboard": "auto", "out_dir": str(tmp_path / "auto")}
        train(from_dict(tiny(train=auto)))


def test_the_float32_matmul_precision_holds_for_the_run_only(tiny, tmp_path):
    import torch

    seen = []
    before = torch.get_float32_matmul_precision()
    cfg = from_dict(tiny(train={"max_steps": 10, "float32_matmul_precision": "medium"}))
    train(cfg, hooks=[lambda step, metrics: seen.append(torch.get_float32_matmul_precision())])
    assert seen and set(seen) == {"medium"}
    assert torch.get_float32_matmul_precision() == before
    with pytest.raises(ConfigError, match="float32_matmul_precision"):
        from_dict(tiny(train={"float32_matmul_precision": "low"}))


def test_compiled_training_steps_train_as_the_eager_ones(tmp_path, tiny):
    """train.compile: true runs the training steps through torch.compile: the same losses
    and weights as the eager steps (to float rounding), the same run folder, and the saved
    weights keep their names (the compiled model shares the eager one's parameters)."""
    torch._dynamo.reset()
    runs = []
    for compile_steps in (False, True):
        raw = tiny(model={"dropout": 0.0}, train={"max_steps": 12, "compile": compile_steps})
        raw["train"]["out_dir"] = str(tmp_path / f"compile_{compile_steps}")
        runs.append(train(from_dict(raw)))
    (_, eager), (_, compiled) = (final_weights(r.run_dir) for r in runs)
    assert set(eager) == set(compiled)
    for name in eager:
        torch.testing.assert_close(compiled[name], eager[name], rtol=1e-4, atol=1e-5)
    losses = [[r["loss"] for r in read_csv(run.run_dir / "train_log.csv")] for run in runs]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)


def test_a_compilation_that_fails_falls_back_to_eager_steps(tmp_path, tiny, monkeypatch):
    """When torch.compile cannot compile the model, the run warns once and trains eagerly
    from that step on: no step lost, the eager run's weights."""
    from torch._dynamo.exc import BackendCompilerFailed

    from titans_seq.training import compilation

    def failing_compile(model):
        def forward(*args, **kwargs):
            raise BackendCompilerFailed("inductor", RuntimeError("no C++ compiler"), None)

        return forward

    monkeypatch.setattr(compilation.torch, "compile", failing_compile)
    raw = tiny(model={"dropout": 0.0}, train={"max_steps": 12, "compile": True})
    with pytest.warns(RuntimeWarning, match="torch.compile of the model failed") as caught:
        result = train(from_dict(raw))
    assert len([w for w in caught if "torch.compile" in str(w.message)]) == 1
    monkeypatch.undo()
    raw["train"].update(compile=False, out_dir=str(tmp_path / "eager"))
    eager = train(from_dict(raw))
    a, b = final_weights(result.run_dir)[1], final_weights(eager.run_dir)[1]
    for name in a:
        torch.testing.assert_close(a[name], b[name])


@pytest.mark.parametrize(
    "setting, device, steps, expected",
    [
        ("auto", "cuda", 500, True),
        ("auto", "cuda", 499, False),  # too short to repay the compilation
        ("auto", "cpu", 10_000, False),  # the CPU memory layers compile their own steps
        (True, "cpu", 1, True),
        (False, "cuda", 10_000, False),
    ],
)
def test_auto_compiles_long_runs_on_a_gpu(setting, device, steps, expected):
    from titans_seq.training.compilation import should_compile

    assert should_compile(setting, torch.device(device), steps) is expected
    # a sharded (FSDP) model compiles only when asked to
    assert should_compile(setting, torch.device(device), steps, sharded=True) is (
        expected and setting is True
    )
