"""`titans-seq forecast` end to end on a small CSV: forecast CSV, plot PNG, saved model."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

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


def test_forecast_command_on_a_long_file_of_many_series(tmp_path, capsys):
    """neuralforecast's layout, `;`-separated: series over different times, a future
    covariate, the last N rows of each series, one global model."""
    frames, futures = [], []
    for i, (start, n) in enumerate([("2023-01-01", 200), ("2023-03-01", 150), ("2023-05-01", 90)]):
        dates = pd.date_range(start, periods=n + 6, freq="h")
        price = np.cos(np.arange(n + 6) / 4)
        y = np.sin(np.arange(n) / 4) + i
        frames.append(pd.DataFrame({"unique_id": f"s{i}", "ds": dates[:n], "y": y,
                                    "price": price[:n]}))  # fmt: skip
        futures.append(pd.DataFrame({"unique_id": f"s{i}", "ds": dates[n:], "price": price[n:]}))
    csv, futr = tmp_path / "stores.csv", tmp_path / "prices.csv"
    pd.concat(frames).to_csv(csv, index=False, sep=";")
    pd.concat(futures).to_csv(futr, index=False)
    out, plot = tmp_path / "f.csv", tmp_path / "f.png"
    args = ["forecast", "--data", str(csv), "--horizon", "6", "--lookback", "24", "--epochs",
            "1", "--futr-exog", "price", "--futr-data", str(futr), "--train-rows", "120", "--out",
            str(out), "--plot", str(plot), "--quantiles", "0.1,0.9", "--quiet"]  # fmt: skip
    assert main(args) == 0
    forecast = pd.read_csv(out, parse_dates=["ds"])
    point, low, high = "TitansForecaster", "TitansForecaster_q0.1", "TitansForecaster_q0.9"
    assert forecast.columns.tolist() == ["unique_id", "ds", point, low, high]
    # without a 0.5 level the point forecast lies midway between the levels around it
    np.testing.assert_allclose(forecast[point], (forecast[low] + forecast[high]) / 2, rtol=1e-5)
    assert forecast.groupby("unique_id").size().to_dict() == {"s0": 6, "s1": 6, "s2": 6}
    first = forecast.groupby("unique_id")["ds"].min()
    for i, frame in enumerate(frames):
        assert first[f"s{i}"] == frame["ds"].iloc[-1] + pd.Timedelta("1h")
    assert "fitted on 3 series (330 rows)" in capsys.readouterr().out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*args, "--target", "y"]) == 2
    assert "a long file's target is y" in capsys.readouterr().err


def test_forecast_command_finds_the_timestamp_column(tmp_path):
    t = np.arange(120)
    frame = pd.DataFrame({"Timestamp": pd.date_range("2023-03-01", periods=120, freq="D"),
                          "sales": np.sin(t / 3) + 2})  # fmt: skip
    csv, out = tmp_path / "sales.csv", tmp_path / "f.csv"
    frame.to_csv(csv, index=False)
    args = ["forecast", "--data", str(csv), "--horizon", "7", "--lookback", "28", "--epochs",
            "1", "--out", str(out), "--quiet"]  # fmt: skip
    assert main(args) == 0
    forecast = pd.read_csv(out, index_col=0, parse_dates=True)
    assert forecast.index[0] == pd.Timestamp("2023-06-29") and len(forecast) == 7


def test_forecast_command_with_a_saved_model(tmp_path, capsys):
    """--model forecasts after new data without fitting; options that would train, or ask
    for another model than the saved one, are refused."""
    t = np.arange(400)
    dates = pd.date_range("2023-03-01", periods=400, freq="h")
    frame = pd.DataFrame({"date": dates, "a": np.sin(t / 10), "b": np.cos(t / 7)})
    old, new = tmp_path / "old.csv", tmp_path / "new.csv"
    frame.iloc[:300].to_csv(old, index=False)
    frame.to_csv(new, index=False)
    model, first, second = tmp_path / "model", tmp_path / "first.csv", tmp_path / "second.csv"
    fit = ["forecast", "--data", str(old), "--horizon", "8", "--lookback", "24", "--epochs", "1",
           "--quantiles", "0.1,0.5,0.9", "--out", str(first), "--save-model", str(model),
           "--quiet"]  # fmt: skip
    assert main(fit) == 0
    reuse = ["forecast", "--data", str(new), "--model", str(model), "--out", str(second)]
    assert main(reuse) == 0
    assert f"forecast with the model in {model}" in capsys.readouterr().out
    forecast = pd.read_csv(second, index_col=0, parse_dates=True)
    assert forecast.index[0] == dates[-1] + pd.Timedelta("1h") and len(forecast) == 8
    assert forecast.columns.tolist() == ["a", "b", "a_q0.1", "a_q0.5", "a_q0.9", "b_q0.1",
                                         "b_q0.5", "b_q0.9"]  # fmt: skip
    expected = TitansForecaster.load(model).predict(frame.set_index("date").astype(float))
    np.testing.assert_allclose(forecast[["a", "b"]].to_numpy(), expected.to_numpy(), rtol=1e-5)
    assert main([*reuse, "--horizon", "12"]) == 2
    assert "was fitted with horizon=8" in capsys.readouterr().err
    assert main([*reuse, "--epochs", "5"]) == 2
    assert "--epochs: --model forecasts with a saved model, no fit" in capsys.readouterr().err
    # a model fitted with --target a (a moved last) reads the file in its own column order
    fit[fit.index(str(model))] = str(tmp_path / "model_a")
    assert main([*fit, "--target", "a"]) == 0
    reuse[reuse.index(str(model))] = str(tmp_path / "model_a")
    assert main(reuse) == 0
    assert pd.read_csv(second, index_col=0).columns.tolist()[:2] == ["b", "a"]


def test_warnings_print_as_one_line_of_the_command(tmp_path):
    """In a shell the command's warnings read `titans-seq forecast: warning: ...`, without
    the file and source line Python adds."""
    dates = pd.date_range("2023-03-01", periods=200, freq="h").delete([50, 51])
    csv = tmp_path / "gaps.csv"
    pd.DataFrame({"date": dates, "y": np.sin(np.arange(198) / 4)}).to_csv(csv, index=False)
    command = [sys.executable, "-m", "titans_seq.cli", "forecast", "--data", str(csv),
               "--horizon", "4", "--lookback", "24", "--epochs", "1", "--missing",
               "interpolate", "--out", str(tmp_path / "f.csv"), "--quiet"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "warning" in line]
    assert lines and lines[0].startswith("titans-seq forecast: warning: 2 time step(s) missing")
    assert ".py:" not in done.stderr


def test_forecast_command_takes_the_center_and_reports_what_the_fit_chose(tmp_path, capsys):
    """--center reaches the forecaster; the summary names the center and the validation
    MSE even when the network trained on absolute error (a short series)."""
    t = np.arange(120)
    dates = pd.date_range("2010-01-01", periods=120, freq="MS")
    csv = tmp_path / "monthly.csv"
    pd.DataFrame({"date": dates, "y": 10 + t / 5 + np.sin(t / 2)}).to_csv(csv, index=False)
    model = tmp_path / "model"
    fit = ["forecast", "--data", str(csv), "--horizon", "6", "--lookback", "12", "--epochs", "2",
           "--center", "last", "--baseline", "none", "--out", str(tmp_path / "f.csv"),
           "--save-model", str(model), "--quiet"]  # fmt: skip
    assert main(fit) == 0
    printed = capsys.readouterr().out
    fitted = TitansForecaster.load(model)
    assert (fitted.center, fitted.center_, fitted.loss_) == ("last", "last", "mae")
    lowest = min(h["mse"] for h in fitted.history_ if "mse" in h)
    assert f"windows centered on their last value, best validation MSE {lowest:.4f}" in printed
    # the center is chosen by a fit: a saved model cannot take another
    again = tmp_path / "g.csv"
    reuse = ["forecast", "--data", str(csv), "--model", str(model), "--out", str(again)]
    assert main([*reuse, "--center", "mean"]) == 2
    assert "--center: --model forecasts with a saved model, no fit" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["forecast", "--data", str(csv), "--center", "median"])
    assert "--center: invalid choice: 'median'" in capsys.readouterr().err


def test_forecast_command_takes_the_seasonal_naive_weight(tmp_path, capsys):
    hours = pd.date_range("2020-01-01", periods=24 * 30, freq="h")
    csv = tmp_path / "hourly.csv"
    day = 10 + np.sin(2 * np.pi * np.arange(len(hours)) / 24)
    pd.DataFrame({"date": hours, "y": day}).to_csv(csv, index=False)
    model = tmp_path / "model"
    fit = ["forecast", "--data", str(csv), "--horizon", "24", "--lookback", "48", "--epochs",
           "1", "--baseline", "1", "--out", str(tmp_path / "f.csv"), "--save-model", str(model),
           "--quiet"]  # fmt: skip
    assert main(fit) == 0
    assert "seasonal naive forecast (season 24) weighed in at 1" in capsys.readouterr().out
    forecast = pd.read_csv(tmp_path / "f.csv")
    np.testing.assert_allclose(forecast["y"], day[-24:], rtol=1e-6)
    assert TitansForecaster.load(model).baseline_weight_ == 1.0
    for bad in ("2", "seasonal"):
        with pytest.raises(SystemExit):
            main(["forecast", "--data", str(csv), "--baseline", bad])
        assert "--baseline" in capsys.readouterr().err
