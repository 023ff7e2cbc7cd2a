"""benchmarks/studies/covariate_signal.py: the ridge probe finds a covariate that leads the
target, finds nothing in noise, and reads the calendar of the horizon's first step."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import covariate_signal  # noqa: E402


def frame_with(lead: int, noise_only: bool, rows: int = 2400, seed: int = 0) -> pd.DataFrame:
    """Hourly target driven by a random-walk covariate `lead` steps earlier (or unrelated)."""
    rng = np.random.default_rng(seed)
    driver = np.cumsum(rng.normal(size=rows + lead))
    target = 0.1 * rng.normal(size=rows)
    if not noise_only:
        target = target + driver[:rows]  # the target follows the driver `lead` steps later
    index = pd.date_range("2020-01-01", periods=rows, freq="h")
    return pd.DataFrame({"driver": driver[lead:], "OT": target}, index=index)


def probe(frame, horizon=8):
    calendar = covariate_signal.one_hot_calendar(frame.index)
    return covariate_signal.probe(frame, calendar, "OT", "custom", 24, horizon, [1.0, 100.0], 1)


def test_a_leading_covariate_lowers_the_test_error():
    results = probe(frame_with(lead=12, noise_only=False))
    alone = results["target alone"]["test_mse"]
    assert results["+ others (historical)"]["test_mse"] < 0.2 * alone


def test_an_unrelated_covariate_does_not():
    results = probe(frame_with(lead=12, noise_only=True))
    alone = results["target alone"]["test_mse"]
    assert results["+ others (historical)"]["test_mse"] > 0.9 * alone


def test_an_hourly_profile_is_found_through_the_calendar():
    rows = 2400
    index = pd.date_range("2020-01-01", periods=rows, freq="h")
    rng = np.random.default_rng(1)
    profile = rng.normal(size=24)
    frame = pd.DataFrame(
        {"other": rng.normal(size=rows), "OT": profile[index.hour] + 0.1 * rng.normal(size=rows)},
        index=index,
    )
    results = probe(frame, horizon=24)
    assert set(results) == set(covariate_signal.INPUTS)
    # the lookback (24 steps) already shows the whole daily cycle; the calendar still tells
    # each output step its hour without reading it off the window
    assert results["+ calendar (future)"]["test_mse"] <= results["target alone"]["test_mse"]


def test_the_one_hot_calendar_has_hours_only_below_a_day():
    hourly = pd.date_range("2021-03-01", periods=5, freq="h")
    daily = pd.date_range("2021-03-01", periods=5, freq="D")
    assert covariate_signal.one_hot_calendar(hourly).shape == (5, 31)
    assert covariate_signal.one_hot_calendar(daily).shape == (5, 7)
    assert covariate_signal.one_hot_calendar(pd.RangeIndex(5)) is None


def test_the_table_has_a_row_per_input_set_and_a_column_per_horizon():
    results = {96: {"target alone": {"val_mse": 0.1, "test_mse": 0.05}}}
    text = covariate_signal.table(results)
    assert "| target alone | 0.1000 / 0.0500 |" in text and "H=96 val / test" in text
