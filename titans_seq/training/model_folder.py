"""The manifest of a saved model folder: every file of the model, checksummed as one.

A saved model is a folder of files (weights, a JSON config, a tokenizer...). Its manifest,

    model_manifest.json   {"format": "titans-seq-model-folder", "version": 1,
                           "files": {name: {"bytes": n, "sha256": hex}, ...}}

is written last, after every file it lists, and a reader verifies every listed file
before it uses any: an edited config (classes reversed, a scaler changed), a weights file
from another save, a truncated tokenizer all raise `CheckpointError` naming the file. A file a
config points to (`"file": ...`) must be a plain name inside the folder (`inside`).

A folder without a manifest (saved before manifests existed, or whose manifest was
removed) is refused: nothing would catch an edited config or weights from another save.
A reader that passes `allow_unverified=True`, the user's explicit trust in its files,
loads it with a warning.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable
from pathlib import Path

from .checkpoint import CheckpointError, atomic_write_text

MANIFEST_FILE = "model_manifest.json"
FORMAT = "titans-seq-model-folder"
VERSION = 1


def inside(folder: Path | str, name: str) -> Path:
    """`folder / name` for a plain relative file name; CheckpointError for anything that
    could leave the folder (an absolute path, `..`, a link pointing outside)."""
    folder = Path(folder)
    if (
        not isinstance(name, str)
        or not name
        or Path(name).is_absolute()
        or ".." in Path(name).parts
    ):
        raise CheckpointError(f"{folder}: the file name {name!r} does not stay inside the folder")
    path = folder / name
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        raise CheckpointError(
            f"{folder}: {name!r} resolves outside the folder ({path.resolve()})"
        ) from None
    return path


def _digest(path: Path) -> dict:
    data = path.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(folder: Path | str, names: Iterable[str]) -> Path:
    """Record the size and SHA-256 of the files `names` of `folder` (already written), in a
    manifest written atomically after them. Returns its path."""
    folder = Path(folder)
    files = {name: _digest(inside(folder, name)) for name in sorted(set(names))}
    manifest = {"format": FORMAT, "version": VERSION, "files": files}
    atomic_write_text(folder / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")
    return folder / MANIFEST_FILE


def verify_folder(
    folder: Path | str, required: Iterable[str] = (), allow_unverified: bool = False
) -> set[str] | None:
    """Check every file the manifest of `folder` lists, and that it lists `required`.

    Returns the names verified, or None for a folder without a manifest when
    `allow_unverified` (it loads with a warning). Raises CheckpointError for a folder
    without a manifest otherwise, and naming the file that is missing, changed or
    unlisted, or a manifest that is damaged.
    """
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.exists():
        if not allow_unverified:
            raise CheckpointError(
                f"{folder} has no {MANIFEST_FILE}, so its files cannot be checked against "
                "what was saved (a folder saved by titans-seq before manifests, or one whose "
                "manifest was removed; an edited config or weights from another save would "
                "go unnoticed); if you trust its files, load it with allow_unverified=True "
                "(on the command line, --allow-unverified-model) and save it again, which "
                "adds a manifest"
            )
        warnings.warn(
            f"{folder} has no {MANIFEST_FILE}: its files are loaded unverified, as "
            "allow_unverified=True asks; saving the model again adds a manifest",
            stacklevel=3,
        )
        return None
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(files, dict):
            raise ValueError("not a titans-seq model manifest")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{path} is damaged: {error}") from None
    if manifest.get("version", 0) > VERSION:
        raise CheckpointError(f"{path} was written by a newer titans-seq; upgrade to read it")
    for name in required:
        if name not in files:
            raise CheckpointError(f"{path} does not list {name}: the folder was altered")
    for name, entry in files.items():
        file = inside(folder, name)
        try:
            found = _digest(file)
        except FileNotFoundError:
            raise CheckpointError(f"{file} is missing from the saved model") from None
        if found != {"bytes": entry.get("bytes"), "sha256": entry.get("sha256")}:
            raise CheckpointError(
                f"{file} does not match the checksum recorded when the model was saved: it "
                "was edited, damaged or copied from another save; save the model again"
            )
    return set(files)


def require_listed(folder: Path | str, listed: set[str] | None, name: str) -> Path:
    """`inside(folder, name)`, and for a verified folder (`listed` from `verify_folder`) a
    CheckpointError unless the manifest covers it."""
    path = inside(folder, name)
    if listed is not None and name not in listed:
        raise CheckpointError(
            f"{path} is not among the files {Path(folder) / MANIFEST_FILE} checksums: the "
            "folder was altered"
        )
    return path
