"""Damage a saved file the way a bad disk, a copy or a download would."""

from __future__ import annotations

from pathlib import Path


def flip_byte(path: Path, position: int = -3) -> None:
    """Invert every bit of one byte of `path` (negative positions count from the end, where
    a safetensors file keeps its tensor data)."""
    data = bytearray(Path(path).read_bytes())
    data[position] ^= 0xFF
    Path(path).write_bytes(bytes(data))
