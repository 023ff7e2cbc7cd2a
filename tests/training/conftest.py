"""Fixtures of the training-engine tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# recipes name the tiny task by import path; the helpers are imported by the test modules
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from training_helpers import tiny_raw  # noqa: E402


@pytest.fixture
def tiny(tmp_path):
    """Factory: `tiny(**sections)` -> raw tiny-task recipe writing into tmp_path/run."""

    def make(**sections):
        return tiny_raw(tmp_path / "run", **sections)

    return make
