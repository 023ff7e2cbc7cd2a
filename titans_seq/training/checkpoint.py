"""Atomic, pickle-free checkpoints that a run resumes from exactly.

Layout of one checkpoint (a folder under `<run>/checkpoints/`):

    step_00000200/
        model.safetensors   the weights
        state.safetensors   every tensor of the training state (optimizer moments, RNG states...)
        state.json          the rest of the training state + the resolved config; tensors are
                            referenced by key, tuples and non-string dict keys are tagged so
                            they round-trip exactly
        manifest.json       size and SHA-256 of the three files, written last
    latest                  name of the newest complete checkpoint

A checkpoint is written into a temporary folder next to its final place, every file is
fsync'ed, and the folder is renamed into place with `os.replace` (atomic on POSIX); `latest`
is then replaced the same way. A crash at any moment leaves either the previous checkpoint or
the new one, never a half-written one under a final name. On load, every file is checked
against the manifest, and anything missing, truncated or corrupt raises `CheckpointError`
naming the file: a run never silently starts afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from ..errors import UserError

FORMAT_VERSION = 1
MODEL_FILE = "model.safetensors"
STATE_TENSORS_FILE = "state.safetensors"
STATE_JSON_FILE = "state.json"
MANIFEST_FILE = "manifest.json"
LATEST_FILE = "latest"


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, incomplete, truncated or corrupt (the message names the file)."""


@dataclasses.dataclass
class Checkpoint:
    path: Path
    step: int
    model_state: dict[str, torch.Tensor]
    training_state: dict[str, Any]
    config: dict[str, Any]


# ------------------------------------------------------------------------- atomic file I/O
def fsync_dir(path: Path) -> None:
    """Make a rename/creation inside `path` durable (POSIX: fsync the directory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `path` so that readers see the old content or the new one, never a mix. A
    failed write (a full disk, a folder turned read-only) leaves no temporary file behind
    and raises an OSError naming `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_durably(tmp, data)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise _naming(error, path) from None


def _naming(error: OSError, path: Path) -> OSError:
    """`error` as the same kind of OSError whose message names `path` (the file the caller
    meant, not a temporary one) and the reason."""
    reason = error.strerror or str(error)
    return type(error)(error.errno, f"cannot write {path}: {reason}")


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def prepare_output_file(path: str | Path, option: str = "--out") -> Path:
    """Check, before any long work, that `path` can become a file: its folder is created
    when missing; an OSError names the option and the path otherwise."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise IsADirectoryError(f"{option} {path} is a folder; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = error.strerror or str(error)
        message = f"{option} {path}: cannot create its folder: {reason}"
        raise type(error)(error.errno, message) from None
    return path


def strict_json(value: Any, **kwargs) -> str:
    """json.dumps that writes valid JSON: NaN and infinite floats become null (Python's
    default writes bare NaN/Infinity, which other JSON readers reject)."""

    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    return json.dumps(clean(value), allow_nan=False, **kwargs)


DIGEST_KEY = "titans_seq.sha256"  # safetensors metadata: SHA-256 of the tensors (see below)


def tensor_digest(state_dict: dict[str, torch.Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in sorted name order.

    Stored in the metadata of every weights file `save_weights` writes, so the file
    verifies itself on load: a flipped byte in the data changes the digest, one in the header
    changes a dtype/shape/offset or the digest itself (or breaks the header's JSON).
    """
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().to("cpu").contiguous()
        h.update(f"{name}\0{t.dtype}\0{tuple(t.shape)}\0".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def save_weights(path: Path, state_dict: dict[str, torch.Tensor], metadata: dict | None = None):
    """A state dict as one safetensors file, written atomically, with the SHA-256 of its
    tensors in the file's metadata (`load_weights` checks it)."""
    tensors = _cpu_tensors(state_dict)
    meta = {k: json.dumps(v) for k, v in (metadata or {}).items()}
    meta[DIGEST_KEY] = tensor_digest(tensors)
    atomic_write_bytes(Path(path), st_save(tensors, metadata=meta))


def safetensors_metadata(data: bytes) -> dict[str, str]:
    """The `__metadata__` of a safetensors file's bytes (8-byte little-endian header size,
    then the JSON header); {} when there is none."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    return header.get("__metadata__") or {}


def load_weights(path: Path, require_digest: bool = False) -> dict[str, torch.Tensor]:
    """Inverse of `save_weights` (also reads any safetensors file); errors name the file.

    A file written by `save_weights` is verified against the SHA-256 in its metadata and a
    mismatch raises CheckpointError. A file without one (another tool's, or an older
    titans-seq's) loads as it is; with `require_digest` a warning says it cannot be verified.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
        state = st_load(data)
        recorded = safetensors_metadata(data).get(DIGEST_KEY)
    except FileNotFoundError:
        raise CheckpointError(f"weights file {path} does not exist") from None
    except (SafetensorError, ValueError, OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"weights file {path} is truncated or corrupt: {err}") from None
    if recorded is None:
        if require_digest:
            warnings.warn(
                f"weights file {path} carries no checksum (written by another tool or an older "
                "titans-seq): it cannot be verified; saving it again adds one",
                stacklevel=2,
            )
    elif tensor_digest(state) != recorded:
        raise CheckpointError(
            f"weights file {path} is corrupt: the SHA-256 of its tensors does not match the "
            "one recorded when it was saved"
        )
    return state


@dataclasses.dataclass
class StateMismatch:
    """How a state dict differs from a model's: names the model has and the state lacks,
    names the state has and the model lacks, and (name, state's shape, model's shape) of
    tensors in both with other shapes; each sorted by name."""

    missing: list[str]
    unexpected: list[str]
    reshaped: list[tuple[str, tuple[int, ...], tuple[int, ...]]]

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.reshaped)


def state_mismatch(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> StateMismatch:
    """What keeps `model.load_state_dict(state)` (strict) from loading `state`, found before
    anything is loaded, so the caller can name it."""
    own = model.state_dict()
    return StateMismatch(
        missing=sorted(set(own) - set(state)),
        unexpected=sorted(set(state) - set(own)),
        reshaped=[
            (name, tuple(state[name].shape), tuple(own[name].shape))
            for name in sorted(set(own) & set(state))
            if tuple(state[name].shape) != tuple(own[name].shape)
        ],
    )


def _cpu_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # clone: safetensors refuses tensors that share storage (e.g. tied embeddings)
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items()}


# ----------------------------------------------------- nested state <-> JSON + tensors
def encode_state(value: Any, tensors: dict[str, torch.Tensor], key: str = "") -> Any:
    """Split nested Python state into a JSON tree and a flat dict of tensors.

    Tensors (and numpy arrays) are replaced by `{"__tensor__": key}` and stored in `tensors`;
    tuples become `{"__tuple__": [...]}` and dicts with non-string keys
    `{"__items__": [[k, v], ...]}`, so that `decode_state` restores exactly the same types
    (Python's RNG state is a tuple, optimizer state is keyed by int).
    """
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().to("cpu").contiguous().clone()
        return {"__tensor__": key}
    if isinstance(value, np.ndarray):
        tensors[key] = torch.from_numpy(np.ascontiguousarray(value).copy())
        return {"__ndarray__": key}
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode_state(v, tensors, f"{key}.{i}") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode_state(v, tensors, f"{key}.{i}") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__module__.startswith(_DATACLASS_PACKAGES):
            raise TypeError(f"cannot store a {cls.__name__} in a checkpoint (at {key or 'root'})")
        fields = {
            f.name: encode_state(getattr(value, f.name), tensors, f"{key}.{f.name}")
            for f in dataclasses.fields(value)
        }
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode_state(v, tensors, f"{key}.{k}") for k, v in value.items()}
        return {
            "__items__": [
                [encode_state(k, tensors, f"{key}.k{i}"), encode_state(v, tensors, f"{key}.{i}")]
                for i, (k, v) in enumerate(value.items())
            ]
        }
    raise TypeError(f"cannot store a {type(value).__name__} in a checkpoint (at {key or 'root'})")


def decode_state(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of `encode_state`."""
    if isinstance(value, list):
        return [decode_state(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "__tensor__" in value:
        return tensors[value["__tensor__"]]
    if "__ndarray__" in value:
        return tensors[value["__ndarray__"]].numpy()
    if "__tuple__" in value:
        return tuple(decode_state(v, tensors) for v in value["__tuple__"])
    if "__items__" in value:
        return {decode_state(k, tensors): decode_state(v, tensors) for k, v in value["__items__"]}
    if "__dataclass__" in value:
        cls = _stored_dataclass(value["__dataclass__"])
        return cls(**{k: decode_state(v, tensors) for k, v in value["fields"].items()})
    return {k: decode_state(v, tensors) for k, v in value.items()}


# the packages whose dataclasses a checkpoint may hold (streaming states); a checkpoint
# names a class, and only these are looked up, so a file can make nothing else run
_DATACLASS_PACKAGES = ("titans_seq.",)


def _stored_dataclass(name: str) -> type:
    import importlib

    module_name, _, qualname = str(name).partition(":")
    if not module_name.startswith(_DATACLASS_PACKAGES) or not qualname.isidentifier():
        raise CheckpointError(f"checkpoint state names an unknown class {name!r}")
    try:
        cls = getattr(importlib.import_module(module_name), qualname)
    except (ImportError, AttributeError):
        raise CheckpointError(f"checkpoint state names an unknown class {name!r}") from None
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise CheckpointError(f"checkpoint state names {name!r}, which is not a state class")
    return cls


# -------------------------------------------------------------------------- save / load
def checkpoint_name(step: int) -> str:
    return f"step_{step:08d}"


def save_checkpoint(
    directory: Path,
    step: int,
    model_state: dict[str, torch.Tensor],
    training_state: dict[str, Any],
    config: dict[str, Any],
    keep: int | None = None,
) -> Path:
    """Write `<directory>/step_XXXXXXXX/` atomically, point `latest` at it, keep the newest
    `keep` checkpoints (None: all). Returns the checkpoint folder."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / checkpoint_name(step)
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()

    tensors: dict[str, torch.Tensor] = {}
    tree = encode_state(training_state, tensors, "state")
    payload = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "training_state": tree,
        "config": config,
    }
    files = {
        MODEL_FILE: st_save(_cpu_tensors(model_state)),
        STATE_TENSORS_FILE: st_save(tensors),
        STATE_JSON_FILE: json.dumps(payload, indent=1).encode(),
    }
    manifest = {"format_version": FORMAT_VERSION, "step": step, "files": {}}
    try:
        for name, data in files.items():
            write_bytes_durably(tmp / name, data)
            digest = hashlib.sha256(data).hexdigest()
            manifest["files"][name] = {"bytes": len(data), "sha256": digest}
        write_bytes_durably(tmp / MANIFEST_FILE, json.dumps(manifest, indent=1).encode())
        fsync_dir(tmp)
        if final.exists():  # re-saving a step (e.g. the final save of a resumed, finished run)
            shutil.rmtree(final)
        os.replace(tmp, final)
        fsync_dir(directory)
    except OSError as error:  # a full disk, a read-only folder: no half checkpoint stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise _naming(error, final) from None
    atomic_write_text(directory / LATEST_FILE, final.name + "\n")
    if keep is not None:
        prune_checkpoints(directory, keep)
    return final


def prune_checkpoints(directory: Path, keep: int) -> None:
    """Delete all but the newest `keep` complete checkpoints (and stale temporary folders)."""
    for stale in Path(directory).glob(".step_*.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    complete = sorted(p for p in Path(directory).glob("step_*") if p.is_dir())
    for old in complete[: max(0, len(complete) - keep)]:
        shutil.rmtree(old, ignore_errors=True)


def newest_complete_checkpoint(directory: Path) -> Path | None:
    """The newest `step_*` folder of `directory` that has its manifest (written last, so the
    checkpoint is complete), or None."""
    folders = sorted(p for p in Path(directory).glob("step_*") if p.is_dir())
    complete = [p for p in folders if (p / MANIFEST_FILE).is_file()]
    return complete[-1] if complete else None


def latest_checkpoint(directory: Path) -> Path | None:
    """The checkpoint that `latest` names in `directory`, or None when there is none yet.

    Without a `latest` pointer (deleted, or a copy that left it out) the newest complete
    `step_*` folder is used, with a warning; a pointer that is not a checkpoint name raises
    CheckpointError naming the file and the folder to resume from instead.
    """
    directory = Path(directory)
    pointer = directory / LATEST_FILE
    if not pointer.exists():
        found = newest_complete_checkpoint(directory)
        if found is not None:
            warnings.warn(
                f"{pointer} is missing; using the newest complete checkpoint, {found.name}",
                stacklevel=2,
            )
        return found
    try:
        name = pointer.read_text().strip()
    except (UnicodeDecodeError, OSError) as err:
        name = None
        reason = f"cannot be read ({type(err).__name__})"
    if name is not None:
        path = directory / name
        if name.startswith("step_") and "/" not in name and path.is_dir():
            return path
        reason = f"names {name[:60]!r}, which is not a checkpoint folder in {directory}"
    fallback = newest_complete_checkpoint(directory)
    hint = (
        f"; resume from the newest complete checkpoint explicitly (--resume {fallback}) or "
        "delete the pointer"
        if fallback is not None
        else ""
    )
    raise CheckpointError(f"checkpoint pointer {pointer} {reason}{hint}")


def _read_verified(path: Path, entry: dict) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint file {path} is missing") from None
    if len(data) != entry["bytes"]:
        raise CheckpointError(
            f"checkpoint file {path} is truncated or corrupt: {len(data)} bytes, the manifest "
            f"says {entry['bytes']}"
        )
    if hashlib.sha256(data).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"checkpoint file {path} is corrupt: SHA-256 does not match")
    return data


def load_checkpoint(path: Path) -> Checkpoint:
    """Read and verify one checkpoint folder (see the module docstring for the layout)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a folder")
    manifest_path = path / MANIFEST_FILE
    try:
        manifest = json.loads(manifest_path.read_text())
        entries = manifest["files"]
    except FileNotFoundError:
        raise CheckpointError(
            f"checkpoint file {manifest_path} is missing: the checkpoint is incomplete"
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"checkpoint file {manifest_path} is corrupt: {err}") from None
    if manifest.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint {path} has format version {manifest.get('format_version')}, this "
            f"version of titans_seq reads version {FORMAT_VERSION}"
        )
    blobs = {}
    for name in (MODEL_FILE, STATE_TENSORS_FILE, STATE_JSON_FILE):
        if name not in entries:
            raise CheckpointError(f"checkpoint file {manifest_path} does not list {name}")
        blobs[name] = _read_verified(path / name, entries[name])
    try:
        model_state = st_load(blobs[MODEL_FILE])
        state_tensors = st_load(blobs[STATE_TENSORS_FILE])
        payload = json.loads(blobs[STATE_JSON_FILE])
        training_state = decode_state(payload["training_state"], state_tensors)
    except (SafetensorError, json.JSONDecodeError, KeyError, ValueError) as err:
        raise CheckpointError(f"checkpoint {path} cannot be decoded: {err}") from None
    return Checkpoint(
        path=path,
        step=int(payload["step"]),
        model_state=model_state,
        training_state=training_state,
        config=payload["config"],
    )
