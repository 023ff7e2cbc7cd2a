"""`titans-seq` command line: recipes, train (+ resume), errors as one clear line."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from training_helpers import cli_command, subprocess_env, tiny_raw, write_recipe

from titans_seq.cli import main
from titans_seq.training.logs import read_csv
from titans_seq.training.recipe_files import list_recipes


def test_recipes_lists_builtin_recipes_with_descriptions(capsys):
    assert main(["recipes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list_recipes()
    assert all(len(line.split()) > 1 for line in lines)  # every recipe has a description
    assert main(["recipes", "synthetic/associative_recall_mag"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert shown["model"]["mixer"] == "mag" and shown["task"] == "associative_recall"


def test_train_validates_and_prints_the_resolved_config(capsys, tmp_path):
    assert main(["train", "synthetic/tiny", "optim.lr=1e-3", "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["optim"]["lr"] == 1e-3
    assert main(["train", "synthetic/tiny", "optim.lrr=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("titans-seq train: error: unknown key 'optim.lrr'")
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert "neither an existing file nor a built-in recipe" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([])


def test_train_then_resume_from_the_command_line(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_raw(tmp_path / "run"))
    assert main(["train", str(recipe), "train.max_steps=20"]) == 0
    assert "finished at step 20" in capsys.readouterr().out
    # refuses to start over in a folder that holds a run
    assert main(["train", str(recipe), "train.max_steps=20"]) == 2
    assert "already holds checkpoints" in capsys.readouterr().err
    # extends the run: 20 more steps from the step-20 checkpoint
    with pytest.warns(UserWarning, match="train.max_steps: 20 -> 40"):
        assert main(["train", str(recipe), "--resume"]) == 0
    assert "finished at step 40" in capsys.readouterr().out
    assert [r["step"] for r in read_csv(tmp_path / "run" / "eval_log.csv")] == [10, 20, 30, 40]


def test_shipped_tiny_recipe_trains_end_to_end(tmp_path, capsys):
    """The real associative-recall task, TokenModel + Backbone + the LMM mixer (shortened)."""
    code = main(
        [
            "train",
            "synthetic/tiny",
            f"train.out_dir={tmp_path}/tiny",
            "train.max_steps=4",
            "train.log_every=2",
            "eval.every=2",
            "data.num_val=32",
            "train.progress=false",
        ]
    )
    assert code == 0
    assert "best val accuracy" in capsys.readouterr().out
    rows = read_csv(tmp_path / "tiny" / "eval_log.csv")
    assert [r["step"] for r in rows] == [2, 4] and 0 <= rows[-1]["accuracy"] <= 1
    assert (tmp_path / "tiny" / "learning_curves.png").is_file()
    assert "tokens_per_s" in read_csv(tmp_path / "tiny" / "train_log.csv")[0]


def test_console_entry_point_runs_as_a_module():
    done = subprocess.run(
        cli_command("--version"), capture_output=True, text=True, env=subprocess_env(), timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith("titans-seq ")


@pytest.mark.parametrize(
    ("precision", "error"), [("bf16", None), ("fp16", "fp16 needs a CUDA device")]
)
def test_cpu_precisions_and_deterministic_mode(tmp_path, precision, error, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_raw(tmp_path / "run"))
    args = [
        "train",
        str(recipe),
        f"train.precision={precision}",
        "train.deterministic=true",
        "train.max_steps=10",
    ]
    assert main(args) == (2 if error else 0)
    if error:
        assert error in capsys.readouterr().err
    else:
        assert read_csv(tmp_path / "run" / "eval_log.csv")[0]["loss"] > 0


def test_every_cli_option_has_help_and_shows_its_default():
    import argparse

    from titans_seq.cli import build_parser

    def subcommands(parser, prefix=""):
        """(name, parser) of every command, nested ones (`adapt train`) included."""
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, command in action.choices.items():
                    yield f"{prefix}{name}", command
                    yield from subcommands(command, f"{prefix}{name} ")

    for name, command in subcommands(build_parser()):
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"titans-seq {name} {action.option_strings or action.dest}"
        text = command.format_help()
        for action in command._actions:
            default = action.default
            if action.option_strings and default not in (None, False, argparse.SUPPRESS):
                if "(default" not in (action.help or ""):
                    assert f"(default: {default})" in " ".join(text.split()), (name, action.dest)


@pytest.mark.parametrize(
    "override, message",
    [
        ("optim.lr=nan", "optim.lr must be a number"),
        ("data.seq_len=0", "data.seq_len must be a positive integer"),
        ("model.preset=huge", "model.preset must be one of"),
        ("eval.metric=accuracy", "eval.metric is 'accuracy' but task 'lm' reports only"),
        ("optim.betas=[0.9,1.5]", r"optim.betas\[1\] must be a number in \[0, 1\)"),
    ],
)
def test_print_config_refuses_what_the_run_would_refuse(override, message, capsys):
    assert main(["train", "lm/tiny", override, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


def test_overrides_are_read_anywhere_on_the_line(tmp_path, capsys):
    recipe = write_recipe(tmp_path / "r.yaml", tiny_raw(tmp_path / "run", train={"max_steps": 6}))
    assert main(["train", str(recipe), "--print-config", "train.max_steps=7"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["train"]["max_steps"] == 7
    assert main(["train", str(recipe)]) == 0
    # after --resume, whose optional value is a checkpoint: the override is not taken for one
    assert main(["train", str(recipe), "--resume", "train.max_steps=12"]) == 0
    assert "finished at step 12" in capsys.readouterr().out


def test_a_prompt_that_is_not_utf8_is_named(tmp_path, capsys):
    import os

    from titans_seq.domains.lm import TitansLM

    TitansLM.from_preset("tiny").save(tmp_path / "lm")
    prompt = os.fsdecode(b"\xffabc")  # what Python makes of such command-line bytes
    code = main(["generate", "--model", str(tmp_path / "lm"), "--prompt", prompt])
    assert code == 2
    assert "--prompt is not valid UTF-8 (byte 0xff at position 0)" in capsys.readouterr().err
