"""A run that meets a NaN/inf loss or gradient stops and says where (or skips, if asked)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from titans_seq.training import TrainingDiverged, from_dict, train
from titans_seq.training.checkpoint import load_checkpoint, strict_json


def _strict_load(text: str):
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_nan_training_loss_stops_the_run_naming_the_step(tiny):
    cfg = from_dict(tiny(data={"nan_train_examples": 1}, train={"max_steps": 40}))
    with pytest.raises(TrainingDiverged) as info:
        train(cfg)
    err = info.value
    assert err.what == "loss" and math.isnan(err.loss)
    assert 1 <= err.step <= 40
    message = str(err)
    assert f"step {err.step}" in message and "optim.lr" in message
    assert "skip_nonfinite" in message
    # checkpoints written before the bad step hold finite weights
    for ckpt in sorted((cfg.run_dir() / "checkpoints").glob("step_*")):
        assert all(torch.isfinite(t).all() for t in load_checkpoint(ckpt).model_state.values())


def test_skip_nonfinite_skips_bad_steps_within_its_budget(tiny):
    cfg = from_dict(
        tiny(data={"nan_train_examples": 1}, train={"max_steps": 40, "skip_nonfinite": 10})
    )
    result = train(cfg)
    summary = _strict_load((cfg.run_dir() / "summary.json").read_text())
    # 40 steps of 16 over 256 examples: the poisoned example is drawn once per epoch
    assert summary["skipped_steps"] == 3
    assert result.step == 40 and math.isfinite(result.best_metric)
    final = load_checkpoint(cfg.run_dir() / "checkpoints" / "step_00000040")
    assert all(torch.isfinite(t).all() for t in final.model_state.values())

    # a budget smaller than the bad steps raises at the first step beyond it
    budget = from_dict(
        tiny(data={"nan_train_examples": 1}, train={"max_steps": 40, "skip_nonfinite": 1})
    )
    budget.train.out_dir = str(cfg.run_dir().parent / "budget")
    with pytest.raises(TrainingDiverged):
        train(budget)


def test_a_nan_validation_metric_stops_the_run(tiny):
    cfg = from_dict(tiny(data={"nan_val_examples": 2}, train={"max_steps": 20}))
    with pytest.raises(TrainingDiverged, match="validation loss") as info:
        train(cfg)
    assert info.value.step == 10  # the first evaluation


def test_summary_json_is_strict_json():
    text = strict_json({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -math.inf}})
    assert _strict_load(text) == {"a": None, "b": [1.0, None], "c": {"d": None}}


def test_the_cli_exits_non_zero_on_a_diverging_run(tiny, tmp_path, capsys):
    import yaml

    from titans_seq.cli import main

    recipe = tmp_path / "nan.yaml"
    recipe.write_text(yaml.safe_dump(tiny(data={"nan_train_examples": 1})))
    code = main(["train", str(recipe)])
    assert code == 2
    err = capsys.readouterr().err
    assert "training diverged at step" in err and "optim.lr" in err
