"""benchmarks/studies/forecast_inputs.py: its JSON names the command that produced it and
where and when it ran, beside every run and the table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import forecast_inputs  # noqa: E402


def test_the_record_holds_command_provenance_runs_and_table(tmp_path, monkeypatch):
    def child(config, seed, args):  # a fit's result, without fitting
        return {"config": config, "seed": seed, "test_mse": 0.1 + seed, "epochs": 2,
                "fit_seconds": 3.0}  # fmt: skip

    monkeypatch.setattr(forecast_inputs, "child", child)
    out = tmp_path / "inputs.json"
    argv = ["forecast_inputs.py", "--configs", "OT alone", "--seeds", "0,1", "--jobs", "1",
            "--out", str(out)]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    threads = torch.get_num_threads()
    try:
        forecast_inputs.main()
    finally:
        torch.set_num_threads(threads)
    record = json.loads(out.read_text())
    assert record["command"] == "python " + " ".join(
        ["forecast_inputs.py", "--configs", "'OT alone'", *argv[3:]]
    )
    assert record["device"].endswith("1 threads)")  # the children's threads, not the parent's
    assert {"torch", "commit", "date"} <= record.keys()
    assert [r["seed"] for r in record["runs"]] == [0, 1]
    assert "| OT alone | 0.6000 ± 0.7071 | 2 |" in record["table"]
