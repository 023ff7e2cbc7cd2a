"""benchmarks/cpu_report.py: which parts a report runs, with and without --before."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import cpu_report  # noqa: E402


def test_the_report_runs_five_parts_and_a_sixth_beside_a_commit():
    plain = cpu_report.parts(SimpleNamespace(before=None, dna_epochs=20))
    assert [command[0] for _, command in plain] == [
        "cpu_memory_speed.py", "estimator_speed.py", "loaded_machine.py", "loaded_machine.py",
        "loaded_machine.py",
    ]  # fmt: skip
    assert plain[4][1][plain[4][1].index("--workload") + 1] == "dna"
    assert not any("--before" in command for _, command in plain)
    beside = cpu_report.parts(SimpleNamespace(before="abc1234", dna_epochs=20))
    assert len(beside) == 6
    assert "--before" in beside[1][1]  # the estimators' fits at the commit
    last = beside[5][1]
    assert last[:2] == ["loaded_machine.py", "--job"]
    assert last[last.index("--before") + 1] == "abc1234" and "--rounds" in last
    assert last[last.index("--loads") + 1] == "quiet"
