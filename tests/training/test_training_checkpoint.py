"""Checkpoints: exact round trip without pickle, atomic layout, loud errors on damage."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from titans_seq.training import CheckpointError, from_dict, train
from titans_seq.training.checkpoint import (
    LATEST_FILE,
    decode_state,
    encode_state,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    save_weights,
)


def test_state_encoding_round_trips_types_exactly():
    state = {
        "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(2, 3)}},
            "param_groups": [{"betas": (0.9, 0.95), "lr": 1e-3, "params": [0, 1]}],
        },
        "mixed": [1, 2.5, None, "x", True, (1, (2, 3))],
        "__dunder": 1,  # a key that looks like a tag must not be confused with one
    }
    tensors = {}
    tree = json.loads(json.dumps(encode_state(state, tensors)))  # through real JSON
    back = decode_state(tree, tensors)
    assert back["python_rng"] == state["python_rng"]
    assert back["numpy_rng"][0] == "MT19937"
    np.testing.assert_array_equal(back["numpy_rng"][1], state["numpy_rng"][1])
    assert back["numpy_rng"][2:] == state["numpy_rng"][2:]
    assert set(back["optimizer"]["state"]) == {0}  # int keys stay int
    assert torch.equal(
        back["optimizer"]["state"][0]["exp_avg"], state["optimizer"]["state"][0]["exp_avg"]
    )
    assert back["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)
    assert back["mixed"] == state["mixed"] and back["__dunder"] == 1
    with pytest.raises(TypeError, match="cannot store a object"):
        encode_state({"bad": object()}, {})


def _save(tmp_path, step=5, keep=None):
    model = {"w": torch.randn(3, 3), "b": torch.zeros(3)}
    return model, save_checkpoint(
        tmp_path,
        step,
        model,
        {"opt": {"step": torch.tensor(1.0)}, "epoch": 2},
        {"a": 1},
        keep=keep,
    )


def test_save_load_latest_and_pruning(tmp_path):
    model, path = _save(tmp_path, step=5)
    assert latest_checkpoint(tmp_path) == path
    ckpt = load_checkpoint(path)
    assert ckpt.step == 5 and ckpt.config == {"a": 1} and ckpt.training_state["epoch"] == 2
    assert all(torch.equal(ckpt.model_state[k], v) for k, v in model.items())
    for step in (10, 15, 20):
        _save(tmp_path, step=step, keep=2)
    assert sorted(p.name for p in tmp_path.glob("step_*")) == ["step_00000015", "step_00000020"]
    assert latest_checkpoint(tmp_path).name == "step_00000020"
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary leftovers
    # shared storage (tied weights) is accepted: safetensors would refuse it as is
    shared = torch.randn(4, 2)
    save_weights(tmp_path / "w.safetensors", {"a": shared, "b": shared}, {"step": 3})
    assert torch.equal(load_weights(tmp_path / "w.safetensors")["b"], shared)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate_model", "model.safetensors is truncated or corrupt"),
        ("flip_state", "state.safetensors is corrupt: SHA-256"),
        ("delete_manifest", "manifest.json is missing: the checkpoint is incomplete"),
        ("garble_manifest", "manifest.json is corrupt"),
        ("delete_json", "state.json is missing"),
    ],
)
def test_damaged_checkpoints_raise_naming_the_file(tmp_path, damage, message):
    _, path = _save(tmp_path)
    if damage == "truncate_model":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "flip_state":
        data = bytearray((path / "state.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (path / "state.safetensors").write_bytes(bytes(data))
    elif damage == "delete_manifest":
        (path / "manifest.json").unlink()
    elif damage == "garble_manifest":
        (path / "manifest.json").write_text("{not json")
    else:
        (path / "state.json").unlink()
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(path)
    assert str(path) in str(info.value)


def test_dangling_latest_pointer_and_truncated_weights(tmp_path):
    _save(tmp_path)
    (tmp_path / LATEST_FILE).write_text("step_00000099\n")
    with pytest.raises(CheckpointError, match="latest names 'step_00000099'.*--resume"):
        latest_checkpoint(tmp_path)
    (tmp_path / LATEST_FILE).write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(CheckpointError, match=f"{LATEST_FILE} cannot be read"):
        latest_checkpoint(tmp_path)
    # a deleted pointer: the newest complete checkpoint, with a warning
    (tmp_path / LATEST_FILE).unlink()
    with pytest.warns(UserWarning, match="missing"):
        found = latest_checkpoint(tmp_path)
    assert found is not None and found.name.startswith("step_")
    (tmp_path / "w.safetensors").write_bytes(b"\x10\x00\x00")
    with pytest.raises(CheckpointError, match="w.safetensors is truncated or corrupt"):
        load_weights(tmp_path / "w.safetensors")


def test_resume_from_a_corrupt_checkpoint_fails_instead_of_restarting(tiny):
    cfg = from_dict(tiny(train={"max_steps": 20}))
    train(cfg)
    ckpt = latest_checkpoint(cfg.run_dir() / "checkpoints")
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[:100])
    with pytest.raises(CheckpointError, match="model.safetensors is truncated"):
        train(from_dict(tiny(train={"max_steps": 30})), resume=True)
    # and a new run refuses to overwrite the folder rather than mixing two runs
    with pytest.raises(FileExistsError, match="already holds checkpoints"):
        train(cfg)


def test_a_resume_with_other_settings_warns_naming_them_but_not_the_cosmetic_ones(tiny):
    cfg = from_dict(tiny(train={"max_steps": 10}))
    train(cfg)
    with pytest.warns(
        UserWarning, match=r"differs from the checkpoint's: train\.max_steps: 10 -> 12$"
    ):
        train(from_dict(tiny(train={"max_steps": 12, "peak_flops": 1e12})), resume=True)


def test_resume_without_checkpoint_is_an_error(tiny):
    with pytest.raises(CheckpointError, match="nothing to resume"):
        train(from_dict(tiny()), resume=True)


def test_optimizer_state_is_stored_by_parameter_name(tiny):
    cfg = from_dict(tiny(train={"max_steps": 10}))
    result = train(cfg)
    state = load_checkpoint(result.run_dir / "checkpoints" / "step_00000010").training_state
    names = {"net.0.weight", "net.0.bias", "net.3.weight", "net.3.bias", "persistent_offset"}
    assert set(state["optimizer"]["state"]) == names
    groups = state["optimizer"]["param_groups"]
    assert [g["decay"] for g in groups] == [True, False]
    assert set(groups[0]["params"]) == {"net.0.weight", "net.3.weight"}


def test_weights_files_verify_their_own_checksum(tmp_path):
    from damage_helpers import flip_byte

    from titans_seq.training.checkpoint import (
        DIGEST_KEY,
        load_weights,
        safetensors_metadata,
        save_weights,
    )

    state = {
        "w": torch.randn(4, 3),
        "b": torch.zeros(3, dtype=torch.bfloat16),
        "s": torch.tensor(2),
    }
    path = tmp_path / "w.safetensors"
    save_weights(path, state, {"step": 7})
    assert DIGEST_KEY in safetensors_metadata(path.read_bytes())
    loaded = load_weights(path, require_digest=True)
    assert all(torch.equal(loaded[k], state[k]) for k in state)
    for position in (-1, -20):  # the tensor data
        save_weights(path, state)
        flip_byte(path, position)
        with pytest.raises(CheckpointError, match="SHA-256"):
            load_weights(path)
    # a safetensors file of another tool (no checksum) loads; asked for one, it warns
    from safetensors.torch import save_file

    save_file({"w": state["w"]}, tmp_path / "plain.safetensors")
    assert torch.equal(load_weights(tmp_path / "plain.safetensors")["w"], state["w"])
    with pytest.warns(UserWarning, match="no checksum"):
        load_weights(tmp_path / "plain.safetensors", require_digest=True)
