"""Passkey retrieval: the generator's layout, the streamed evaluation against its full-forward
reference, the `lm_passkey` task and the `titans-seq passkey` command."""

import json
import re

import pytest
import torch
from torch import nn

from titans_seq.cli import main
from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.evals.passkey import (
    IGNORE_INDEX,
    NEEDLE,
    NOISE,
    QUESTION,
    PasskeyRetrieval,
    evaluate_passkey,
    greedy_answers,
    parse_depths,
    parse_lengths,
    teacher_forced_predictions,
)

LONGEST_SENTENCE = max(len(s) + 2 for s in NOISE.split(". "))


@pytest.fixture(autouse=True)
def _one_thread():
    """The models here are tiny: one thread is fastest, and on a machine shared with other
    jobs several OpenMP threads can spin-wait each other (seconds instead of milliseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def text_of(tokens: torch.Tensor) -> str:
    return bytes(tokens.tolist()).decode("utf-8")


# ------------------------------------------------------------------------------ generator
def test_examples_are_deterministic_and_independent_of_batching():
    task = PasskeyRetrieval(digits=5, seed=7)
    a, b = task.example(300, 11), PasskeyRetrieval(digits=5, seed=7).example(300, 11)
    assert torch.equal(a.tokens, b.tokens) and a.passkey == b.passkey
    batch = task.batch(300, [11, 3, 11])
    assert torch.equal(batch.inputs[0], a.tokens) and torch.equal(batch.inputs[2], a.tokens)
    assert torch.equal(batch.inputs[1], task.example(300, 3).tokens)
    assert torch.equal(batch.targets[0], a.targets)
    # another index, seed or length gives another example
    keys = {task.example(300, i).passkey for i in range(20)}
    assert len(keys) > 15
    assert PasskeyRetrieval(seed=8).example(300, 11).passkey != a.passkey
    # fixing the depth keeps the passkey of the index
    assert task.example(300, 11, depth=0.5).passkey == a.passkey


@pytest.mark.parametrize("digits", [1, 5, 7])
def test_exact_lengths_and_answer_targets(digits):
    task = PasskeyRetrieval(digits=digits, seed=1)
    assert task.min_length == len(NEEDLE.format(key="0" * digits)) + len(QUESTION) + digits
    for length in (task.min_length, task.min_length + 1, 257, 1000):
        for index in range(3):
            ex = task.example(length, index)
            assert ex.tokens.shape == ex.targets.shape == (length,)
            assert ex.tokens.dtype == torch.int64 and int(ex.tokens.max()) < 256
            assert ex.answer_start == length - digits
            assert re.fullmatch(r"\d" * digits, ex.passkey)
            text = text_of(ex.tokens)
            assert text.endswith(QUESTION + ex.passkey)
            # only the D positions predicting the answer digits are scored
            scored = (ex.targets != IGNORE_INDEX).nonzero().flatten().tolist()
            assert scored == list(range(length - digits - 1, length - 1))
            assert torch.equal(ex.targets[scored], ex.tokens[length - digits :])
            assert bytes(ex.targets[scored].tolist()).decode() == ex.passkey


def test_needle_sits_at_the_requested_depth():
    task = PasskeyRetrieval(seed=3)
    length = 1000
    hay_len = task.haystack_length(length)
    for depth in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        ex = task.example(length, 5, depth=depth)
        needle = NEEDLE.format(key=ex.passkey)
        text = text_of(ex.tokens)
        assert text[ex.needle_start : ex.needle_start + len(needle)] == needle
        assert abs(ex.needle_start - depth * hay_len) <= LONGEST_SENTENCE
        assert ex.depth == pytest.approx(ex.needle_start / hay_len)
        # the needle starts a sentence (or the sequence)
        assert ex.needle_start == 0 or text[ex.needle_start - 2 : ex.needle_start] == ". "
    assert task.example(length, 5, depth=0).needle_start == 0
    last = task.example(length, 5, depth=1)
    needle = NEEDLE.format(key=last.passkey)
    assert text_of(last.tokens)[: last.answer_start].endswith(needle + QUESTION)
    # without a requested depth, depths spread over the whole context
    depths = [task.example(length, i).depth for i in range(200)]
    assert min(depths) < 0.1 and max(depths) > 0.9
    assert 0.35 < sum(depths) / len(depths) < 0.65


def test_haystacks_end_with_varying_sentences():
    task = PasskeyRetrieval(seed=0)
    endings = set()
    for index in range(40):
        ex = task.example(300, index)
        text, needle = text_of(ex.tokens), NEEDLE.format(key=ex.passkey)
        hay = text[: ex.needle_start] + text[ex.needle_start + len(needle) : ex.answer_start]
        endings.add(hay.removesuffix(QUESTION)[-8:])
    assert len(endings) == len(NOISE.split(". ")) - 1  # all 5 sentences end a haystack


def test_haystack_is_noise_and_digits_never_leak():
    task = PasskeyRetrieval(digits=6, seed=2)
    for index, length in enumerate((task.min_length, 200, 777, 2048)):
        ex = task.example(length, index)
        text = text_of(ex.tokens)
        needle = NEEDLE.format(key=ex.passkey)
        before = text[: ex.needle_start]
        after = text[ex.needle_start + len(needle) : ex.answer_start - len(QUESTION)]
        assert text[ex.answer_start - len(QUESTION) : ex.answer_start] == QUESTION
        haystack = before + after
        assert len(haystack) == task.haystack_length(length)
        # the noise text repeated, read from inside, ending with a whole sentence
        assert haystack in NOISE * (length // len(NOISE) + 3)
        assert haystack == "" or haystack.endswith(". ")
        digit_positions = [i for i, ch in enumerate(text) if ch.isdigit()]
        needle_digits = [
            i for i in range(ex.needle_start, ex.needle_start + len(needle)) if text[i].isdigit()
        ]
        answer = list(range(ex.answer_start, length))
        assert digit_positions == needle_digits + answer
        assert len(needle_digits) == 2 * task.digits


def test_bad_arguments_raise_clear_errors():
    task = PasskeyRetrieval()
    with pytest.raises(ValueError, match="too short"):
        task.example(task.min_length - 1, 0)
    with pytest.raises(ValueError, match="depth"):
        task.example(500, 0, depth=1.5)
    with pytest.raises(ValueError, match="digits"):
        PasskeyRetrieval(digits=0)
    with pytest.raises(ValueError, match="at least one sequence length"):
        parse_lengths("")
    with pytest.raises(ValueError, match="at least one sequence length"):
        parse_lengths([])
    with pytest.raises(ValueError, match="integers"):
        parse_lengths("128,abc")
    with pytest.raises(ValueError, match="positive"):
        parse_lengths([128, -4])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        parse_depths("0,2")
    assert parse_lengths("128, 256") == [128, 256] and parse_depths("0,.5,1") == [0, 0.5, 1]
    model = PasskeyOracle()
    with pytest.raises(ValueError, match="too short"):
        evaluate_passkey(model, [1024, 64], 2)
    with pytest.raises(ValueError, match="at least one sequence length"):
        evaluate_passkey(model, [], 2)


# ----------------------------------------------------------------------------- evaluation
class PasskeyOracle(nn.Module):
    """A streaming stand-in model that reads the passkey from the needle and recites it after
    the question (one-hot logits); `wrong` spoils that digit. Its state is the history."""

    def __init__(self, wrong: int | None = None):
        super().__init__()
        self.wrong = wrong
        self.anchor = nn.Parameter(torch.zeros(()))  # gives the evaluation a device

    def forward(self, tokens, state=None):
        history = tokens if state is None else torch.cat((state, tokens), dim=1)
        batch, new = tokens.shape
        first = history.shape[1] - new
        logits = torch.zeros(batch, new, 256)
        for b in range(batch):
            text = text_of(history[b])
            found = re.search(r"The pass key is (\d+)\.", text)
            for t in range(new):
                seen = text[: first + t + 1]
                asked = seen.rfind(QUESTION)
                if found is None or asked < 0:
                    continue
                produced = len(seen) - asked - len(QUESTION)
                if produced < len(found.group(1)):
                    digit = int(found.group(1)[produced])
                    if produced == self.wrong:
                        digit = (digit + 1) % 10
                    logits[b, t, ord(str(digit))] = 1.0
        return logits, history


def test_evaluation_counts_all_digits_right():
    lengths, depths = [120, 333], [0.0, 0.5, 1.0]
    right = evaluate_passkey(
        PasskeyOracle(), lengths, 3, depths=depths, chunk_len=50, digits=4, batch_size=2
    )
    assert right.accuracy == {120: 1.0, 333: 1.0}
    assert right.digit_accuracy == {120: 1.0, 333: 1.0}
    assert right.depth_accuracy == {n: dict.fromkeys(depths, 1.0) for n in lengths}
    assert right.counts == {120: 9, 333: 9}
    wrong = evaluate_passkey(PasskeyOracle(wrong=2), lengths, 3, chunk_len=7, digits=4, seed=5)
    assert wrong.accuracy == {120: 0.0, 333: 0.0}
    assert wrong.digit_accuracy == {120: 0.75, 333: 0.75}
    assert wrong.depth_accuracy == {}
    table = right.table()
    assert "| 333 | 9 | 1.000 | 1.000 | 1.000 | 1.000 | 1.000 |" in table
    assert json.loads(json.dumps(right.to_dict()))["depth_accuracy"]["120"]["0.5"] == 1.0


@pytest.mark.parametrize("mixer", ["mag", "mac", "attention"])
def test_streamed_greedy_decoding_equals_the_full_forward_reference(mixer):
    options = {"window": 8, "segment_size": 8, "chunk_size": 4, "num_persistent": 2}
    options = {k: v for k, v in options.items() if k in _accepted(mixer)}
    torch.manual_seed(1)
    model = TitansLM.from_preset("tiny", mixer=mixer, mixer_options=options).double().eval()
    task = PasskeyRetrieval(digits=3, seed=4)
    batch = task.batch(101, range(2))
    prompts = batch.inputs[:, : batch.answer_start]
    one_shot = greedy_answers(model, prompts, 3)
    # odd piece lengths: pieces end inside memory chunks, attention windows and MAC segments
    for chunk_len in (1, 13, 41) if mixer == "mag" else (13, 41):
        assert torch.equal(greedy_answers(model, prompts, 3, chunk_len=chunk_len), one_shot)
    # the reference: one forward pass over prompt + the decoded answer predicts that answer
    reference = teacher_forced_predictions(model, torch.cat((prompts, one_shot), dim=1), 3)
    assert torch.equal(reference, one_shot)
    # on the true sequences, "all digits right" agrees with the reference
    truth = teacher_forced_predictions(model, batch.inputs, 3)
    expected = (truth == batch.inputs[:, batch.answer_start :]).all(dim=1).float().mean()
    result = evaluate_passkey(model, [101], 2, seed=4, chunk_len=13, digits=3)
    assert result.accuracy[101] == float(expected)


def _accepted(mixer):
    import inspect

    from titans_seq.mixers.registry import mixer_class

    return inspect.signature(mixer_class(mixer).__init__).parameters


# ---------------------------------------------------------------------- task and command
TINY = [
    "train.max_steps=2",
    "train.batch_size=4",
    "train.log_every=1",
    "train.checkpoint_every=2",
    "train.progress=false",
    "train.tensorboard=false",
    "train.plot=false",
    "eval.every=2",
    "eval.batch_size=4",
    "data.num_train=64",
    "data.num_val=4",
    "data.train_length=100",
    "data.digits=3",
]


def test_task_loss_and_metrics_match_the_masked_reference():
    import torch.nn.functional as F

    from titans_seq.training.config import load_config
    from titans_seq.training.tasks import get_task

    cfg = load_config("lm/passkey_tiny", ["data.train_length=104", "data.digits=4"])
    task = get_task("lm_passkey")
    model = task.build_model(cfg)
    train, val = task.build_datasets(cfg)
    assert len(train) == cfg.data.num_train and len(val) == cfg.data.num_val
    batch = train.get_batch([5, 0, 17])
    assert batch["inputs"].shape == (3, 104) and batch["digits"] == 4
    first = PasskeyRetrieval(4, cfg.data.seed).example(104, 0)
    assert torch.equal(batch["inputs"][1], first.tokens)
    loss, _ = task.loss(model, batch)
    logits, _ = model(batch["inputs"])
    reference = F.cross_entropy(
        logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE_INDEX
    )
    torch.testing.assert_close(loss, reference)
    metrics = task.evaluate_batch(model, batch)
    right = (logits.argmax(-1) == batch["targets"]).sum(dim=1)
    assert metrics["accuracy"] == (float((right == 4).sum()), 3.0)
    assert metrics["digit_accuracy"] == (float(right.sum()), 12.0)
    assert metrics["loss"][1] == 12.0
    torch.testing.assert_close(torch.tensor(metrics["loss"][0] / 12), reference)
    assert task.count_tokens(batch) == 3 * 104


def test_task_trains_and_the_command_evaluates_the_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "lm/passkey_tiny", f"train.out_dir={run}", *TINY]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["step"] == 2 and summary["metric"] == "loss"
    assert {"loss", "accuracy", "digit_accuracy"} <= set(summary["last_eval"])
    assert 0 <= summary["last_eval"]["accuracy"] <= 1
    capsys.readouterr()

    out = tmp_path / "passkey.json"
    args = ["passkey", "--model", str(run), "--lengths", "100,200", "--samples", "1"]
    code = main([*args, "--depths", "0,1", "--chunk-len", "60", "--out", str(out), "--quiet"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "3 digits" in printed  # the run's data.digits
    assert re.search(r"\| 200 \| 2 \| \d\.\d{3} \| \d\.\d{3} \| \d\.\d{3} \| \d\.\d{3} \|", printed)
    saved = json.loads(out.read_text())
    assert saved["lengths"] == [100, 200] and saved["digits"] == 3
    assert set(saved["depth_accuracy"]["200"]) == {"0", "1"} and saved["counts"]["100"] == 2
    # the newest checkpoint instead of the best weights
    assert main([*args, "--weights", "last", "--quiet"]) == 0


def test_command_on_a_saved_model_and_its_errors(tmp_path, capsys):
    model_dir = tmp_path / "model"
    TitansLM.from_preset("tiny", mixer="swa", mixer_options={"window": 8}).save(model_dir)
    args = ["passkey", "--model", str(model_dir), "--samples", "1", "--quiet"]
    assert main([*args, "--lengths", "110", "--chunk-len", "0"]) == 0
    assert "| 110 | 1 |" in capsys.readouterr().out
    assert main([*args, "--lengths", "64"]) == 2
    assert "too short" in capsys.readouterr().err
    assert main([*args, "--lengths", ","]) == 2
    assert "at least one sequence length" in capsys.readouterr().err
    assert main([*args, "--lengths", "128", "--depths", "0,3"]) == 2
    assert "[0, 1]" in capsys.readouterr().err
    assert main(["passkey", "--model", str(tmp_path / "nothing"), "--lengths", "128"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_recipes_keep_attention_spans_below_the_training_length():
    from titans_seq.training.config import load_config

    for name in ("mac", "mag", "mal", "lmm", "swa", "attention", "tiny"):
        cfg = load_config(f"lm/passkey_{name}")
        assert cfg.task == "lm_passkey"
        span = cfg.model.mixer_options.get("window") or cfg.model.mixer_options.get("segment_size")
        if name in ("mac", "mag", "mal", "swa"):
            assert span <= cfg.data.train_length // 8
        if name != "tiny":
            assert cfg.data.train_length == 1024
