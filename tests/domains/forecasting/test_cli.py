"""`titans-seq forecast` end to end on a small CSV: forecast CSV, plot PNG, saved model."""

import numpy as np
import pandas as pd

from titans_seq.cli import main
from titans_seq.domains.forecasting import TitansForecaster


def test_forecast_command_writes_csv_plot_and_model(tmp_path, capsys):
    t = np.arange(300)
    frame = pd.DataFrame(
        {
            "date": pd.date_range("2023-03-01", periods=300, freq="15min"),
            "a": np.sin(t / 10),
            "OT": np.cos(t / 7),
        }
    )
    csv = tmp_path / "series.csv"
    frame.to_csv(csv, index=False)
    out, plot, model = tmp_path / "f.csv", tmp_path / "f.png", tmp_path / "model"
    code = main(
        [
            "forecast",
            "--data",
            str(csv),
            "--horizon",
            "8",
            "--lookback",
            "24",
            "--epochs",
            "1",
            "--out",
            str(out),
            "--plot",
            str(plot),
            "--save-model",
            str(model),
            "--quiet",
        ]
    )
    assert code == 0
    forecast = pd.read_csv(out, index_col=0, parse_dates=True)
    assert forecast.shape == (8, 2) and list(forecast.columns) == ["a", "OT"]
    assert forecast.index[0] == frame["date"].iloc[-1] + pd.Timedelta(minutes=15)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert TitansForecaster.load(model).horizon == 8
    assert "forecast of 8 steps written" in capsys.readouterr().out


def test_forecast_command_reports_bad_input_in_one_line(tmp_path, capsys):
    csv = tmp_path / "short.csv"
    pd.DataFrame({"date": pd.date_range("2023", periods=10, freq="h"), "x": range(10)}).to_csv(
        csv, index=False
    )
    code = main(["forecast", "--data", str(csv), "--horizon", "8", "--lookback", "24"])
    assert code == 2
    assert "lookback + horizon" in capsys.readouterr().err


def test_forecast_command_with_covariates(tmp_path, capsys):
    t = np.arange(300)
    dates = pd.date_range("2023-03-01", periods=324, freq="h")
    plan = np.sin(np.arange(324) / 5)
    frame = pd.DataFrame(
        {"date": dates[:300], "load": np.cos(t / 9), "plan": plan[:300], "OT": np.cos(t / 7)}
    )
    csv, futr = tmp_path / "series.csv", tmp_path / "plan.csv"
    frame.to_csv(csv, index=False)
    pd.DataFrame({"date": dates[300:], "plan": plan[300:]}).to_csv(futr, index=False)
    out = tmp_path / "f.csv"
    args = ["forecast", "--data", str(csv), "--horizon", "24", "--lookback", "48",
            "--epochs", "1", "--out", str(out), "--quiet", "--hist-exog", "load",
            "--futr-exog", "plan", "--futr-data", str(futr), "--calendar", "hour"]  # fmt: skip
    assert main(args) == 0
    forecast = pd.read_csv(out, index_col=0, parse_dates=True)
    assert list(forecast.columns) == ["OT"] and forecast.index[0] == dates[300]
    assert "(1 forecast)" in capsys.readouterr().out
    short = tmp_path / "short.csv"
    pd.DataFrame({"date": dates[300:310], "plan": plan[300:310]}).to_csv(short, index=False)
    args[args.index(str(futr))] = str(short)
    assert main(args) != 0
    assert "14 of the 24 forecast steps have no row" in capsys.readouterr().err
