"""The forecaster's input rules at every entry point (estimator, sktime, darts, CLI, saved
folders): each bad input gets an error that names its real cause, never a pandas, NumPy or
torch internal, and never advice to use a parameter that does not exist."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
from forecaster_helpers import TINY_FORECASTER

from titans_seq.cli import main
from titans_seq.data import DataError
from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.training.checkpoint import CheckpointError

TINY = TINY_FORECASTER


def long_frame(lengths=(60, 45), covariate=True) -> pd.DataFrame:
    frames = []
    for i, n in enumerate(lengths):
        t = np.arange(n)
        body = {"unique_id": f"s{i}", "ds": pd.date_range("2024-01-01", periods=n, freq="h"),
                "y": np.sin(t / 3 + i)}  # fmt: skip
        if covariate:
            body["plan"] = np.cos(t / 5)
        frames.append(pd.DataFrame(body))
    return pd.concat(frames, ignore_index=True)


def wide(n=120, channels=2) -> pd.DataFrame:
    t = np.arange(n)[:, None]
    values = np.sin(t / 6 + np.arange(channels))
    index = pd.date_range("2024-01-01", periods=n, freq="h", name="date")
    return pd.DataFrame(values, index=index, columns=[f"c{i}" for i in range(channels)])


# ------------------------------------------------------------------------- estimator input


def test_duplicated_timestamps_are_named_without_a_parameter_the_estimator_lacks():
    frame = wide()
    with pytest.raises(DataError, match="duplicated timestamp") as caught:
        TitansForecaster(**TINY).fit(pd.concat([frame, frame.iloc[:1]]))
    assert "duplicates=" not in str(caught.value)  # the estimator has no such parameter
    assert "aggregate" in str(caught.value)


def test_a_long_frame_without_y_is_named_as_such():
    frame = long_frame(covariate=False).rename(columns={"y": "value"})
    with pytest.raises(DataError, match=r"lacks \['y'\].*name the column to forecast 'y'"):
        TitansForecaster(**TINY).fit(frame)


def test_text_in_one_series_names_the_offending_value_not_the_date_column():
    frame = long_frame(covariate=False).astype({"y": object})
    frame.loc[frame.index[-3], "y"] = "n/a"  # in series s1
    with pytest.raises(DataError, match=r"series 's1'.*'y' \(object, e.g. 'n/a'\)") as caught:
        TitansForecaster(**TINY).fit(frame)
    assert "date column" not in str(caught.value)


def test_a_time_zone_mismatch_at_predict_is_named():
    f = TitansForecaster(**TINY, futr_exog_list=["plan"]).fit(long_frame())
    rows = []
    for uid, one in f.series_.items():
        stamps = pd.date_range(one.tail.index[-1], periods=5, freq="h")[1:].tz_localize("UTC")
        rows.append(pd.DataFrame({"unique_id": uid, "ds": stamps, "plan": 0.0}))
    with pytest.raises(DataError, match="time zone UTC, the series' are without a time zone"):
        f.predict(futr_df=pd.concat(rows))


# ------------------------------------------------------------------------------- sktime


def test_sktime_adapter_checks_covariate_columns_and_instances_as_the_estimator_does():
    pytest.importorskip("sktime")
    from titans_seq.domains.forecasting.sktime_forecaster import TitansSktimeForecaster

    index = pd.date_range("2024-01-01", periods=80, freq="h")
    y = pd.DataFrame({"y": np.sin(np.arange(80) / 4)}, index=index)
    X = pd.DataFrame({"plan": np.cos(np.arange(80) / 5), "load": np.arange(80) / 80}, index)
    named = TitansForecaster(**TINY, hist_exog_list=["temp"])
    with pytest.raises(DataError, match=r"fit: X lacks the covariate column\(s\) \['temp'\]"):
        TitansSktimeForecaster(named).fit(y, X=X, fh=[1, 2])
    with pytest.raises(DataError, match="hist_exog_list names.*no X"):
        TitansSktimeForecaster(named).fit(y, fh=[1, 2])
    f = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(y[:60], X=X[:60], fh=[1, 2])
    renamed = X.iloc[60:64].rename(columns={"plan": "plan2"})
    with pytest.raises(DataError, match=r"predict: X lacks the covariate column\(s\) \['plan'\]"):
        f.predict(X=renamed)
    panel_index = pd.MultiIndex.from_product([["a", "b"], index[:60]])
    yp = pd.DataFrame({"y": np.sin(np.arange(120) / 4)}, index=panel_index)
    Xp = pd.DataFrame({"plan": np.cos(np.arange(120) / 5)}, index=panel_index)
    fp = TitansSktimeForecaster(TitansForecaster(**TINY)).fit(yp, X=Xp, fh=[1, 2])
    only_a = pd.DataFrame(
        {"plan": np.zeros(4)}, index=pd.MultiIndex.from_product([["a"], index[60:64]])
    )
    with pytest.raises(DataError, match=r"X has no rows for instance\(s\) \['b'\]"):
        fp.predict(X=only_a)


# -------------------------------------------------------------------------------- darts


def test_darts_adapter_refuses_bad_step_counts_and_missing_static_covariates():
    pytest.importorskip("darts")
    from darts import TimeSeries

    from titans_seq.domains.forecasting.darts_model import TitansDartsModel

    index = pd.date_range("2024-01-01", periods=80, freq="h")
    one = TimeSeries.from_times_and_values(index, np.sin(np.arange(80) / 4))
    model = TitansDartsModel(TitansForecaster(**TINY)).fit(one)
    for n in (-3, 0, 2.5):
        with pytest.raises(ValueError, match=r"predict: n \(the steps to forecast\) must be"):
            model.predict(n)
    many = [
        TimeSeries.from_times_and_values(
            index, np.sin(np.arange(80) / 4 + i)
        ).with_static_covariates(pd.DataFrame({"size": [float(i)]}))
        for i in range(3)
    ]
    statics = TitansDartsModel(TitansForecaster(**TINY)).fit(many)
    with pytest.raises(DataError, match=r"0 static covariate\(s\); the model was fitted with 1"):
        statics.predict(3, series=one)


# ---------------------------------------------------------------------------------- CLI


@pytest.mark.parametrize(
    "option, value",
    [("--train-rows", "-5"), ("--train-rows", "0"), ("--horizon", "0"), ("--lookback", "-1"),
     ("--epochs", "0"), ("--batch-size", "0"), ("--lr", "-0.1"), ("--lr", "nan"),
     ("--seed", "-2")],
)  # fmt: skip
def test_cli_numeric_options_are_checked_when_parsed(tmp_path, capsys, option, value):
    csv = tmp_path / "s.csv"
    wide().to_csv(csv)
    with pytest.raises(SystemExit) as exit_:
        main(["forecast", "--data", str(csv), option, value, "--out", str(tmp_path / "f.csv")])
    assert exit_.value.code == 2
    assert f"argument {option}: " in capsys.readouterr().err
    assert not (tmp_path / "f.csv").exists()  # refused before any fit


# -------------------------------------------------------------------------- saved folders


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    root = tmp_path_factory.mktemp("saved")
    TitansForecaster(**TINY).fit(wide()).save(root / "h4")
    TitansForecaster(**{**TINY, "horizon": 8}).fit(wide()).save(root / "h8")
    return root


def _copy_without_manifest(saved, name, tmp_path):
    folder = tmp_path / name
    shutil.copytree(saved / name, folder)
    (folder / "model_manifest.json").unlink()
    return folder


def test_a_folder_without_its_manifest_is_refused_unless_trusted(saved, tmp_path):
    folder = _copy_without_manifest(saved, "h4", tmp_path)
    with pytest.raises(CheckpointError, match="has no model_manifest.json.*allow_unverified"):
        TitansForecaster.load(folder)
    with pytest.warns(UserWarning, match="loaded unverified"):
        assert TitansForecaster.load(folder, allow_unverified=True).horizon == 4


@pytest.mark.parametrize(
    "edit, field",
    [
        ({"params": {"lookback": 32}}, "lookback"),
        ({"chosen": {"lookback": 32}}, "lookback"),
        ({"params": {"horizon": 8}}, "horizon"),
        ({"params": {"dim": 16}}, "dim"),
    ],
)
def test_json_fields_that_disagree_with_the_weights_are_named(saved, tmp_path, edit, field):
    folder = _copy_without_manifest(saved, "h4", tmp_path)
    config = folder / "forecaster.json"
    meta = json.loads(config.read_text())
    for section, fields in edit.items():
        meta[section].update(fields)
    config.write_text(json.dumps(meta))
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match=field):
        TitansForecaster.load(folder, allow_unverified=True)


def test_weights_of_another_model_are_named(saved, tmp_path):
    folder = _copy_without_manifest(saved, "h4", tmp_path)
    shutil.copy(saved / "h8" / "model.safetensors", folder / "model.safetensors")
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match="head.weight'.*horizon"):
        TitansForecaster.load(folder, allow_unverified=True)


def test_a_saved_series_cut_short_is_named(saved, tmp_path):
    folder = _copy_without_manifest(saved, "h4", tmp_path)
    config = folder / "forecaster.json"
    meta = json.loads(config.read_text())
    meta["series"][0]["target"] = meta["series"][0]["target"][:-3]
    config.write_text(json.dumps(meta))
    with pytest.warns(UserWarning), pytest.raises(DataError, match="series 0: 'target' holds"):
        TitansForecaster.load(folder, allow_unverified=True)


def test_the_command_line_loads_a_folder_without_manifest_only_when_told(saved, tmp_path, capsys):
    folder = _copy_without_manifest(saved, "h4", tmp_path)
    csv = tmp_path / "s.csv"
    wide().to_csv(csv)
    base = ["forecast", "--data", str(csv), "--model", str(folder), "--out", str(tmp_path / "f")]
    assert main(base) == 2
    assert "has no model_manifest.json" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="loaded unverified"):
        assert main([*base, "--allow-unverified-model"]) == 0
    assert (tmp_path / "f").is_file()
