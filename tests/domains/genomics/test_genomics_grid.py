"""`benchmarks/grids/genomics.py --passes`: the sequence models' reading of each sequence
reaches the recipe's model config, and leaves the CNN (whose strands follow
`--cnn-rc-mode`) and the next-base pretraining alone."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "grids")]
import genomics as grid  # noqa: E402

from titans_seq.training import load_config  # noqa: E402


@pytest.mark.parametrize("passes", ["four", "one", "posthoc"])
def test_passes_set_the_classifier_reading_and_the_cnn_keeps_its_recipe(passes):
    arch = grid.model_overrides("lmm", 64, 2, 4, 72, passes)
    model = load_config("genomics/nontata_lmm", arch).model
    expected = {
        "four": (True, "conjoin"),
        "one": (False, "augment"),
        "posthoc": (False, "posthoc"),
    }[passes]
    assert (model.bidirectional, model.rc_mode) == expected
    cnn = grid.model_overrides("cnn", 64, 2, 4, 72, passes)
    assert load_config("genomics/nontata_cnn", cnn).model.rc_mode == "none"


@pytest.mark.parametrize("rc_mode", ["none", "posthoc"])
def test_the_cnn_strands_follow_their_own_option(rc_mode):
    cnn = grid.model_overrides("cnn", 64, 2, 4, 72, "posthoc", cnn_rc_mode=rc_mode)
    model = load_config("genomics/nontata_cnn", cnn).model
    assert (model.architecture, model.rc_mode) == ("cnn", rc_mode)


def test_pretraining_drops_the_classifier_reading(tmp_path, monkeypatch):
    seen = {}

    def train(cfg, resume=False):
        seen["cfg"] = cfg
        raise RuntimeError("stop before training")

    import titans_seq.training as training

    monkeypatch.setattr(training, "train", train)
    args = grid.argparse.Namespace(
        out_dir=str(tmp_path), split_seed=0, subsample=None, eval_subsample=None,
        device="cpu", batch_size=8, pretrain_steps=10, checkpoint_every=None,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="stop before training"):
        grid.pretrain_run(
            args,
            "human_nontata_promoters",
            "lmm",
            0,
            grid.model_overrides("lmm", 64, 2, 4, 72, "one"),
            grid.CellStore(tmp_path),
        )
    assert seen["cfg"].model.mixer == "lmm"


def test_posthoc_cells_score_both_strands_and_the_given_strand(tmp_path):
    """A posthoc cell's test accuracy averages both strands' logits; the same weights
    scored with rc_mode "augment" read the given strand only."""
    import torch

    from titans_seq.domains.genomics import reverse_complement_ids
    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample
    from titans_seq.domains.genomics.task import build_net, token_batches
    from titans_seq.training.checkpoint import save_weights

    overrides = grid.model_overrides("lmm", 16, 1, 2, 16, "posthoc") | {"data.max_len": 256}
    cfg = load_config("genomics/nontata_lmm", overrides)
    torch.manual_seed(0)
    net = build_net(cfg.model, cfg.data.max_len).eval()
    save_weights(tmp_path / "w.safetensors", net.state_dict())
    args = grid.argparse.Namespace(eval_subsample=48, device="cpu")

    d = cfg.data
    test = benchmark_parts(d.dataset, d.split, d.resplit, d.seed)["test"]
    ids, lengths, labels = token_batches(subsample(test, 48, d.seed), d.max_len).get_batch(
        range(48)
    )
    with torch.no_grad():
        given = net.pooled_logits(ids, lengths)
        both = 0.5 * (given + net.pooled_logits(reverse_complement_ids(ids, lengths), lengths))
    expected = {
        None: float((both.argmax(-1) == labels).float().mean()),
        "augment": float((given.argmax(-1) == labels).float().mean()),
    }
    for rc_mode, accuracy in expected.items():
        scored = grid.test_accuracy(cfg, tmp_path / "w.safetensors", args, rc_mode=rc_mode)
        assert scored == pytest.approx(accuracy)
    assert (both.argmax(-1) != given.argmax(-1)).any()  # the two readings differ here


SMOKE = [
    "--device", "cpu", "--datasets", "human_nontata_promoters", "--models", "cnn",
    "--seeds", "0", "--pretraining", "no", "--dim", "16", "--depth", "1", "--heads", "2",
    "--max-steps", "4", "--checkpoint-every", "2", "--batch-size", "8", "--subsample", "64",
    "--eval-subsample", "32",
]  # fmt: skip


def run_grid(monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", ["genomics.py", *SMOKE, *argv])
    grid.main()


def test_a_rerun_skips_finished_cells_and_resumes_a_killed_one(tmp_path, monkeypatch, capsys):
    out = ["--out-dir", str(tmp_path)]
    run_grid(monkeypatch, *out)
    name = grid.cell_name("human_nontata_promoters", "cnn", 0, False)
    first = json.loads((tmp_path / "cells" / f"{name}.json").read_text())
    assert first["resumed"] is False and first["settings"]["max_steps"] == 4
    assert "human_nontata_promoters | cnn" in (tmp_path / "genomics.md").read_text()

    run_grid(monkeypatch, *out)
    assert f"{name}: done, skipped" in capsys.readouterr().out

    # a kill after step 2's checkpoint: no record, the step-4 checkpoint never written
    from titans_seq.training.loop import CHECKPOINT_DIR

    (tmp_path / "cells" / f"{name}.json").unlink()
    checkpoints = tmp_path / "runs" / name / CHECKPOINT_DIR
    for path in checkpoints.iterdir():
        if path.name.endswith("4"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    (checkpoints / "latest").write_text("step_00000002")
    run_grid(monkeypatch, *out)
    assert f"{name}: resuming" in capsys.readouterr().out
    resumed = json.loads((tmp_path / "cells" / f"{name}.json").read_text())
    assert resumed["resumed"] is True
    for key in ("test_accuracy", "best_val_accuracy", "best_step"):
        assert resumed[key] == first[key]  # the training loop resumes exactly


def test_a_store_refuses_cells_of_other_settings(tmp_path, monkeypatch):
    run_grid(monkeypatch, "--out-dir", str(tmp_path))
    with pytest.raises(SystemExit):
        run_grid(monkeypatch, "--out-dir", str(tmp_path), "--max-steps", "6")
