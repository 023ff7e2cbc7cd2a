"""Experiment trackers (MLflow into a local SQLite store, W&B offline) get the CSV logs'
numbers and the config, a resumed run continues the same tracker runs, a missing package
stops the run before it starts, and messages go through `logging`."""

from __future__ import annotations

import importlib.util
import json
import logging

import pytest

from titans_seq.training import from_dict, train
from titans_seq.training.config import ConfigError
from titans_seq.training.logs import read_csv


def run_with(tiny, trackers, **train_options):
    raw = tiny(
        train={"trackers": trackers, "max_steps": 20, **train_options},
        eval={"every": 10},
        model={"dropout": 0.0},
    )
    return raw, train(from_dict(raw), quiet=True)


def test_mlflow_gets_the_logged_numbers_and_the_config(tiny):
    pytest.importorskip("mlflow")
    import mlflow

    _, result = run_with(tiny, ["mlflow"])
    run_id = json.loads((result.run_dir / "trackers.json").read_text())["mlflow"]
    client = mlflow.MlflowClient(f"sqlite:///{result.run_dir / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert float(run.data.params["optim.lr"]) == from_dict(tiny()).optim.lr
    history = client.get_metric_history(run_id, "train/loss")
    logged = read_csv(result.run_dir / "train_log.csv")
    assert [m.step for m in history] == [r["step"] for r in logged]
    assert [m.value for m in history] == pytest.approx([r["loss"] for r in logged])
    val = client.get_metric_history(run_id, "val/loss")
    assert [m.step for m in val] == [10, 20]


def test_a_resumed_run_continues_the_same_mlflow_run(tiny):
    pytest.importorskip("mlflow")
    import mlflow

    raw, first = run_with(tiny, ["mlflow"])
    first_id = json.loads((first.run_dir / "trackers.json").read_text())["mlflow"]
    raw["train"]["max_steps"] = 30
    resumed = train(from_dict(raw), resume=True, quiet=True)
    assert json.loads((resumed.run_dir / "trackers.json").read_text())["mlflow"] == first_id
    client = mlflow.MlflowClient(f"sqlite:///{resumed.run_dir / 'mlflow.db'}")
    assert [m.step for m in client.get_metric_history(first_id, "val/loss")] == [10, 20, 30]
    assert len(client.search_runs([client.get_run(first_id).info.experiment_id])) == 1


def test_wandb_offline_writes_its_run_under_the_run_folder_and_resumes_it(tiny, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    raw, first = run_with(tiny, ["wandb"])
    run_id = json.loads((first.run_dir / "trackers.json").read_text())["wandb"]
    runs = list((first.run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
    raw["train"]["max_steps"] = 30
    resumed = train(from_dict(raw), resume=True, quiet=True)
    assert json.loads((resumed.run_dir / "trackers.json").read_text())["wandb"] == run_id


def test_a_tracker_without_its_package_stops_the_run_before_any_work(tiny, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    raw = tiny(train={"trackers": ["wandb"]})
    with pytest.raises(ConfigError, match="pip install wandb"):
        train(from_dict(raw), quiet=True)
    assert not (from_dict(raw).run_dir() / "train_log.csv").exists()


def test_an_unknown_tracker_is_refused_when_the_config_is_read(tiny):
    with pytest.raises(ConfigError, match="trackers"):
        from_dict(tiny(train={"trackers": ["neptune"]}))


def test_messages_go_through_logging_to_the_applications_handlers(tiny, caplog, capsys):
    with caplog.at_level(logging.INFO, logger="titans_seq.training"):
        train(from_dict(tiny(train={"max_steps": 20}, eval={"every": 10})))
    messages = [r.getMessage() for r in caplog.records if r.name == "titans_seq.training"]
    assert any(m.startswith("step 10: val_loss=") for m in messages)
    # the application's handlers have them: the run does not print them a second time
    assert "step 10: val_loss=" not in capsys.readouterr().err


def test_a_tracker_that_cannot_start_is_one_error_naming_it_without_the_password(tiny):
    pytest.importorskip("mlflow")
    from titans_seq.training.trackers import TrackerError

    raw = tiny(train={"trackers": ["mlflow"], "mlflow_uri": "nonsense://user:secret@host/x"})
    with pytest.raises(
        TrackerError, match=r"MLflow could not start at nonsense://user:\*\*\*@"
    ) as info:
        train(from_dict(raw), quiet=True)
    assert "secret" not in str(info.value) and "\n" not in str(info.value)
    train(from_dict(tiny(train={"max_steps": 5})), quiet=True)  # the folder is free again


def test_a_tracker_failing_mid_run_is_dropped_with_a_warning_and_the_run_finishes(
    tiny, monkeypatch
):
    pytest.importorskip("mlflow")
    from titans_seq.training.trackers import MLflowTracker

    calls = []

    def failing(self, prefix, step, values):
        calls.append(step)
        raise ConnectionError("server went away")

    monkeypatch.setattr(MLflowTracker, "log", failing)
    with pytest.warns(RuntimeWarning, match="MLflowTracker stopped at step 5"):
        _, result = run_with(tiny, ["mlflow"])
    assert result.step == 20 and calls == [5]
    assert [r["step"] for r in read_csv(result.run_dir / "train_log.csv")] == [5, 10, 15, 20]
