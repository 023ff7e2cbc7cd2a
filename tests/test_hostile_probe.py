"""`benchmarks/hostile_probe.py` end to end: every bad input, damaged file and fault it
tries gives a clear error or the right result (no traceback, nothing silently accepted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import subprocess_env

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_hostile_probe_finds_nothing(tmp_path):
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "hostile_probe.py"), "--json", str(out)],
        capture_output=True, text=True, env=subprocess_env(), timeout=1200, cwd=tmp_path,
    )  # fmt: skip
    outcomes = json.loads(out.read_text())
    bad = [o for o in outcomes if o["outcome"] != "ok"]
    assert not bad and proc.returncode == 0, bad or proc.stderr[-2000:]
    assert len(outcomes) > 150
