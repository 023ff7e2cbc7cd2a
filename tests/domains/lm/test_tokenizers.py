"""Tokenizers: byte level, trained byte-level BPE, SentencePiece; save/load; errors."""

import pytest
import torch

from titans_seq.domains.lm import ByteTokenizer, TitansLM, load_lm_and_tokenizer, load_tokenizer
from titans_seq.domains.lm import train_bpe as train_bpe_fn
from titans_seq.domains.lm.tokenizers import (
    HFTokenizer,
    SentencePieceTokenizer,
    TokenizerError,
)

TEXTS = ["Hello, world!\n", "héllo wörld — ünïcode", "数学 and 🚀 emoji", "  two  spaces\tand tab"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 200 KB of the mirrored tinyshakespeare, read through the data layer."""
    from titans_seq.data.text_sources import load_text

    text = load_text("tinyshakespeare", download=False)
    path = tmp_path_factory.mktemp("corpus") / "shakespeare.txt"
    path.write_text(text[:200_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe(corpus, tmp_path_factory):
    pytest.importorskip("tokenizers")
    return train_bpe_fn(corpus, 400, tmp_path_factory.mktemp("bpe"))


@pytest.fixture(scope="module")
def sentencepiece_model(corpus, tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    prefix = tmp_path_factory.mktemp("spm") / "shakespeare"
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,  # characters outside the corpus become bytes, not <unk>
        normalization_rule_name="identity",  # exact round trips
        remove_extra_whitespaces=False,
        character_coverage=1.0,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


def test_byte_tokenizer():
    tok = load_tokenizer("byte")
    assert isinstance(tok, ByteTokenizer) and tok.vocab_size == 256 and tok.eos_id is None
    for text in TEXTS:
        ids = tok.encode(text)
        assert ids == list(text.encode("utf-8"))
        assert tok.decode(ids) == text
    assert tok.decode(torch.tensor([104, 105])) == "hi"
    assert tok.decode([0xE6, 0x95]) == "\ufffd"  # a cut multi-byte character
    with pytest.raises(ValueError, match="token id 256 is outside"):
        tok.decode([256])
    with pytest.raises(TypeError, match="encode expects a str"):
        tok.encode(b"bytes")


def test_train_bpe(bpe, corpus):
    assert isinstance(bpe, HFTokenizer)
    assert 256 < bpe.vocab_size <= 400
    assert bpe.eos_id == 0 and bpe.eos_token == "<|endoftext|>"
    sample = corpus.read_text(encoding="utf-8")[:5000]
    ids = bpe.encode(sample)
    assert bpe.decode(ids) == sample
    assert len(ids) < 0.75 * len(sample.encode())  # merges learned from the corpus
    for text in TEXTS:  # byte level: text unseen in training still round-trips
        assert bpe.decode(bpe.encode(text)) == text
    assert max(bpe.encode("".join(TEXTS))) < bpe.vocab_size


def test_train_bpe_errors(corpus, tmp_path):
    pytest.importorskip("tokenizers")
    with pytest.raises(FileNotFoundError, match="training text"):
        train_bpe_fn(tmp_path / "none.txt", 300)
    with pytest.raises(ValueError, match="vocab_size must be an integer >= 257"):
        train_bpe_fn(corpus, 100)


def test_sentencepiece(sentencepiece_model):
    tok = load_tokenizer(sentencepiece_model)
    assert isinstance(tok, SentencePieceTokenizer)
    assert tok.vocab_size == 400 and tok.eos_id is not None
    for text in TEXTS + ["To be, or not to be: that is the question."]:
        assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("kind", ["byte", "bpe", "sentencepiece"])
def test_save_and_load(kind, bpe, sentencepiece_model, tmp_path):
    tok = {"byte": ByteTokenizer(), "bpe": bpe, "sentencepiece": None}[kind]
    if kind == "sentencepiece":
        tok = load_tokenizer(sentencepiece_model)
    tok.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert type(loaded) is type(tok)
    assert (loaded.vocab_size, loaded.eos_id) == (tok.vocab_size, tok.eos_id)
    for text in TEXTS:
        assert loaded.encode(text) == tok.encode(text)

    # with a model: the directory holds both, and they load together
    model = TitansLM.from_preset("tiny", mixer="swa", vocab_size=tok.vocab_size)
    model.save(tmp_path / "model", tokenizer=tok)
    model2, tok2 = load_lm_and_tokenizer(tmp_path / "model")
    assert type(tok2) is type(tok) and tok2.encode(TEXTS[1]) == tok.encode(TEXTS[1])
    assert model2.vocab_size == tok.vocab_size


def test_model_rejects_a_larger_tokenizer(bpe, tmp_path):
    model = TitansLM.from_preset("tiny", mixer="swa", vocab_size=256)
    with pytest.raises(ValueError, match="the tokenizer has .* ids but the model only"):
        model.save(tmp_path, tokenizer=bpe)


def test_load_errors(tmp_path, sentencepiece_model):
    with pytest.raises(FileNotFoundError, match="neither 'byte' nor an existing"):
        load_tokenizer(tmp_path / "missing.json")
    with pytest.raises(FileNotFoundError, match="holds no tokenizer"):
        load_tokenizer(tmp_path)
    bad_json = tmp_path / "tokenizer.json"
    bad_json.write_text('{"version": "1.0", "model": ')
    with pytest.raises(TokenizerError, match="tokenizer.json is corrupt"):
        load_tokenizer(bad_json)
    bad_model = tmp_path / "bad.model"
    bad_model.write_bytes(sentencepiece_model.read_bytes()[:100])
    with pytest.raises(TokenizerError, match="bad.model is corrupt"):
        load_tokenizer(bad_model)
    other = tmp_path / "vocab.txt"
    other.write_text("a\nb\n")
    with pytest.raises(TokenizerError, match="cannot tell the kind"):
        load_tokenizer(other)
    saved = tmp_path / "saved"
    ByteTokenizer().save(saved)
    (saved / "tokenizer_config.json").write_text("{broken")
    with pytest.raises(TokenizerError, match="tokenizer_config.json is corrupt"):
        load_tokenizer(saved)
    (saved / "tokenizer_config.json").write_text('{"kind": "wordpiece"}')
    with pytest.raises(TokenizerError, match="unknown kind 'wordpiece'"):
        load_tokenizer(saved)
    with pytest.raises(TypeError, match="tokenizer spec"):
        load_tokenizer(42)
