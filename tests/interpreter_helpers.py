"""Triton kernels' checks under the CPU interpreter, in a subprocess.

TRITON_INTERPRET must be set before triton is first imported, which the pytest process may
already have done (torch imports it lazily). So a test module runs its interpreter checks
by executing itself as a script in a child process (`interpreter_results`), whose
`__main__` block sets the variable first and reports every case as one JSON line
(`report_cases`); the pytest tests then assert on each case's result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterable

import pytest


def report_cases(run_case: Callable[[str], str], names: Iterable[str]) -> None:
    """Run every case and print {name: "ok" or the failure's traceback} as one JSON line
    (a failing case does not stop the others)."""
    results = {}
    for case in names:
        try:
            results[case] = run_case(case)
        except Exception:
            results[case] = traceback.format_exc(limit=3)
    print(json.dumps(results))


def interpreter_results(script: str, names: Iterable[str], timeout: float = 900) -> dict:
    """{case: result} from `python script CASE...` under TRITON_INTERPRET=1 (the test is
    skipped without triton)."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, script, *names], env=env, capture_output=True, text=True, timeout=timeout
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise AssertionError(f"interpreter run failed:\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1])
