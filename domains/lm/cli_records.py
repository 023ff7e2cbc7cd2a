"""The JSON record an evaluation command writes beside its table: the command's arguments,
device, host and date, then its results."""

from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone
from pathlib import Path


def write_record(path: Path, args: argparse.Namespace, device, **results) -> None:
    """Write {arguments, device, host, date, **results} to `path` atomically."""
    from titans_seq.training.checkpoint import atomic_write_text

    payload = {
        "arguments": {k: v for k, v in vars(args).items() if k != "handler"},
        "device": str(device),
        "host": platform.node(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **results,
    }
    atomic_write_text(Path(path), json.dumps(payload, indent=1) + "\n")
