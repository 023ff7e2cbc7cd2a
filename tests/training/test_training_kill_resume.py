"""A run killed with SIGKILL and resumed ends exactly like an uninterrupted run (CPU)."""

from __future__ import annotations

import subprocess

import torch
from process_helpers import sigkill_after_checkpoint
from training_helpers import cli_command, subprocess_env, tiny_raw, write_recipe

from titans_seq.training import from_dict, train
from titans_seq.training.checkpoint import load_checkpoint
from titans_seq.training.logs import read_csv

KILL_AFTER_STEP = 40
MAX_STEPS = 120


def _raw(out_dir):
    return tiny_raw(
        out_dir,
        # a short sleep per step leaves time to kill the run between checkpoints
        data={"delay": 0.01},
        train={"max_steps": MAX_STEPS, "checkpoint_every": 10, "keep_checkpoints": 3},
        eval={"every": 20},
    )


def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    reference = train(from_dict(_raw(tmp_path / "reference")))

    run_dir = tmp_path / "killed"
    recipe = write_recipe(tmp_path / "recipe.yaml", _raw(run_dir))
    env = subprocess_env()
    args = cli_command("train", str(recipe))
    killed_at = sigkill_after_checkpoint(args, env, run_dir, KILL_AFTER_STEP, timeout=120)
    assert KILL_AFTER_STEP <= killed_at < MAX_STEPS  # really killed mid-training

    resumed = subprocess.run(
        cli_command("train", str(recipe), "--resume"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stderr + resumed.stdout

    final = load_checkpoint(run_dir / "checkpoints" / f"step_{MAX_STEPS:08d}")
    expected = load_checkpoint(reference.run_dir / "checkpoints" / f"step_{MAX_STEPS:08d}")
    for key, value in expected.model_state.items():
        assert torch.equal(final.model_state[key], value), key
    assert final.training_state["history"] == expected.training_state["history"]
    assert read_csv(run_dir / "eval_log.csv") == read_csv(reference.run_dir / "eval_log.csv")
    columns = ("step", "loss", "lr", "grad_norm")  # throughput differs, the numbers must not
    got = [{c: r[c] for c in columns} for r in read_csv(run_dir / "train_log.csv")]
    want = [{c: r[c] for c in columns} for r in read_csv(reference.run_dir / "train_log.csv")]
    assert got == want
