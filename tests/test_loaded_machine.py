"""benchmarks/loaded_machine.py's whole-job mode: the settings it takes, and that a job's
wall time and failure come back from its process (a stand-in job, not the README's)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import loaded_machine  # noqa: E402


def test_the_job_mode_refuses_a_thread_setting_the_command_lacks(capsys):
    with pytest.raises(SystemExit) as exit_info:
        loaded_machine.main(["--job", "--settings", "pinned"])
    assert exit_info.value.code == 2
    assert "--job takes the settings" in capsys.readouterr().err


def test_the_job_command_is_the_readme_job():
    command = loaded_machine.job_command(3, "/tmp/somewhere")
    assert command[3:9] == ["forecast", "--data", "ETTh1", "--horizon", "96", "--epochs"]
    assert command[9] == "3" and "/tmp/somewhere/forecast.csv" in command


def test_a_job_reports_its_wall_time_and_its_failure(monkeypatch):
    args = SimpleNamespace(job=True, job_epochs=1, steps=1)
    monkeypatch.setattr(
        loaded_machine,
        "job_command",
        lambda epochs, folder: [sys.executable, "-c", "import time; time.sleep(0.3)"],
    )
    result = loaded_machine.run("quiet", "passive", args)
    assert result["threads"] is None and 0.3 <= result["seconds"] < 30
    monkeypatch.setattr(
        loaded_machine,
        "job_command",
        lambda epochs, folder: [sys.executable, "-c", "raise SystemExit('no data here')"],
    )
    with pytest.raises(RuntimeError, match="no data here"):
        loaded_machine.run("quiet", "auto", args)
