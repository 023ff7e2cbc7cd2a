"""`titans-seq adapt train` and `adapt mix` end to end on a tiny forecasting run."""

import pytest

from titans_seq.adapt import read_expert
from titans_seq.cli import main


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("adapt_cli")
    fast = [
        "train.max_steps=8",
        "train.checkpoint_every=8",
        "eval.every=4",
        "eval.max_batches=2",
        "optim.warmup_steps=2",
    ]
    assert main(["train", "forecasting/tiny", f"train.out_dir={out / 'base'}", *fast]) == 0
    return out, fast


def test_adapt_train_writes_an_expert_and_mix_combines_two(base_run, capsys):
    out, fast = base_run
    experts = []
    for name, dataset in (("e1", "ETTh1"), ("e2", "ETTh2")):
        args = ["adapt", "train", "forecasting/tiny", f"train.out_dir={out / name}",
                f"data.dataset={dataset}", *fast, "--base", str(out / "base"),
                "--task-name", dataset]  # fmt: skip
        assert main(args) == 0
        expert = read_expert(out / name / "expert.safetensors")
        assert expert.task == dataset
        experts.append(out / name / "expert.safetensors")
    printed = capsys.readouterr().out
    assert "trained parameters" in printed and "expert:" in printed

    mixed = out / "mixed.safetensors"
    args = ["adapt", "mix", "forecasting/tiny", "data.dataset=ETTm2", "eval.max_batches=2",
            "--base", str(out / "base"), "--experts", *map(str, experts), "--shots", "16",
            "--iterations", "2", "--population", "4", "--out", str(mixed)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "mixture weights" in printed and '"mixture"' in printed and '"base"' in printed
    assert read_expert(mixed).z.keys() == read_expert(experts[0]).z.keys()


def test_adapt_refuses_a_recipe_of_another_task(base_run, capsys):
    out, _ = base_run
    code = main(["adapt", "train", "synthetic/associative_recall_lmm", "--base", str(out / "base")])
    assert code != 0
    assert "task" in capsys.readouterr().err


def test_adapt_mix_dispatches_with_a_classifier_of_the_experts_tasks(base_run, capsys):
    out, fast = base_run
    experts = [out / name / "expert.safetensors" for name in ("e1", "e2")]
    if not all(e.is_file() for e in experts):
        pytest.skip("needs the experts of the test above")
    args = ["adapt", "mix", "forecasting/tiny", "data.dataset=ETTh2", "eval.max_batches=2",
            "--base", str(out / "base"), "--experts", *map(str, experts), "--shots", "32",
            "--strategy", "classifier", "--expert-recipes", "forecasting/tiny",
            "forecasting/tiny"]  # fmt: skip
    # both experts' recipes are ETTh1 here: the classifier still fits and dispatches
    assert main(args) == 0
    assert '"two-pass dispatch (classifier)"' in capsys.readouterr().out
    svf_classifier = [a if a != "classifier" else "svf-classifier" for a in args]
    assert main(svf_classifier) == 0
    assert '"two-pass dispatch (svf-classifier)"' in capsys.readouterr().out
    assert main(args[:-1]) != 0  # one recipe for two experts
    assert "one --expert-recipes entry per expert" in capsys.readouterr().err
