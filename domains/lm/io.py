"""Saving and loading `TitansLM` (safetensors + JSON, never pickle).

A saved model directory:

    model.safetensors       the weights (a tied embedding/head is one tensor, stored once)
    lm_config.json          {"format": "titans-seq-lm", "format_version": 4,
                             "config": model.config, "weights": {file, bytes, sha256},
                             "tokenizer": "tokenizer_config.json" or null}
    tokenizer_config.json   (+ tokenizer.json / tokenizer.model) when a tokenizer is saved

Every file is written atomically (temporary file, fsync, `os.replace`), weights and tokenizer
first and `lm_config.json` last. The config records the size and SHA-256 of the weights, so a
reader never pairs a config with weights of another save: a crash between the files, a
truncated or foreign weights file, raises `CheckpointError` naming the file.

`load_lm` also reads the model of a training run whose task builds a `TitansLM` (`lm`,
`lm_passkey`):
  * the run folder: its `model/` folder when the run has finished (the `lm` task exports the
    best model by `eval.metric` there, in the format above), else its newest checkpoint
    (`checkpoints/latest`), so a run can be sampled while it trains;
  * its `checkpoints/` folder (the newest checkpoint) or one `step_XXXXXXXX/` checkpoint.
A checkpoint (`titans_seq/training/checkpoint.py`, verified against its manifest) stores the
run's whole resolved config rather than `model.config`, so the model is rebuilt by the task
that trained it (`get_task(config["task"]).build_model(cfg)`) and the checkpoint's weights are
loaded into it. The tokenizer is the run's: the task's `run_tokenizer(cfg)` when it has one
(the `lm` task: the prepared data folder's own or `data.tokenizer`), otherwise
`data.tokenizer` when the data section has one, else byte level.

This module knows the file format, not the model class: the one reader, `read_model`, takes
the class to build, so the model module (`TitansLM.load`, `load_lm`,
`load_lm_and_tokenizer`) can use it without an import cycle.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch

from titans_seq.backbone import layer_mixer_names, pin_saved_defaults
from titans_seq.training.checkpoint import (
    LATEST_FILE,
    MANIFEST_FILE,
    CheckpointError,
    atomic_write_bytes,
    atomic_write_text,
    latest_checkpoint,
    load_checkpoint,
    state_mismatch,
)
from titans_seq.training.model_folder import require_listed, verify_folder, write_manifest
from titans_seq.training.tasks import get_task

from .tokenizers import CONFIG_FILE as TOKENIZER_CONFIG
from .tokenizers import load_tokenizer, tokenizer_files

FORMAT = "titans-seq-lm"
# 2: the memory's stable parametrisation; 3: theta_max no longer follows the chunk size;
# 4: MAL's layout "two_layers" (older versions are read with the defaults they were saved
# under: format version n is defaults generation n, see `config_of_version`)
FORMAT_VERSION = 4
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "lm_config.json"
RUN_CHECKPOINT_DIR = "checkpoints"
RUN_EXPORT_DIR = "model"  # where the lm task writes the best model of a finished run


def config_to_json(config: Mapping) -> str:
    """`model.config` as JSON; a TypeError names a mixer option that JSON cannot hold."""
    try:
        return json.dumps(dict(config), indent=1, sort_keys=True)
    except TypeError as err:
        raise TypeError(f"the LM config is not JSON-serializable ({err}): {config}") from None


def save_lm(model, directory: str | Path, tokenizer=None) -> Path:
    """Write `model` (a TitansLM: `config`, `vocab_size`, `state_dict`) and `tokenizer` into
    `directory` (created if needed); returns it."""
    from safetensors.torch import save as st_save

    if not (isinstance(getattr(model, "config", None), Mapping) and hasattr(model, "vocab_size")):
        raise TypeError(f"save_lm saves a TitansLM, got {type(model).__name__}")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{directory} exists and is not a directory")
    config_json = config_to_json(model.config)  # fails before anything is written
    if tokenizer is not None:
        tokenizer = load_tokenizer(tokenizer)
        if tokenizer.vocab_size > model.vocab_size:
            raise ValueError(
                f"the tokenizer has {tokenizer.vocab_size} ids but the model only "
                f"vocab_size={model.vocab_size}"
            )
    state = {k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()}
    data = st_save(state, metadata={"format": FORMAT})
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / WEIGHTS_FILE, data)
    if tokenizer is not None:
        tokenizer.save(directory)
    elif (directory / TOKENIZER_CONFIG).exists():
        # re-saving without a tokenizer must not leave a stale one that load would pair
        (directory / TOKENIZER_CONFIG).unlink()
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": json.loads(config_json),
        "weights": {
            "file": WEIGHTS_FILE,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
        "tokenizer": TOKENIZER_CONFIG if tokenizer is not None else None,
    }
    atomic_write_text(directory / CONFIG_FILE, json.dumps(meta, indent=1) + "\n")
    files = [WEIGHTS_FILE, CONFIG_FILE]
    if tokenizer is not None:
        files += tokenizer_files(directory)
    write_manifest(directory, files)
    return directory


def _read_meta(directory: Path) -> dict:
    path = directory / CONFIG_FILE
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"model config {path} is corrupt: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a titans-seq LM config (format {FORMAT!r})")
    version = meta.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has format version {version}; this version of titans_seq reads versions "
            f"1 to {FORMAT_VERSION}"
        )
    for key in ("config", "weights"):
        if not isinstance(meta.get(key), dict):
            raise CheckpointError(f"model config {path} has no {key!r} section")
    meta["config"] = config_of_version(meta["config"], version)
    return meta


def config_of_version(config: dict, version: int) -> dict:
    """A TitansLM config saved under LM format `version`, with the mixer defaults of that
    format pinned where it predates a change of them (so it rebuilds the model it saved).
    LM format version n saved under defaults generation n (`pin_saved_defaults`)."""
    if version >= FORMAT_VERSION:
        return config
    names = layer_mixer_names(config["mixer"], config["depth"])
    pinned = pin_saved_defaults(config.get("mixer_options"), names, generation=version)
    return {**config, "mixer_options": pinned}


def _read_weights(directory: Path, entry: dict, listed: set[str] | None) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load

    path = require_listed(directory, listed, entry.get("file", WEIGHTS_FILE))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"weights file {path} is missing") from None
    if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise CheckpointError(
            f"weights file {path} does not match {directory / CONFIG_FILE} (size or SHA-256): "
            "it is truncated, corrupt, or from another save"
        )
    try:
        return st_load(data)
    except (SafetensorError, ValueError) as err:
        raise CheckpointError(f"weights file {path} is corrupt: {err}") from None


def load_state_into(model, state: dict[str, torch.Tensor], source: Path) -> None:
    """Strict load with an error naming the missing/unexpected keys and mismatched shapes."""
    mismatch = state_mismatch(model, state)
    missing, unexpected = mismatch.missing, mismatch.unexpected
    shapes = [f"{k}: file {have} vs model {want}" for k, have, want in mismatch.reshaped]
    if mismatch:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
        if shapes:
            parts.append(f"shape mismatch {shapes[:5]}")
        raise CheckpointError(
            f"the weights in {source} do not fit the model its config describes: "
            + "; ".join(parts)
        )
    model.load_state_dict(state)


def _find_run_checkpoint(directory: Path) -> Path | None:
    """The checkpoint folder a run folder / checkpoints folder / step folder points to."""
    if (directory / MANIFEST_FILE).exists():
        return directory
    for candidate in (directory, directory / RUN_CHECKPOINT_DIR):
        if (candidate / LATEST_FILE).exists():
            return latest_checkpoint(candidate)
    return None


def _build_from_run_config(config: dict, source: Path, model_class: type):
    """(model, run config) from the config stored in a checkpoint."""
    from titans_seq.training.config import from_dict

    if not isinstance(config, dict) or "task" not in config:
        raise CheckpointError(f"checkpoint {source} holds no run config with a task")
    try:
        cfg = from_dict(config)
        model = get_task(cfg.task).build_model(cfg)
    except (KeyError, ValueError, TypeError, FileNotFoundError) as err:
        raise CheckpointError(
            f"cannot rebuild the model of checkpoint {source} from its run config: {err}"
        ) from None
    if not isinstance(model, model_class):
        raise CheckpointError(
            f"checkpoint {source} was trained by task {cfg.task!r}, whose model is a "
            f"{type(model).__name__}, not a {model_class.__name__}"
        )
    return model, cfg


def _run_tokenizer(cfg):
    """The tokenizer a run trained with (see the module docstring)."""
    task = get_task(cfg.task)
    if hasattr(task, "run_tokenizer"):
        return task.run_tokenizer(cfg)
    return load_tokenizer(getattr(cfg.data, "tokenizer", None) or "byte")


def read_model(
    directory: str | Path,
    model_class: type,
    map_location: str | torch.device = "cpu",
    with_tokenizer: bool = False,
    allow_unverified: bool = False,
):
    """(model, tokenizer or None) from a saved model directory or a training run (see the
    module docstring); `model_class` builds the model (`from_config`) and checks a run's.
    A saved directory without a manifest is refused unless `allow_unverified`."""
    directory = Path(directory)
    if not directory.exists():
        raise FileNotFoundError(f"model directory {directory} does not exist")
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is not a directory (a saved model is a directory)")
    if (
        not (directory / CONFIG_FILE).exists()
        and (directory / RUN_EXPORT_DIR / CONFIG_FILE).exists()
    ):
        directory = directory / RUN_EXPORT_DIR  # a finished run: its exported best model
    if (directory / CONFIG_FILE).exists():
        listed = verify_folder(directory, required=[CONFIG_FILE], allow_unverified=allow_unverified)
        meta = _read_meta(directory)
        state = _read_weights(directory, meta["weights"], listed)
        try:
            model = model_class.from_config(meta["config"])
        except (TypeError, ValueError) as err:
            raise CheckpointError(
                f"model config {directory / CONFIG_FILE} is invalid: {err}"
            ) from None
        load_state_into(model, state, directory / WEIGHTS_FILE)
        tokenizer = None
        if with_tokenizer and meta.get("tokenizer"):
            for name in tokenizer_files(directory):
                require_listed(directory, listed, name)
            tokenizer = load_tokenizer(directory)
        elif with_tokenizer:
            tokenizer = load_tokenizer("byte")
        return model.to(map_location), tokenizer
    checkpoint_dir = _find_run_checkpoint(directory)
    if checkpoint_dir is None:
        raise CheckpointError(
            f"{directory} holds neither a saved model ({CONFIG_FILE}) nor a training run "
            f"checkpoint ({RUN_CHECKPOINT_DIR}/{LATEST_FILE} or {MANIFEST_FILE})"
        )
    ckpt = load_checkpoint(checkpoint_dir)
    model, cfg = _build_from_run_config(ckpt.config, checkpoint_dir, model_class)
    load_state_into(model, ckpt.model_state, checkpoint_dir)
    tokenizer = _run_tokenizer(cfg) if with_tokenizer else None
    return model.to(map_location), tokenizer
