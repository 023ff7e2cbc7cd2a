"""The synthetic long-context suite: exact lengths, determinism, depths, answers present in
the prompt, clear errors; the evaluation pipeline end to end with an oracle model."""

import json
import re

import pytest
import torch

from titans_seq.cli import main
from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.evals.suite import SuiteResult, evaluate_suite
from titans_seq.domains.lm.evals.suite_examples import TASKS, make_example

ALL = list(TASKS)


@pytest.mark.parametrize("task", ALL)
@pytest.mark.parametrize("haystack", ["noise", "wikitext2-test"])
def test_examples_have_exact_length_and_are_deterministic(task, haystack):
    for length, depth in ((700, 0.0), (1500, 0.5), (3000, 1.0), (2000, None)):
        e = make_example(task, length, 7, depth, seed=3, haystack=haystack)
        assert len(e.prompt) == length
        assert e == make_example(task, length, 7, depth, seed=3, haystack=haystack)
        if depth is not None:
            assert abs(e.depth - depth) < 0.1  # the nearest sentence boundary
        text = e.prompt.decode("utf-8", errors="replace")
        for answer in e.answers:
            assert answer in text  # what is asked is in the prompt
    assert make_example(task, 1500, 7, 0.5, seed=4, haystack=haystack) != make_example(
        task, 1500, 7, 0.5, seed=3, haystack=haystack
    )


def test_examples_drawn_without_a_depth_reach_both_ends():
    # training draws its depths: the key statement must sometimes open the haystack and
    # sometimes end it right before the question, which a uniform draw alone almost never does
    depths = [make_example("babi_qa1", 2048, i, None, seed=5).depth for i in range(300)]
    at_start, at_end = depths.count(0.0), depths.count(1.0)
    assert 10 <= at_start <= 60 and 10 <= at_end <= 60, (at_start, at_end)
    inner = [d for d in depths if 0.0 < d < 1.0]
    assert min(inner) < 0.2 and max(inner) > 0.8  # the rest still spread over the haystack
    e = make_example("babi_qa1", 2048, depths.index(1.0), None, seed=5)
    assert e.prompt.endswith(b"\n" + b"Where is " + e.prompt.rsplit(b"Where is ", 1)[1])
    assert e.prompt.rsplit(b"\n", 1)[0].endswith(b". ")  # the last fact ends the haystack


def test_answers_follow_the_statements():
    e = make_example("niah_multikey", 2000, 1, 0.3)
    text = e.prompt.decode()
    word = re.search(r"magic number for (\w+)\?", text).group(1)
    assert re.search(rf"numbers for {word} is: (\d+)\.", text).group(1) == e.answer
    e = make_example("babi_qa3", 2000, 2, 0.6)
    text = e.prompt.decode()
    obj, second = re.search(r"Where was the (\w+) before the (\w+)\?", text).groups()
    holder = re.search(rf"(\w+) picked up the {obj}\.", text).group(1)
    places = re.findall(rf"{holder} \w+ to the (\w+)\.", text)
    assert places[-1] == second and places[-2] == e.answer
    e = make_example("variable_tracking", 2000, 0, 0.5)
    value = re.search(r"assigned the value (\d+)", e.prompt.decode()).group(1)
    assert f"VAR {e.answers[0]} = {value}." in e.prompt.decode()


def test_scores_and_errors():
    e = make_example("niah_multivalue", 1000, 0)
    assert e.score(", ".join(e.answers[:2])) == 0.5 and e.recall
    p = make_example("niah_passkey", 1000, 0)
    assert p.score(p.answer + "xyz") == 1.0 and p.score("0" + p.answer) == 0.0
    with pytest.raises(ValueError, match="too short"):
        make_example("variable_tracking", 100, 0)
    with pytest.raises(ValueError, match="unknown long-context task"):
        make_example("niah_nope", 1000, 0)
    with pytest.raises(ValueError, match="depth"):
        make_example("niah_passkey", 1000, 0, depth=1.5)


class PasskeyOracle(torch.nn.Module):
    """Reads the stream through its state and predicts the passkey's next digit (or a
    wrong one): the whole decoding pipeline must then score 1 (or 0)."""

    def __init__(self, wrong=False, wrong_at=None):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.wrong, self.wrong_at = wrong, wrong_at  # every digit wrong, or the one at wrong_at

    def forward(self, tokens, state=None):
        state = [bytearray() for _ in range(tokens.shape[0])] if state is None else state
        logits = torch.zeros(*tokens.shape, 256)
        for row, ids in enumerate(tokens.tolist()):
            state[row] += bytes(ids)
            text = state[row].decode(errors="replace")
            found = re.search(r"pass key is (\d+)\.", text)
            if found is None:  # the needle is not read yet
                continue
            key, asked = found.group(1), "The pass key is "
            done = len(text) - text.rindex(asked) - len(asked)  # digits already produced
            digit = int(key[done]) if done < len(key) else 0
            shift = self.wrong or done == self.wrong_at
            logits[row, -1, ord(str((digit + shift) % 10))] = 1.0
        return logits, state


def test_a_length_too_short_names_what_was_asked():
    with pytest.raises(ValueError, match="length 100 is too short for variable_tracking"):
        evaluate_suite(PasskeyOracle(), [100], ["variable_tracking"], samples=1)


def test_evaluation_pipeline_with_an_oracle():
    good = evaluate_suite(PasskeyOracle(), [600, 900], ["niah_passkey"], depths=[0, 1],
                          samples=3, chunk_len=256, batch_size=2)  # fmt: skip
    assert all(v == 1.0 for per in good.scores["niah_passkey"].values() for v in per.values())
    bad = evaluate_suite(PasskeyOracle(wrong=True), [600], ["niah_passkey"], samples=2)
    assert bad.mean("niah_passkey", 600) == 0.0
    assert "| niah_passkey | 1.00 | 1.00 |" in good.table()
    assert good.mean("niah_passkey", 900, "characters") == 1.0
    assert bad.mean("niah_passkey", 600, "characters") == 0.0


def test_characters_right_give_partial_credit_where_exact_match_gives_none():
    one_off = evaluate_suite(PasskeyOracle(wrong_at=0), [600], ["niah_passkey"], depths=[0, 1],
                             samples=2)  # fmt: skip
    digits = len(make_example("niah_passkey", 600, 0).answer)
    assert one_off.mean("niah_passkey", 600) == 0.0
    assert one_off.mean("niah_passkey", 600, "characters") == pytest.approx(1 - 1 / digits)
    assert f"| niah_passkey | {1 - 1 / digits:.2f} |" in one_off.table("characters")
    payload = one_off.to_dict()
    assert payload["characters"]["niah_passkey"]["600"]["0"] == pytest.approx(1 - 1 / digits)
    back = SuiteResult.from_dict(json.loads(json.dumps(payload)))  # as stored on disk
    assert back == one_off


def test_an_examples_characters_right_by_position():
    uuid = make_example("niah_uuid", 1000, 0)
    n = len(uuid.answer)
    assert uuid.characters(uuid.answer) == 1.0 and uuid.characters("") == 0.0
    last_wrong = uuid.answer[:-1] + ("0" if uuid.answer[-1] != "0" else "1")
    assert uuid.score(last_wrong) == 0.0 and uuid.characters(last_wrong) == (n - 1) / n
    shifted = " " + uuid.answer  # right characters at the wrong positions do not count
    assert uuid.characters(shifted) < 0.5
    recall = make_example("niah_multivalue", 2000, 0)
    half = " ".join(recall.answers[:2])
    assert recall.characters(half) == recall.score(half) == 0.5


def test_reading_only_the_last_bytes_hides_an_early_needle():
    """`context`: the prompt's last bytes only, from a fresh state; a key statement at the
    start is then out of reach and one at the end is still found."""
    full = evaluate_suite(PasskeyOracle(), [900], ["niah_passkey"], depths=[0, 1], samples=3,
                          chunk_len=128)  # fmt: skip
    last = evaluate_suite(PasskeyOracle(), [900], ["niah_passkey"], depths=[0, 1], samples=3,
                          chunk_len=128, context=200)  # fmt: skip
    assert full.scores["niah_passkey"][900] == {0.0: 1.0, 1.0: 1.0}
    assert last.scores["niah_passkey"][900] == {0.0: 0.0, 1.0: 1.0}
    assert last.to_dict()["context"] == 200 and full.to_dict()["context"] is None
    # a context longer than the prompt reads all of it
    longer = evaluate_suite(PasskeyOracle(), [900], ["niah_passkey"], depths=[0], samples=2,
                            context=5000)  # fmt: skip
    assert longer.scores["niah_passkey"][900] == {0.0: 1.0}
    with pytest.raises(ValueError, match="context"):
        evaluate_suite(PasskeyOracle(), [900], ["niah_passkey"], samples=1, context=0)


class EvenKeyOracle(PasskeyOracle):
    """Right only on passkeys whose first digit is even, so about half the examples score."""

    def forward(self, tokens, state=None):
        logits, state = super().forward(tokens, state)
        for row in range(tokens.shape[0]):
            found = re.search(r"pass key is (\d+)\.", state[row].decode(errors="replace"))
            if found is not None and int(found.group(1)[0]) % 2:
                logits[row, -1] = logits[row, -1].roll(1)  # one digit off
        return logits, state


def test_the_passkey_task_is_the_passkey_evaluation():
    from titans_seq.domains.lm.evals.passkey import PasskeyRetrieval, evaluate_passkey
    from titans_seq.domains.lm.evals.suite_examples import suite_example

    task = PasskeyRetrieval(seed=2)
    for length, index, depth in ((200, 0, 0.0), (333, 4, 0.5), (512, 9, None)):
        e = suite_example("passkey", length, index, depth, seed=2)
        prompts, answers = task.prompts_and_answers(length, [index], depth)
        assert e.prompt == bytes(prompts[0].tolist())
        assert e.answer.encode() == bytes(answers[0].tolist())
        assert len(e.prompt) + len(e.answer) == length
    lengths, depths = [300, 450], [0.0, 0.5, 1.0]
    suite = evaluate_suite(EvenKeyOracle(), lengths, ["passkey"], depths=depths, samples=6,
                           seed=2, chunk_len=128, batch_size=4)  # fmt: skip
    passkey = evaluate_passkey(EvenKeyOracle(), lengths, 6, depths, seed=2, chunk_len=128)
    for length in lengths:
        for depth in depths:
            assert suite.scores["passkey"][length][depth] == passkey.depth_accuracy[length][depth]
    assert 0.0 < passkey.accuracy[300] < 1.0  # the oracle is right on some examples only
    with pytest.raises(ValueError, match="noise haystack"):
        evaluate_suite(PasskeyOracle(), [300], ["passkey"], haystack="tinyshakespeare")


def test_cli_runs_a_model_and_writes_the_heat_map(tmp_path, capsys):
    torch.manual_seed(0)
    TitansLM(256, dim=16, depth=1, heads=2, mixer="lmm").save(tmp_path / "m", tokenizer="byte")
    code = main(["long-context", "--model", str(tmp_path / "m"), "--lengths", "600,800",
                 "--tasks", "niah_passkey,babi_qa1", "--depths", "0,1", "--samples", "2",
                 "--out", str(tmp_path / "out"), "--quiet", "--device", "cpu"])  # fmt: skip
    assert code == 0
    assert "| babi_qa1 |" in capsys.readouterr().out
    payload = json.loads((tmp_path / "out" / "suite.json").read_text())
    assert set(payload["scores"]) == set(payload["characters"]) == {"niah_passkey", "babi_qa1"}
    assert payload["context"] is None
    assert (tmp_path / "out" / "suite.png").stat().st_size > 1000
    code = main(["long-context", "--model", str(tmp_path / "m"), "--lengths", "600",
                 "--tasks", "niah_passkey", "--depths", "0", "--samples", "1", "--context",
                 "256", "--out", str(tmp_path / "last"), "--quiet", "--device", "cpu"])  # fmt: skip
    assert code == 0
    assert "last 256 bytes only" in capsys.readouterr().out
    assert json.loads((tmp_path / "last" / "suite.json").read_text())["context"] == 256


def test_same_questions_at_every_length():
    for task in ALL:
        answers = {make_example(task, n, 5).answers for n in (800, 1600, 4000)}
        assert len(answers) == 1


def test_suite_task_batches_and_a_short_training_run(tmp_path):
    from titans_seq.domains.lm.evals.passkey import IGNORE_INDEX
    from titans_seq.domains.lm.tasks.suite import SuiteDataConfig, SuiteDataset
    from titans_seq.training import load_config, train

    data = SuiteDataConfig(train_length=400, tasks=["niah_number", "babi_qa2"])
    batch = SuiteDataset(data, 0, 100).get_batch(range(6))
    assert batch["inputs"].shape == batch["targets"].shape == (6, 400)
    for tokens, targets in zip(batch["inputs"], batch["targets"]):
        scored = (targets != IGNORE_INDEX).nonzero().flatten()
        answer = bytes(tokens[scored + 1].tolist()).decode()
        assert scored[-1] == 398 and answer.isalnum()  # the answer ends the sequence
        assert bytes(tokens[: scored[0] + 1].tolist()).endswith(b": ")
    with pytest.raises(ValueError, match="data.tasks"):
        SuiteDataConfig(tasks=["nope"])
    mixed = SuiteDataset(SuiteDataConfig(train_length=300, tasks=["passkey", "babi_qa1"]), 0, 9)
    assert mixed.get_batch(range(8))["inputs"].shape == (8, 300)
    raw = {
        "name": "suite_test", "task": "lm_suite",
        "model": {"preset": "tiny", "mixer": "lmm", "mixer_options": {"chunk_size": 8}},
        "data": {"train_length": 256, "num_val": 8, "tasks": ["niah_passkey", "babi_qa1"]},
        "optim": {"lr": 3.0e-3, "warmup_steps": 1},
        "train": {"max_steps": 4, "batch_size": 4, "log_every": 2, "checkpoint_every": 4,
                  "out_dir": str(tmp_path / "run"), "progress": False, "plot": False,
                  "tensorboard": False, "device": "cpu", "precision": "fp32"},
        "eval": {"every": 2, "batch_size": 8},
    }  # fmt: skip
    result = train(load_config(raw))
    assert result.step == 4 and [h["step"] for h in result.history] == [2, 4]
    for h in result.history:
        assert 0.0 <= h["accuracy"] <= h["byte_accuracy"] <= 1.0 and h["loss"] > 0


@pytest.mark.parametrize("task", ["babilong_qa1", "babilong_qa2", "babilong_qa4", "babilong_qa5"])
def test_babilong_examples_hide_a_story_in_order(task):
    from titans_seq.domains.lm.evals.suite_examples import statements, suite_example

    for length, depth in ((4000, 0.0), (4000, 0.5), (8000, 1.0)):
        e = suite_example(task, length, 3, depth, seed=1, haystack="wikitext2-test")
        assert len(e.prompt) + len(e.answer.encode()) == length
        spec = statements(task, 3, 1, "test", lambda s: True)
        text = e.prompt.decode("utf-8", errors="replace")
        cursor = 0
        for fact in spec.statements:  # every fact, in the story's order
            cursor = text.index(fact, cursor) + len(fact)
        assert e.answer == spec.answer and text.endswith(spec.question)
        assert abs(e.depth - depth) < 0.1
    # the same question at every length long enough for every story
    assert suite_example(task, 3000, 5).answer == suite_example(task, 9000, 5).answer


def test_babilong_splits_and_short_lengths():
    from titans_seq.data.babi import load_babi
    from titans_seq.domains.lm.evals.suite_examples import statements, suite_example

    for split in ("train", "valid", "test"):
        stories = {tuple(f"{f} " for f in q.facts) for q in load_babi(1, split)}
        drawn = [statements("babilong_qa1", i, 0, split).statements for i in range(50)]
        assert all(facts in stories for facts in drawn)
    assert statements("babilong_qa1", 0, 0, "train") != statements("babilong_qa1", 0, 1, "train")
    # at a length below most qa2 stories, only stories that fit are drawn
    for i in range(20):
        e = suite_example("babilong_qa2", 256, i, seed=2, split="train")
        assert len(e.prompt) + len(e.answer.encode()) == 256
    with pytest.raises(ValueError, match="no babilong_qa3 question of the 'train' split fits"):
        suite_example("babilong_qa3", 150, 0, split="train")
    for task in ("babilong_qa1", "niah_passkey", "passkey"):  # every task names a bad split
        with pytest.raises(ValueError, match="split must be one of"):
            suite_example(task, 1000, 0, split="dev")
    from titans_seq.domains.lm.tasks.suite import SuiteDataConfig, SuiteDataset

    with pytest.raises(ValueError, match="split must be one of"):
        SuiteDataset(SuiteDataConfig(tasks=["babilong_qa1"]), 0, 8, "dev")
