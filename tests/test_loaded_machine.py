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
    assert "--mixer" not in command
    assert loaded_machine.job_command(3, "/tmp/x", mixer="attention")[-2:] == [
        "--mixer",
        "attention",
    ]


def test_a_job_reports_its_wall_time_and_its_failure(monkeypatch):
    args = SimpleNamespace(job=True, job_epochs=1, steps=1, workload="readme")
    monkeypatch.setattr(
        loaded_machine,
        "job_command",
        lambda epochs, folder, workload, mixer: [
            sys.executable,
            "-c",
            "import time; time.sleep(0.3)",
        ],
    )
    result = loaded_machine.run("quiet", "passive", args)
    assert result["threads"] is None and 0.3 <= result["seconds"] < 30
    monkeypatch.setattr(
        loaded_machine,
        "job_command",
        lambda epochs, folder, workload, mixer: [
            sys.executable,
            "-c",
            "raise SystemExit('no data here')",
        ],
    )
    with pytest.raises(RuntimeError, match="no data here"):
        loaded_machine.run("quiet", "auto", args)


def test_the_dna_job_is_the_default_classifier_fit_and_prediction():
    command = loaded_machine.job_command(5, "/tmp/somewhere", "dna")
    assert command[1].endswith("estimator_speed.py")
    assert command[2:5] == ["--single", "dna", "auto"]
    assert "--dna-epochs=5" in command and "--dna-sequences=1125" in command
    assert "--dna-score=375" in command


def test_before_rounds_and_workload_need_the_job_mode(capsys):
    for extra in (
        ["--before", "HEAD"],
        ["--reference-mixer", "attention"],
        ["--rounds", "3"],
        ["--workload", "dna"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            loaded_machine.main(extra)
        assert exit_info.value.code == 2
    assert "add --job" in capsys.readouterr().err


def test_a_cell_drops_the_first_round_once_there_are_three():
    assert loaded_machine.round_median([100.0, 10.0, 12.0]) == 11.0
    assert loaded_machine.round_median([100.0, 10.0]) == 55.0
    assert loaded_machine.round_median([7.0]) == 7.0


def test_the_job_runs_in_turns_beside_a_commit(monkeypatch, capsys, tmp_path):
    """Each round runs the commit's job, then today's; the table has a row for each and
    their ratio, from the rounds after the first; the export is removed afterwards."""
    calls = []
    seconds = {str(tmp_path): iter([50.0, 20.0, 22.0]), None: iter([40.0, 10.0, 12.0])}

    def fake_run(load, setting, args, pythonpath=None, mixer=None):
        calls.append((load, pythonpath))
        return {"seconds": next(seconds[pythonpath]), "threads": None}

    monkeypatch.setattr(loaded_machine, "export_commit", lambda commit: str(tmp_path))
    monkeypatch.setattr(loaded_machine, "run", fake_run)
    code = loaded_machine.main(
        ["--job", "--settings", "auto", "--loads", "quiet", "--before", "abc1234", "--rounds", "3"]
    )
    assert code == 0
    assert calls == [("quiet", str(tmp_path)), ("quiet", None)] * 3
    table = capsys.readouterr().out
    assert "| quiet | abc1234 | 21.0 |" in table
    assert "| quiet | today | 11.0 |" in table
    assert "| quiet | today / abc1234 | 0.52x |" in table
    assert not tmp_path.exists()


def test_the_job_runs_in_turns_beside_a_reference_mixer(monkeypatch, capsys):
    """Each round runs the job with the reference mixer, then the default job; the last
    row gives the default job's time as a ratio to the reference's."""
    calls = []
    seconds = {"attention": iter([30.0, 10.0, 10.0]), None: iter([60.0, 15.0, 17.0])}

    def fake_run(load, setting, args, pythonpath=None, mixer=None):
        calls.append(mixer)
        return {"seconds": next(seconds[mixer]), "threads": None}

    monkeypatch.setattr(loaded_machine, "run", fake_run)
    argv = ["--job", "--settings", "auto", "--loads", "quiet", "--rounds", "3"]
    assert loaded_machine.main([*argv, "--reference-mixer", "attention"]) == 0
    assert calls == ["attention", None] * 3
    table = capsys.readouterr().out
    assert "| quiet | attention | 10.0 |" in table
    assert "| quiet | today / attention | 1.60x |" in table
    with pytest.raises(SystemExit):
        loaded_machine.main([*argv, "--reference-mixer", "attention", "--before", "HEAD"])
