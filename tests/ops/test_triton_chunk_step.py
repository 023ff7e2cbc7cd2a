"""`benchmarks/triton_chunk_step.py`, the GPU probe of the Triton kernels, end to end under
Triton's interpreter at a toy size: it runs, reports every row, and its error column (the
Triton op against the torch backend, y and every gradient) is small with fp32 dots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from process_helpers import subprocess_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_chunk_step_probe_runs_and_its_error_column_is_small(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "probe.json"
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "triton_chunk_step.py"), "--device", "cpu",
        "--shapes", "1x40", "--heads", "2", "--head-dim", "16", "--precisions", "ieee",
        "tf32", "--backwards", "split", "torch", "--states", "global", "registers",
        "--warmup", "0", "--repeat", "1",
        "--json", str(out),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=subprocess_env(TRITON_INTERPRET="1"), timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["precision"], r["state"], r["backward"]) for r in rows] == [
        (precision, state, backward)
        for precision in ("ieee", "tf32")
        for state in ("global", "registers")
        for backward in ("split", "torch")
    ]
    for row in rows:
        assert "failed" not in row, row
        assert row["chunk_steps"] == 3 and row["train_us_per_step"] > 0
    # the interpreter computes tf32 as fp32: both precisions match the torch backend
    errors = [r["error"] for r in rows if "error" in r]
    assert len(errors) == 4 and max(errors) < 1e-4, errors
    assert "| 1x40 | ieee | split | global |" in proc.stdout
    assert "| 1x40 | tf32 | torch | registers |" in proc.stdout
