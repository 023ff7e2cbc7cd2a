"""The `lm` training task: model building, loss, bits-per-byte, perplexity, export."""

from __future__ import annotations

import math

import pytest
import torch

from titans_seq.domains.lm import TitansLM
from titans_seq.domains.lm.data import read_documents
from titans_seq.domains.lm.data.prepare import prepare_documents
from titans_seq.domains.lm.model import load_lm_and_tokenizer
from titans_seq.training import load_config, train
from titans_seq.training.checkpoint import load_weights
from titans_seq.training.config import ConfigError
from titans_seq.training.tasks import get_task


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 40 KB of tinyshakespeare as a local text file."""
    path = tmp_path_factory.mktemp("text") / "shakespeare.txt"
    path.write_text(read_documents("tinyshakespeare")[0][:40_000])
    return path


def _raw(out_dir, train_source, **data):
    return {
        "name": "lm_test",
        "task": "lm",
        "model": {"preset": "tiny", "mixer": "attention"},
        "data": {"train": str(train_source), "seq_len": 32, **data},
        "optim": {"lr": 3.0e-3, "warmup_steps": 2},
        "train": {
            "max_steps": 6,
            "batch_size": 4,
            "log_every": 3,
            "checkpoint_every": 3,
            "out_dir": str(out_dir),
            "progress": False,
            "plot": False,
            "tensorboard": False,
        },
        "eval": {"every": 3, "batch_size": 8, "max_batches": 2, "metric": "bpb"},
    }


def test_model_follows_the_config(corpus):
    task = get_task("lm")
    cfg = load_config(_raw("unused", corpus))
    model = task.build_model(cfg)
    assert isinstance(model, TitansLM) and model.vocab_size == 256
    assert (model.dim, model.depth) == (32, 2)  # the tiny preset
    cfg = load_config(_raw("unused", corpus), ["model.dim=48", "model.mixer=swa"])
    cfg.model.mixer_options = {"window": 8}
    model = task.build_model(cfg)
    assert model.dim == 48 and model.layer_mixers == ["swa", "swa"]
    assert task.flops_per_token(model, cfg) == model.flops_per_token(32)
    with pytest.raises(ConfigError, match="data.seq_len"):
        load_config(_raw("unused", corpus), ["data.seq_len=abc"])


def test_bpb_is_nats_over_ln2_per_byte_and_ppl_is_exp_loss(corpus):
    task = get_task("lm")
    cfg = load_config(_raw("unused", corpus))
    model = task.build_model(cfg).eval()
    _, val = task.build_datasets(cfg)
    batch = val.get_batch(range(3))
    with torch.no_grad():
        metrics = task.evaluate_batch(model, batch)
        logits, _ = model(batch["tokens"][:, :-1])
    nats = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch["tokens"][:, 1:].flatten(), reduction="sum"
    )
    loss_sum, count = metrics["loss"]
    assert count == 3 * 32 and loss_sum == pytest.approx(float(nats), rel=1e-6)
    bits, nbytes = metrics["bpb"]
    assert nbytes == 3 * 32  # byte level: one byte per predicted token, exactly
    assert bits == pytest.approx(float(nats) / math.log(2), rel=1e-6)
    final = task.finalize_metrics({"loss": 1.5, "bpb": 2.0})
    assert final["ppl"] == pytest.approx(math.exp(1.5))


def test_bpb_uses_the_byte_count_of_prepared_shards(tmp_path, monkeypatch):
    """Two bytes per token (pairs of characters): bpb is half the bits per token."""

    class PairTokenizer:
        vocab_size = 300
        eos_id = None

        def encode(self, text):
            return [ord(text[i]) % 256 for i in range(0, len(text), 2)]

        def save(self, directory):
            pass

    text = "abcdefghij" * 200
    out = prepare_documents(
        {"train": [text], "val": [text[:400]]}, PairTokenizer(), tmp_path / "p", progress=False
    )
    import titans_seq.domains.lm.tasks.lm as lm_task

    cfg = load_config(_raw("unused", out))
    monkeypatch.setattr(lm_task, "resolve_tokenizer", lambda data: PairTokenizer())
    task = get_task("lm")
    model = task.build_model(cfg).eval()
    _, val = task.build_datasets(cfg)
    batch = val.get_batch([0, 1])
    with torch.no_grad():
        metrics = task.evaluate_batch(model, batch)
    bits, nbytes = metrics["bpb"]
    assert nbytes == 2 * 32 * 2.0
    assert bits / nbytes == pytest.approx(metrics["loss"][0] / math.log(2) / (2 * 64))


def test_training_writes_the_best_model_loadable_with_titans_lm(tmp_path, corpus):
    result = train(load_config(_raw(tmp_path / "run", corpus)))
    assert result.step == 6 and set(result.last_eval) == {"loss", "bpb", "ppl"}
    assert result.last_eval["bpb"] == pytest.approx(result.last_eval["loss"] / math.log(2))
    assert result.last_eval["ppl"] == pytest.approx(math.exp(result.last_eval["loss"]))
    model = TitansLM.load(tmp_path / "run" / "model")
    best = load_weights(tmp_path / "run" / "best_model.safetensors")
    for key, value in model.state_dict().items():
        assert torch.equal(value, best[key]), key
    model, tokenizer = load_lm_and_tokenizer(tmp_path / "run" / "model")
    assert tokenizer.vocab_size == 256
    generated = model.generate(torch.tensor(tokenizer.encode("ROMEO:")), 5)
    assert generated.shape[-1] == 6 + 5


def test_training_on_prepared_shards_with_a_separate_val_source(tmp_path, corpus):
    out = prepare_documents(
        {"train": [corpus.read_text()]}, "byte", tmp_path / "prep", progress=False
    )
    val = tmp_path / "val.txt"
    val.write_text("A separate validation text, long enough for two windows. " * 4)
    raw = _raw(tmp_path / "run", out, val=str(val))
    raw["train"]["max_steps"] = 3
    result = train(load_config(raw))
    assert result.step == 3 and result.last_eval["bpb"] > 0
    task = get_task("lm")
    _, val_set = task.build_datasets(load_config(raw))
    assert len(val_set) == (len(val.read_text()) - 1) // 32


def test_windows_with_several_documents_score_each_document_alone():
    """The task's loss over windows that hold document boundaries equals the loss of each
    document piece run alone; without the boundaries it would differ (the state crosses)."""
    from titans_seq.domains.lm.tasks.lm import window_logits

    torch.manual_seed(0)
    model = TitansLM(40, dim=16, depth=2, heads=2, mixer="lmm", mixer_options={"chunk_size": 4})
    model = model.double()
    inputs = torch.randint(0, 40, (2, 12))
    doc_starts = torch.zeros(2, 12, dtype=torch.bool)
    doc_starts[0, 5] = doc_starts[1, 3] = doc_starts[1, 9] = True
    logits = window_logits(model, inputs, doc_starts)
    pieces = [(0, 0, 5), (0, 5, 12), (1, 0, 3), (1, 3, 9), (1, 9, 12)]
    for row, a, b in pieces:
        alone, _ = model(inputs[row : row + 1, a:b])
        torch.testing.assert_close(logits[row : row + 1, a:b], alone, rtol=1e-10, atol=1e-10)
    crossing, _ = model(inputs)
    assert not torch.allclose(crossing[0, 5:], logits[0, 5:])
    torch.testing.assert_close(window_logits(model, inputs, None), crossing)
