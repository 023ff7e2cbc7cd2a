"""Saved-model folders rewritten as an earlier format version wrote them."""

from __future__ import annotations

import json
from pathlib import Path


def edited_config(folder: Path, config_file: str, change) -> dict:
    """Rewrite the folder's config with `change(meta)` applied in place; the manifest, which
    would no longer match, is removed (load it with allow_unverified=True). Returns the
    rewritten config."""
    config = Path(folder) / config_file
    meta = json.loads(config.read_text())
    change(meta)
    config.write_text(json.dumps(meta))
    (Path(folder) / "model_manifest.json").unlink()
    return meta


def as_older_format(folder: Path, config_file: str, version: int, params=(), chosen=()) -> dict:
    """Set the folder's `format_version` to `version` and remove the `params` and `chosen`
    fields that version did not have (see `edited_config`)."""

    def older(meta: dict) -> None:
        meta["format_version"] = version
        for name in params:
            del meta["params"][name]
        for name in chosen:
            del meta["chosen"][name]

    return edited_config(folder, config_file, older)


def load_refused(cls, folder: Path, config_file: str, change, match: str) -> None:
    """`cls.load(folder)` after `edited_config(folder, config_file, change)` raises a
    CheckpointError matching `match` (the unverified load's warning expected)."""
    import pytest

    from titans_seq.training import CheckpointError

    edited_config(folder, config_file, change)
    with pytest.raises(CheckpointError, match=match):
        with pytest.warns(UserWarning, match="loaded unverified"):
            cls.load(folder, allow_unverified=True)
