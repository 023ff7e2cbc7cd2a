"""`optim.ema_decay`: a run evaluates, keeps and checkpoints an exponential moving average of
its trained weights; a resume continues it bit for bit; bad values are refused by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from titans_seq.training import from_dict, train
from titans_seq.training.checkpoint import load_checkpoint, load_weights
from titans_seq.training.config import ConfigError
from titans_seq.training.weight_average import WeightAverage


def checkpoint_at(run_dir, step):
    return load_checkpoint(run_dir / "checkpoints" / f"step_{step:08d}")


def test_the_average_follows_its_recurrence_with_a_warmup():
    model = nn.Linear(2, 1, bias=False)
    model.register_buffer("count", torch.tensor(0))
    decay, values = 0.9, [1.0, 3.0, -2.0, 5.0, 0.5]
    average, expected = None, None
    for n, value in enumerate(values):
        with torch.no_grad():
            model.weight.fill_(value)
            model.count.fill_(n)
        if average is None:
            average = WeightAverage(model, decay)
        average.update(model)
        # the first update copies; after n updates the next averages at min(decay, (1+n)/(10+n))
        if expected is None:
            expected = value
        else:
            d = min(decay, (1.0 + n) / (10.0 + n))
            expected = d * expected + (1 - d) * value
        torch.testing.assert_close(
            average.module.weight, torch.full((1, 2), expected), rtol=0, atol=1e-6
        )
        assert int(average.module.count) == n  # an integer buffer is copied, not averaged
    assert not torch.equal(average.module.weight, model.weight)


def test_a_run_evaluates_keeps_and_checkpoints_the_average(tmp_path, tiny):
    raw = tiny(optim={"ema_decay": 0.9}, train={"keep_checkpoints": 5})
    result = train(from_dict(raw))
    best = load_weights(result.run_dir / "best_model.safetensors")
    at_best = checkpoint_at(result.run_dir, result.best_step)
    average = at_best.training_state["weight_average"]
    assert int(average["n_averaged"]) == result.best_step
    for name, value in best.items():
        torch.testing.assert_close(average["module." + name], value, rtol=0, atol=0)
    trained = at_best.model_state
    assert any(not torch.equal(trained[n], best[n]) for n in best)  # not the trained weights
    # without the option the best weights are the trained ones
    plain = train(from_dict(tiny(train={"out_dir": str(tmp_path / "plain")})))
    kept = load_weights(plain.run_dir / "best_model.safetensors")
    trained = checkpoint_at(plain.run_dir, plain.best_step).model_state
    assert all(torch.equal(trained[n], kept[n]) for n in kept)


def test_a_resume_continues_the_average_bit_for_bit(tmp_path, tiny):
    raw = tiny(optim={"ema_decay": 0.8}, train={"keep_checkpoints": 5})
    full = train(from_dict(raw))
    raw["train"]["out_dir"] = str(tmp_path / "resumed")
    resumed = train(from_dict(raw), resume=full.run_dir / "checkpoints" / "step_00000020")
    a = checkpoint_at(full.run_dir, 40).training_state["weight_average"]
    b = checkpoint_at(resumed.run_dir, 40).training_state["weight_average"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [h["loss"] for h in full.history] == [h["loss"] for h in resumed.history]


@pytest.mark.parametrize(
    "optim, train_section, message",
    [
        ({"ema_decay": 1.0}, {}, r"optim.ema_decay"),
        ({"ema_decay": 0.0}, {}, r"optim.ema_decay"),
        ({"ema_decay": 0.99}, {"distributed": "fsdp"}, r"optim.ema_decay.*fsdp"),
    ],
)
def test_bad_settings_are_refused_by_name(tiny, optim, train_section, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(tiny(optim=optim, train=train_section))
