"""The shipped LM recipes: they validate, `lm/tiny` trains end to end offline from the CLI,
a killed run resumes exactly, and two torchrun processes (DDP, gloo) follow one process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch
from process_helpers import cli_command, sigkill_after_checkpoint, subprocess_env, torchrun_train

from titans_seq.domains.lm import TitansLM
from titans_seq.training import load_config, read_recipe, train
from titans_seq.training.checkpoint import load_checkpoint
from titans_seq.training.logs import read_csv
from titans_seq.training.recipe_files import list_recipes

LM_RECIPES = [n for n in list_recipes() if read_recipe(n).get("task") == "lm"]
MIXERS = {"attention", "swa", "lmm", "mac", "mag", "mal"}
# small overrides that keep the shipped tiny recipe but make a test run take seconds
FAST = ["data.seq_len=32", "train.batch_size=4", "eval.max_batches=1", "eval.batch_size=8"]


def _env() -> dict[str, str]:
    return subprocess_env(TITANS_SEQ_OFFLINE="1")  # everything must come from the mirror


def _overrides(out_dir: Path, *extra: str) -> list[str]:
    return [
        *FAST,
        f"train.out_dir={out_dir}",
        "train.progress=false",
        "train.plot=false",
        "train.tensorboard=false",
        *extra,
    ]


def test_every_lm_recipe_validates_and_the_six_mixers_are_covered():
    names = set(LM_RECIPES)
    assert {"lm/tiny", "lm/fineweb_edu_125m"} <= names
    covered = set()
    for name in LM_RECIPES:
        cfg = load_config(name)
        assert cfg.eval.metric == "bpb", name
        if name.startswith("lm/tinyshakespeare_"):
            assert cfg.model.preset == "20m" and cfg.data.tokenizer == "byte"
            assert 256 <= cfg.data.seq_len <= 1024
            assert cfg.optim.warmup_steps > 0 and cfg.train.precision == "auto"
            covered.add(cfg.model.mixer)
    assert covered == MIXERS
    base = read_recipe("lm/tinyshakespeare_attention")
    assert base["data"]["train"] == "tinyshakespeare"


def test_tinyshakespeare_variants_have_about_the_same_parameter_count():
    counts = {}
    for mixer in sorted(MIXERS):
        cfg = load_config(f"lm/tinyshakespeare_{mixer}")
        with torch.device("meta"):  # no memory, no init cost
            model = get_model(cfg)
        counts[mixer] = model.num_parameters()
    low, high = min(counts.values()), max(counts.values())
    assert 17e6 < low and high < 23e6, counts
    assert high / low < 1.05, counts


def get_model(cfg):
    from titans_seq.training.tasks import get_task

    return get_task("lm").build_model(cfg)


def test_train_lm_tiny_end_to_end_from_the_cli(tmp_path, monkeypatch, capsys):
    from titans_seq.cli import main

    monkeypatch.setenv("TITANS_SEQ_OFFLINE", "1")  # everything must come from the mirror
    run_dir = tmp_path / "run"
    assert main(["train", "lm/tiny", *_overrides(run_dir, "train.max_steps=4")]) == 0
    assert "best val bpb" in capsys.readouterr().out
    model = TitansLM.load(run_dir / "model")
    assert model.layer_mixers == ["lmm", "lmm"]
    log = read_csv(run_dir / "train_log.csv")
    assert log and all(r["tokens_per_s"] > 0 for r in log)
    evals = read_csv(run_dir / "eval_log.csv")
    assert {"loss", "bpb", "ppl"} <= set(evals[-1])


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    extra = ["train.max_steps=16", "train.checkpoint_every=4", "eval.every=8", "train.log_every=4"]
    # the reference runs in a subprocess too: same thread count, so bitwise-equal floats
    reference = tmp_path / "reference"
    done = subprocess.run(
        cli_command("train", "lm/tiny", *_overrides(reference, *extra)),
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    run_dir = tmp_path / "killed"
    args = cli_command("train", "lm/tiny", *_overrides(run_dir, *extra))
    killed_at = sigkill_after_checkpoint(args, _env(), run_dir, 4, timeout=240)
    assert 4 <= killed_at < 16

    resumed = subprocess.run(
        [*args, "--resume"], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr + resumed.stdout
    final = load_checkpoint(run_dir / "checkpoints" / "step_00000016")
    expected = load_checkpoint(reference / "checkpoints" / "step_00000016")
    for key, value in expected.model_state.items():
        assert torch.equal(final.model_state[key], value), key
    assert final.training_state["history"] == expected.training_state["history"]
    columns = ("step", "loss", "lr", "grad_norm")
    got = [{c: r[c] for c in columns} for r in read_csv(run_dir / "train_log.csv")]
    want = [{c: r[c] for c in columns} for r in read_csv(reference / "train_log.csv")]
    assert got == want


@pytest.mark.slow
def test_two_torchrun_processes_match_one_process(tmp_path):
    extra = ["train.max_steps=6", "eval.every=3", "train.log_every=3", "train.checkpoint_every=3"]
    # 1 process: global batch 4 as 2 accumulation micro-batches of 2
    reference = train(
        load_config("lm/tiny", _overrides(tmp_path / "one", *extra, "train.grad_accum=2"))
    )
    two = _overrides(tmp_path / "two", *extra, "train.distributed=ddp")
    done = torchrun_train(2, "lm/tiny", *two, env=_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    got = read_csv(tmp_path / "two" / "train_log.csv")
    want = read_csv(reference.run_dir / "train_log.csv")
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-4)
    for g, w in zip(
        read_csv(tmp_path / "two" / "eval_log.csv"),
        read_csv(reference.run_dir / "eval_log.csv"),
        strict=True,
    ):
        assert g["bpb"] == pytest.approx(w["bpb"], rel=1e-4)
    assert TitansLM.load(tmp_path / "two" / "model").num_parameters() > 0
