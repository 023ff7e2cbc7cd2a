"""benchmarks/studies/forecast_first_tries.py: rolling origins, errors in series standard
deviations, the Titans rows on a bundled series, and the tables (the peers' rows need
neuralforecast and statsforecast, which the study installs apart)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import forecast_first_tries as study  # noqa: E402


def two_series(n=40) -> pd.DataFrame:
    ds = pd.date_range("2000-01-01", periods=n, freq="MS")
    return pd.DataFrame({
        "unique_id": ["a"] * n + ["b"] * n,
        "ds": list(ds) * 2,
        "y": np.r_[np.arange(n, dtype=float), 100.0 * np.arange(n)],
    })  # fmt: skip


def test_origins_end_the_data_step_rows_apart():
    spec = study.Dataset("toy", "", "MS", horizon=4, season=12, windows=3, step=2)
    frame = two_series()
    dates = sorted(frame["ds"].unique())
    assert study.origins(frame, spec) == [dates[-9], dates[-7], dates[-5]]


@pytest.mark.parametrize(
    ("name", "file", "header", "dates"),
    [
        ("ili", "illness/national_illness.csv",
         "date,% WEIGHTED ILI,%UNWEIGHTED ILI,AGE 0-4,AGE 5-24,ILITOTAL,NUM. OF PROVIDERS,OT",
         [f"2002-01-{d:02d} 00:00:00" for d in (1, 8, 15, 22, 29)]),
        ("exchange", "exchange_rate/exchange_rate.csv", "date,0,1,2,3,4,5,6,OT",
         [f"1990/1/{d} 0:00" for d in range(1, 6)]),
    ],
)  # fmt: skip
def test_the_benchmark_panels_load_long_on_the_frequency_their_peers_are_given(
    tmp_path, monkeypatch, name, file, header, dates
):
    """ILI and Exchange in their published layout: one series per column, on the grid of
    the `freq` that neuralforecast and statsforecast are given."""
    path = tmp_path / file
    path.parent.mkdir(parents=True)
    columns = header.count(",")
    rows = [
        f"{d}," + ",".join(str(i + 0.5 * c) for c in range(columns)) for i, d in enumerate(dates)
    ]
    path.write_text("\n".join([header, *rows]) + "\n")
    monkeypatch.setenv("TITANS_SEQ_DATA", str(tmp_path))
    monkeypatch.setenv("TITANS_SEQ_OFFLINE", "1")
    frame = study.load(name)
    assert list(frame.columns) == ["unique_id", "ds", "y"]
    assert frame["unique_id"].nunique() == columns
    for _, one in frame.groupby("unique_id"):
        assert pd.infer_freq(one["ds"]) == study.DATASETS[name].freq
        assert len(one) == len(dates)


def test_errors_are_in_each_series_standard_deviation_and_check_the_origins():
    frame = two_series()
    cut = sorted(frame["ds"].unique())[-5]
    ahead = frame[frame["ds"] > cut].assign(cutoff=cut)
    # both series forecast one of their own standard deviations (fitting rows) too high
    scale = study.up_to(frame, cut).groupby("unique_id")["y"].std()
    forecasts = ahead.assign(yhat=ahead["y"] + ahead["unique_id"].map(scale))
    result = study.errors(frame, forecasts, [cut])
    assert result["mse"] == pytest.approx(1.0) and result["mae"] == pytest.approx(1.0)
    assert result["points"] == 8
    with pytest.raises(RuntimeError, match="origins"):
        study.errors(frame, forecasts, [sorted(frame["ds"].unique())[-6]])


def test_the_titans_rows_fit_once_and_forecast_every_origin():
    options = argparse.Namespace(
        threads=1, titans_options='{"max_epochs": 1, "dim": 8, "depth": 1, "heads": 1}'
    )
    run = study.run_one("airline", "titans", 0, options)
    assert (run["dataset"], run["model"], run["windows"], run["points"]) == (
        "airline",
        "titans",
        3,
        36,
    )
    assert np.isfinite(run["mse"]) and run["mse"] > 0


def test_the_tables_mark_the_best_the_ratio_to_the_best_peer_and_a_cut_fit():
    def run(model, mse, mae, seconds):
        return {"dataset": "lynx", "model": model, "seed": 0, "mse": mse, "mae": mae,
                "fit_seconds": seconds}  # fmt: skip

    runs = [
        run("titans", 0.5, 0.6, 10),
        run("nhits", 0.4, 0.5, 90),
        run("naive", 1.0, 0.9, 0),
        study.as_run({"job": ["lynx", "autoarima", "0"], "cut_at_seconds": 600}),
    ]
    board = study.leaderboard(runs).splitlines()[2]
    assert board.startswith("| lynx (yearly") and "| 0.5 |" in board and "| **0.4** |" in board
    assert "| cut |" in board and board.endswith("| 10 / 90 |")
    table = study.table(runs)
    assert "| titans | 0.5 | 0.6 | 1.25x | 10.0 |" in table
    assert "| autoarima | - | - | - | cut at 600 |" in table
