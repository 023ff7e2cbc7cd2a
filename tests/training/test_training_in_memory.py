"""save_fitted / load_fitted: the estimators' safetensors + JSON format and its errors."""

import json

import pytest
import torch
from torch import nn

from titans_seq.data import DataError
from titans_seq.training.checkpoint import CheckpointError
from titans_seq.training.in_memory import WEIGHTS_FILE, load_fitted, save_fitted
from titans_seq.training.model_folder import MANIFEST_FILE


def test_round_trip_and_errors(tmp_path):
    model = nn.Linear(3, 2)
    save_fitted(tmp_path / "m", model, {"format_version": 1, "answer": 42}, "est.json")
    meta, weights = load_fitted(tmp_path / "m", "est.json", "Estimator", 1)
    assert meta["answer"] == 42
    torch.testing.assert_close(weights["weight"], model.weight.detach())
    assert not list((tmp_path / "m").glob("*.tmp*"))  # atomic writes leave no temporaries
    # older versions are read (the caller upgrades them); newer ones are refused
    assert load_fitted(tmp_path / "m", "est.json", "Estimator", 2)[0]["format_version"] == 1
    save_fitted(tmp_path / "m", model, {"format_version": 3}, "est.json")
    with pytest.raises(DataError, match="unsupported format version 3"):
        load_fitted(tmp_path / "m", "est.json", "Estimator", 2)
    (tmp_path / "m" / "est.json").write_text(json.dumps({"format_version": 1})[:-3])
    with pytest.raises(CheckpointError, match="est.json does not match the checksum"):
        load_fitted(tmp_path / "m", "est.json", "Estimator", 1)
    (tmp_path / "m" / MANIFEST_FILE).unlink()  # a folder saved before manifests existed
    with pytest.raises(CheckpointError, match="has no model_manifest.json.*allow_unverified"):
        load_fitted(tmp_path / "m", "est.json", "Estimator", 1)
    with pytest.warns(UserWarning, match="loaded unverified"):
        with pytest.raises(DataError, match="corrupt"):
            load_fitted(tmp_path / "m", "est.json", "Estimator", 1, allow_unverified=True)
    (tmp_path / "m" / WEIGHTS_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="not a saved Estimator"):
        load_fitted(tmp_path / "m", "est.json", "Estimator", 1)
