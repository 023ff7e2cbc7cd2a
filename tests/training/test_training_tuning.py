"""Optuna tuning on a real SQLite file: trials, pruning, failures, resume, exports, plots."""

from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from training_helpers import tiny_raw, write_recipe

from titans_seq.cli import main
from titans_seq.training import ConfigError, load_config
from titans_seq.training.logs import read_csv
from titans_seq.tuning import load_search_space, parse_search_space, tune
from titans_seq.tuning.study import default_storage

SPACE = {
    "optim.lr": {"type": "float", "low": 1.0e-3, "high": 3.0e-2, "log": True},
    "model.hidden": [8, 16],
}


def _recipe(tmp_path, **sections):
    sections.setdefault("train", {"max_steps": 20})
    raw = tiny_raw(tmp_path / "unused", **sections)
    raw["search_space"] = SPACE
    return write_recipe(tmp_path / "recipe.yaml", raw)


def test_tune_runs_trials_exports_the_best_recipe_and_plots(tmp_path):
    out = tmp_path / "tune"
    result = tune(_recipe(tmp_path), n_trials=3, out_dir=out, pruner="none", sampler_seed=0)
    assert (result.n_trials, result.n_complete) == (3, 3)
    assert result.storage == default_storage(out) and (out / "study.db").is_file()
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    best = study.best_trial
    assert result.best_value == best.value and result.best_params == best.params
    # each trial trained in its own run folder, and its value is its best validation loss
    for trial in study.trials:
        run_dir = tmp_path / "tune" / "trials" / f"trial_{trial.number:04d}"
        assert trial.user_attrs["run_dir"] == str(run_dir.resolve())
        losses = [r["loss"] for r in read_csv(run_dir / "eval_log.csv")]
        assert trial.value == pytest.approx(min(losses))
        assert list(trial.intermediate_values) == [10, 20]
    # the exported recipe is ready to train and carries the best values
    tuned = load_config(result.best_recipe)
    assert tuned.optim.lr == pytest.approx(best.params["optim.lr"])
    assert tuned.model.hidden == best.params["model.hidden"]
    assert tuned.search_space is None and tuned.name == "tiny_regression-tuned"
    assert "best trial" in result.best_recipe.read_text().splitlines()[0]
    for plot in ("optimization_history", "param_importances", "intermediate_values"):
        assert (out / f"{plot}.png").read_bytes()[:4] == b"\x89PNG", plot
    assert len((out / "trials.csv").read_text().splitlines()) == 4

    # resuming the study adds trials instead of starting over
    again = tune(_recipe(tmp_path), n_trials=2, out_dir=out, pruner="none")
    numbers = [
        t.number
        for t in optuna.load_study(study_name=again.study_name, storage=again.storage).trials
    ]
    assert again.n_trials == 5 and numbers == list(range(5))


def test_failed_trials_are_recorded_and_do_not_stop_the_study(tmp_path):
    recipe = _recipe(tmp_path)
    space = tmp_path / "space.yaml"
    # trials drawing fail_above_lr=0.0 raise inside the loss; the others train normally
    space.write_text(yaml.safe_dump({"search_space": {"data.fail_above_lr": [None, 0.0]}}))
    result = tune(
        recipe,
        n_trials=6,
        out_dir=tmp_path / "t",
        search_space=space,
        pruner="none",
        sampler_seed=1,
    )
    assert result.n_trials == 6 and result.n_failed >= 1 and result.n_complete >= 1
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    for trial in study.trials:
        failing = trial.params["data.fail_above_lr"] == 0.0
        assert trial.state == (TrialState.FAIL if failing else TrialState.COMPLETE)
        if failing:
            assert trial.user_attrs["error"].startswith("FloatingPointError: lr")
    assert result.best_params["data.fail_above_lr"] is None


def test_pruning_stops_bad_trials_from_intermediate_scores(tmp_path):
    recipe = _recipe(tmp_path, train={"max_steps": 40}, eval={"every": 5})
    space = tmp_path / "space.yaml"
    # lr 1e-5 barely moves: clearly worse than the median at every evaluation
    space.write_text(yaml.safe_dump({"optim.lr": [1.0e-5, 3.0e-2]}))
    result = tune(
        recipe,
        n_trials=8,
        out_dir=tmp_path / "t",
        search_space=space,
        pruner="median",
        sampler_seed=0,
    )
    assert result.n_pruned >= 1, result
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    for trial in study.trials:
        if trial.state == TrialState.PRUNED:
            assert trial.params["optim.lr"] == 1.0e-5
            assert max(trial.intermediate_values) < 40  # stopped before the end
    assert result.best_params == {"optim.lr": 3.0e-2}


def test_hyperband_pruner_runs(tmp_path):
    result = tune(_recipe(tmp_path), n_trials=2, out_dir=tmp_path / "t", pruner="hyperband")
    assert result.n_complete + result.n_pruned == 2


@pytest.mark.parametrize(
    ("space", "message"),
    [
        (
            {"optim.lrr": {"type": "float", "low": 0.1, "high": 1.0}},
            "search_space.optim.lrr is not a valid recipe key: unknown key 'optim.lrr'",
        ),
        ({"optim.lr": {"type": "float", "low": 1.0, "high": 0.1}}, "low \\(1.0\\) must be below"),
        ({"optim.lr": {"type": "float", "low": 0.0, "high": 1.0, "log": True}}, "needs low > 0"),
        ({"optim.lr": {"type": "gaussian"}}, "type must be one of"),
        ({"optim.lr": {"type": "float", "low": 0.1, "high": 1, "steps": 2}}, "unknown field"),
        ({"train.max_steps": {"type": "int", "low": 1.5, "high": 4}}, "must be integers"),
        ({"model.hidden": {"type": "categorical", "choices": []}}, "non-empty list"),
        ({"model.hidden": {"type": "categorical", "choices": [[1]]}}, "Optuna stores only"),
        ({"train.max_steps": ["ten"]}, "train.max_steps: expected an integer"),
    ],
)
def test_invalid_search_spaces_name_the_key(tmp_path, space, message):
    raw = tiny_raw(tmp_path)
    with pytest.raises(ConfigError, match=message):
        load_search_space(raw, write_recipe(tmp_path / "space.yaml", space))


def test_missing_search_space_is_explained(tmp_path):
    with pytest.raises(ConfigError, match="no search space"):
        load_search_space(tiny_raw(tmp_path), None)
    assert [
        p.kind
        for p in parse_search_space({"a.b": [1, 2], "c.d": {"type": "int", "low": 1, "high": 3}})
    ] == ["categorical", "int"]


def test_tune_command_line(tmp_path, capsys):
    code = main(
        [
            "tune",
            str(_recipe(tmp_path)),
            "train.max_steps=10",
            "--trials",
            "2",
            "--out-dir",
            str(tmp_path / "cli"),
            "--study",
            "cli_study",
            "--no-plots",
            "--pruner",
            "none",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "study cli_study: 2 trials (2 complete" in out
    assert "best recipe:" in out and (tmp_path / "cli" / "best_recipe.yaml").is_file()
    assert not list((tmp_path / "cli").glob("*.png"))
    with pytest.raises(SystemExit) as exit_:  # refused when the command line is parsed
        main(["tune", str(_recipe(tmp_path)), "--trials", "0"])
    assert exit_.value.code == 2 and "argument --trials: must be a positive integer" in (
        capsys.readouterr().err
    )


def test_a_trial_whose_config_is_refused_fails_with_the_reason(tmp_path):
    space = tmp_path / "space.yaml"
    # the first choice is valid (the space's own check uses it); the second the recipe refuses
    space.write_text(yaml.safe_dump({"search_space": {"train.batch_size": [16, 0]}}))
    result = tune(
        _recipe(tmp_path), n_trials=4, out_dir=tmp_path / "t", search_space=space,
        pruner="none", sampler_seed=0,
    )  # fmt: skip
    study = optuna.load_study(study_name=result.study_name, storage=result.storage)
    refused = [t for t in study.trials if t.params["train.batch_size"] == 0]
    assert refused, "the sampler never drew the refused value"
    for trial in refused:
        assert trial.state == TrialState.FAIL
        assert trial.user_attrs["error"].startswith("ConfigError: train.batch_size")
    assert result.n_running == 0


@pytest.mark.parametrize("study", ["../../x", "a/b", ".hidden", "-x"])
def test_study_names_that_are_not_plain_folder_names_are_refused(tmp_path, study):
    with pytest.raises(ConfigError, match="study name"):
        tune(_recipe(tmp_path), n_trials=1, out_dir=tmp_path / "t", study_name=study)
    assert not (tmp_path.parent / "x").exists()


def test_storage_problems_are_one_line_errors(tmp_path, capsys):
    recipe = str(_recipe(tmp_path))
    cases = {
        "notaurl": "is not a database URL",
        "postgresql://user:secret@:bad/db": "is not a database URL",
        # nothing listens on port 1: connection refused, retried, then reported
        "postgresql://user:secret@127.0.0.1:1/db": "cannot open the Optuna storage",
    }
    for url, message in cases.items():
        assert main(["tune", recipe, "--trials", "1", "--storage", url, "--no-plots"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert "secret" not in err[0]  # the password is never printed
    # a SQLite file in a folder that does not exist yet: the folder is made
    storage = f"sqlite:///{tmp_path / 'new' / 'folder' / 'study.db'}"
    args = ["train.max_steps=10", "--trials", "1", "--storage", storage, "--no-plots"]
    assert main(["tune", recipe, *args, "--out-dir", str(tmp_path / "o")]) == 0
    assert (tmp_path / "new" / "folder" / "study.db").is_file()
