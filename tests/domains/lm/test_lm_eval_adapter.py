"""The lm-evaluation-harness adapter: scoring against the model, tasks run offline end to end."""

import gzip
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("lm_eval")

from titans_seq.domains.lm.evals.harness import TitansEvalLM  # noqa: E402
from titans_seq.domains.lm.model import TitansLM  # noqa: E402
from titans_seq.domains.lm.tokenizers import ByteTokenizer  # noqa: E402


def request(*args):
    return SimpleNamespace(args=args)


@pytest.fixture(scope="module")
def adapter():
    torch.manual_seed(0)
    model = TitansLM(
        vocab_size=256,
        dim=32,
        depth=2,
        heads=2,
        mixer="mag",
        mixer_options={"window": 8, "chunk_size": 4},
    )
    return TitansEvalLM.from_model(model, ByteTokenizer(), max_length=2048)


def manual_logprob(model, ids, start):
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
    logp = torch.log_softmax(logits[0, :-1].float(), -1)
    target = torch.tensor(ids[1:])
    return float(logp[torch.arange(len(ids) - 1), target][start - 1 :].sum())


def test_loglikelihood_scores_the_continuation_given_the_context(adapter):
    ctx, cont = "To be, or not", " to be"
    ((score, greedy),) = adapter.loglikelihood([request(ctx, cont)])
    ids = list(ctx.encode()) + list(cont.encode())
    assert score == pytest.approx(manual_logprob(adapter.model, ids, len(ctx)), rel=1e-5)
    assert isinstance(greedy, bool)


@pytest.mark.parametrize("max_length", [2048, 5])
def test_options_sharing_a_context_read_it_once_and_score_as_if_alone(adapter, max_length):
    """Multiple-choice requests reuse the context's state: every option must score exactly
    as a request of its own would (the cached state is not changed by reading an option)."""
    lm = TitansEvalLM.from_model(adapter.model, adapter.tokenizer, max_length=max_length)
    ctx = "Shall I compare thee to a summer's"
    options = [" day?", " night", " x", " day? Thou art more lovely"]
    together = lm.loglikelihood([request(ctx, o) for o in options] + [request("Thou", " art")])
    for option, (score, greedy) in zip(options, together):
        ids = list(ctx.encode()) + list(option.encode())
        assert score == pytest.approx(manual_logprob(adapter.model, ids, len(ctx)), rel=1e-5)
        assert (score, greedy) == pytest.approx(lm.loglikelihood([request(ctx, option)])[0])
    ids = list(b"Thou art")
    assert together[-1][0] == pytest.approx(manual_logprob(adapter.model, ids, 4), rel=1e-5)


def test_rolling_loglikelihood_streams_long_documents_with_the_state(adapter):
    text = "All the world's a stage, and all the men and women merely players. " * 3
    (whole,) = adapter.loglikelihood_rolling([request(text)])
    short = TitansEvalLM.from_model(adapter.model, adapter.tokenizer, max_length=16)
    (streamed,) = short.loglikelihood_rolling([request(text)])
    assert streamed == pytest.approx(whole, rel=1e-4)
    ids = [10, *text.encode()]  # a byte model reads a document as if after a line break
    assert whole == pytest.approx(manual_logprob(adapter.model, ids, 1), rel=1e-5)


def test_generate_until_stops_at_the_stop_string(adapter):
    (free,) = adapter.generate_until([request("abc", {"until": [], "max_gen_toks": 12})])
    stop = free[3:5]
    (cut,) = adapter.generate_until([request("abc", {"until": [stop], "max_gen_toks": 12})])
    assert free.startswith(cut) and stop not in cut and len(cut) <= 3 + free[3:].find(stop)


def write_tasks(directory, text_file):
    """Three harness tasks over local JSON lines: rolling perplexity, multiple choice and
    generation, built from the mirrored text."""
    lines = [ln for ln in open(text_file, encoding="utf-8").read().split("\n") if len(ln) > 30][:6]
    docs = [{"text": ln} for ln in lines]
    choices = [
        {"context": ln[:20], "choices": [ln[20:30], "zzzzzzzzzz"], "label": 0} for ln in lines
    ]
    gens = [{"context": ln[:20], "target": ln[20:24]} for ln in lines]
    for name, rows in (("docs", docs), ("choices", choices), ("gens", gens)):
        with open(directory / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    common = "dataset_path: json\ntest_split: train\n"
    (directory / "rolling.yaml").write_text(
        "task: titans_rolling\n"
        + common
        + f"dataset_kwargs:\n  data_files: {directory / 'docs.jsonl'}\n"
        + "output_type: loglikelihood_rolling\ndoc_to_text: ''\ndoc_to_target: '{{text}}'\n"
        + "metric_list:\n  - metric: word_perplexity\n  - metric: bits_per_byte\n"
    )
    (directory / "choice.yaml").write_text(
        "task: titans_choice\n"
        + common
        + f"dataset_kwargs:\n  data_files: {directory / 'choices.jsonl'}\n"
        + "output_type: multiple_choice\ndoc_to_text: '{{context}}'\n"
        + "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{label}}'\n"
        + "metric_list:\n  - metric: acc\n"
    )
    (directory / "gen.yaml").write_text(
        "task: titans_gen\n"
        + common
        + f"dataset_kwargs:\n  data_files: {directory / 'gens.jsonl'}\n"
        + "output_type: generate_until\ndoc_to_text: '{{context}}'\ndoc_to_target: '{{target}}'\n"
        + "generation_kwargs:\n  until: ['\\n']\n  max_gen_toks: 4\n  do_sample: false\n"
        + "metric_list:\n  - metric: exact_match\n"
    )


@pytest.fixture
def offline(monkeypatch):
    for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(key, "1")


def test_harness_tasks_run_offline_through_simple_evaluate(adapter, tmp_path, offline):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    write_tasks(tmp_path, tiny_text(tmp_path))
    results = simple_evaluate(
        model=adapter,
        tasks=["titans_rolling", "titans_choice", "titans_gen"],
        task_manager=TaskManager(include_path=str(tmp_path)),
    )["results"]
    assert results["titans_rolling"]["bits_per_byte,none"] > 0
    assert 0 <= results["titans_choice"]["acc,none"] <= 1
    assert 0 <= results["titans_gen"]["exact_match,none"] <= 1


def tiny_text(directory):
    """The first lines of the mirrored tinyshakespeare (a stand-in text without the mirror)."""
    path = directory / "text.txt"
    mirror = os.environ.get("TITANS_SEQ_DATA", "")
    source = os.path.join(mirror, "text", "tinyshakespeare.txt.gz")
    if mirror and os.path.exists(source):
        with gzip.open(source, "rt", encoding="utf-8") as f:
            path.write_text(f.read(4000))
    else:
        path.write_text(
            "\n".join(f"line {i} of a small corpus with enough letters" for i in range(20))
        )
    return path


def test_cli_runs_a_task_on_a_saved_model(adapter, tmp_path, offline):
    adapter.model.save(tmp_path / "model")
    write_tasks(tmp_path, tiny_text(tmp_path))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "titans_seq.cli",
            "lm-eval",
            "--model_args",
            f"pretrained={tmp_path / 'model'}",
            "--device",
            "cpu",
            "--tasks",
            "titans_choice",
            "--include_path",
            str(tmp_path),
            "--output_path",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "titans_choice" in result.stdout


def test_cli_help_says_which_model_this_command_runs():
    result = subprocess.run(
        [sys.executable, "-m", "titans_seq.cli", "lm-eval", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    preface = result.stdout.splitlines()[0]
    assert "--model titans-seq" in preface and "default: hf" in preface
    assert "--tasks" in result.stdout  # the harness's own help follows
