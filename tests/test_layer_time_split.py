"""benchmarks/studies/layer_time_split.py: prints the time of each part of a layer's call."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import layer_time_split  # noqa: E402


def test_the_split_prints_each_part(capsys):
    assert layer_time_split.main(["--shape", "1x40x64", "--backend", "torch", "--repeat", "1"]) == 0
    rows = [line.split("|")[1].strip() for line in capsys.readouterr().out.splitlines()[3:]]
    assert rows == ["layer", "project", "memory op"]
