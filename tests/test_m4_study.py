"""benchmarks/studies/m4.py: the forecaster and Naive2 on a few M4 series, scored and
tabled as the competition scores them."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import m4  # noqa: E402


def test_the_forecaster_and_naive2_rows_fit_score_and_table():
    if not os.environ.get("TITANS_SEQ_DATA"):
        pytest.skip("needs the data mirror ($TITANS_SEQ_DATA)")
    small = {"dim": 8, "heads": 1, "depth": 1, "max_epochs": 1, "epoch_windows": 32}
    args = argparse.Namespace(threads=1, series=3, titans_options=json.dumps(small))
    runs = [m4.run_one("Weekly", model, 0, args) for model in ("titans", "naive2")]
    assert [(r["model"], r["series"]) for r in runs] == [("titans", 3), ("naive2", 3)]
    assert all(r["smape"] > 0 and r["mase"] > 0 and r["owa"] > 0 for r in runs)
    assert runs[0]["chosen"]["lookback"] >= 1 and 0 <= runs[0]["chosen"]["baseline_weight"] <= 1
    text = m4.table(runs)
    assert "| Weekly | titans |" in text and "| Weekly | naive2 |" in text
    assert "N-BEATS (GIFT-Eval) (published)" in text
