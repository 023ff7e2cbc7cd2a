"""`train.init_from`: a new run starts from another run's (or a file's) trained weights."""

from __future__ import annotations

import pytest
import torch

from titans_seq.training import from_dict, train
from titans_seq.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_weights,
    save_weights,
)


def checkpoint_at(run_dir, step):
    return load_checkpoint(run_dir / "checkpoints" / f"step_{step:08d}")


def test_a_run_starts_from_the_source_runs_best_weights(tmp_path, tiny):
    source = train(from_dict(tiny()))
    best = load_weights(source.run_dir / "best_model.safetensors")
    raw = tiny(
        train={
            "out_dir": str(tmp_path / "fine"),
            "max_steps": 10,
            "checkpoint_every": 10,
            "init_from": str(source.run_dir),
        },
        optim={"lr": 1e-12, "warmup_steps": 0},
    )
    fine = train(from_dict(raw))
    after = checkpoint_at(fine.run_dir, 10).model_state
    # at a learning rate of 1e-12 ten steps leave the weights where they started
    for name, value in best.items():
        torch.testing.assert_close(after[name], value, rtol=0, atol=1e-9)
    fresh = tiny(
        train={"out_dir": str(tmp_path / "fresh"), "max_steps": 10, "checkpoint_every": 10},
        optim={"lr": 1e-12, "warmup_steps": 0},
    )
    scratch = checkpoint_at(train(from_dict(fresh)).run_dir, 10).model_state
    assert any(not torch.allclose(scratch[n], best[n]) for n in best)


def test_a_safetensors_file_starts_a_run_and_a_resume_keeps_its_checkpoint(tmp_path, tiny):
    source = train(from_dict(tiny()))
    weights = tmp_path / "start.safetensors"
    save_weights(weights, load_weights(source.run_dir / "best_model.safetensors"))
    raw = tiny(
        train={
            "out_dir": str(tmp_path / "fine"),
            "max_steps": 20,
            "keep_checkpoints": 5,
            "init_from": str(weights),
        }
    )
    full = train(from_dict(raw))
    # resumed at step 10 in another folder: the checkpoint's weights, not the file's
    raw["train"]["out_dir"] = str(tmp_path / "resumed")
    resumed = train(from_dict(raw), resume=full.run_dir / "checkpoints" / "step_00000010")
    a = checkpoint_at(full.run_dir, 20).model_state
    b = checkpoint_at(resumed.run_dir, 20).model_state
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_weights_of_another_model_are_refused_by_name(tmp_path, tiny):
    source = train(from_dict(tiny(model={"hidden": 8})))
    raw = tiny(train={"out_dir": str(tmp_path / "fine"), "init_from": str(source.run_dir)})
    with pytest.raises(CheckpointError, match=r"init_from.*of another shape: .*\(8,"):
        train(from_dict(raw))


@pytest.mark.parametrize("kind", ["missing", "folder", "pickle"])
def test_a_source_that_is_not_weights_is_refused_by_name(tmp_path, tiny, kind):
    source = tmp_path / "source"
    if kind == "folder":
        source.mkdir()
    elif kind == "pickle":
        source = tmp_path / "model.pt"
        torch.save({"w": torch.zeros(1)}, source)
    raw = tiny(train={"out_dir": str(tmp_path / "fine"), "init_from": str(source)})
    with pytest.raises((CheckpointError, FileNotFoundError), match=rf"init_from: {source}"):
        train(from_dict(raw))
    assert not (tmp_path / "fine" / "checkpoints").exists()
