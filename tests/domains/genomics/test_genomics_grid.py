"""`benchmarks/grids/genomics.py --passes`: the sequence models' reading of each sequence
reaches the recipe's model config, and leaves the CNN and the next-base pretraining alone."""

from __future__ import annotations

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
    assert grid.model_overrides("cnn", 64, 2, 4, 72, passes) == {"model.architecture": "cnn"}


def test_pretraining_drops_the_classifier_reading(tmp_path, monkeypatch):
    seen = {}

    def train(cfg):
        seen["cfg"] = cfg
        raise RuntimeError("stop before training")

    import titans_seq.training as training

    monkeypatch.setattr(training, "train", train)
    args = grid.argparse.Namespace(
        out_dir=str(tmp_path), split_seed=0, subsample=None, eval_subsample=None,
        device="cpu", batch_size=8, pretrain_steps=10,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="stop before training"):
        grid.pretrain_run(
            args,
            "human_nontata_promoters",
            "lmm",
            0,
            grid.model_overrides("lmm", 64, 2, 4, 72, "one"),
        )
    assert seen["cfg"].model.mixer == "lmm"
