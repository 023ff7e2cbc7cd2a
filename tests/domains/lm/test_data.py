"""LM data: text sources, the train/val split, prepared shards, crops and windows."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from titans_seq.domains.lm.data import (
    RandomCrops,
    SequentialWindows,
    TokenSplit,
    encode_documents,
    hf_documents,
    load_prepared,
    load_splits,
    read_documents,
    split_documents_tail,
    text_files,
    token_dtype,
)
from titans_seq.domains.lm.data.prepare import prepare_documents, prepare_text
from titans_seq.domains.lm.tokenizers import ByteTokenizer


class WordTokenizer:
    """A toy non-byte tokenizer: one id per character class, with an EOS id; 70000 ids so
    that shards need uint32."""

    vocab_size = 70000
    eos_id = 69999

    def encode(self, text):
        return [ord(c) % 1000 + 60000 for c in text]

    def decode(self, ids):
        return ""

    def save(self, directory):
        raise AssertionError("not called in these tests")


def test_sources_files_folders_globs_and_registered(tmp_path):
    (tmp_path / "a.txt").write_text("alpha")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_text("beta")
    (tmp_path / "skip.csv").write_text("x")
    assert read_documents(tmp_path / "a.txt") == ["alpha"]
    assert read_documents(tmp_path) == ["alpha", "beta"]  # folder: *.txt, recursive, sorted
    assert [p.name for p in text_files(str(tmp_path / "**" / "*.txt"))] == ["a.txt", "b.txt"]
    docs = read_documents("tinyshakespeare")
    assert len(docs) == 1 and docs[0].startswith("First Citizen:")
    with pytest.raises(FileNotFoundError, match="not a registered corpus"):
        read_documents(str(tmp_path / "missing.txt"))
    with pytest.raises(FileNotFoundError, match="matches no file"):
        read_documents(str(tmp_path / "*.md"))


def test_val_split_is_the_end_of_the_corpus_without_overlap():
    docs = ["aaaa", "bbbbbb", "cccccccccc"]  # 20 bytes
    head, tail = split_documents_tail(docs, 0.25)
    assert "".join(head) + "".join(tail) == "".join(docs)
    assert tail == ["ccccc"] and head == ["aaaa", "bbbbbb", "ccccc"]
    head, tail = split_documents_tail(docs, 0.6)  # 12 bytes: one whole doc + part of another
    assert tail == ["bb", "cccccccccc"]
    # a cut never splits a multi-byte character
    head, tail = split_documents_tail(["ab\u00e9\u00e9"], 0.5)
    assert "".join(head) + "".join(tail) == "ab\u00e9\u00e9"
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents_tail(docs, 1.0)


def test_token_dtype_and_eos_join():
    assert token_dtype(256) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32
    tokens, nbytes, ndocs = encode_documents(["ab", "c"], WordTokenizer())
    assert tokens.dtype == np.uint32 and ndocs == 2 and nbytes == 3
    assert tokens.tolist() == [60097, 60098, 69999, 60099]  # EOS between documents only


def test_prepare_writes_shards_and_meta_that_load_back(tmp_path):
    text = "hello world\n" * 50  # 600 bytes
    out = prepare_documents(
        {"train": [text, "second doc"], "val": ["validation"]},
        "byte",
        tmp_path / "prep",
        shard_tokens=256,
        progress=False,
    )
    meta = json.loads((out / "meta.json").read_text())
    assert meta["tokenizer"] == "byte" and meta["dtype"] == "uint16"
    assert meta["vocab_size"] == 256 and meta["eos_id"] is None
    train = meta["splits"]["train"]
    assert train["tokens"] == train["bytes"] == 610 and train["documents"] == 2
    # a document longer than a shard fills one shard; the next document starts a new one
    assert [s["tokens"] for s in train["shards"]] == [600, 10]
    assert not list(tmp_path.glob(".prep*"))  # no temporary folder left behind
    _, splits = load_prepared(out)
    assert (
        bytes(np.concatenate(splits["train"].arrays).astype(np.uint8))
        == (text + "second doc").encode()
    )
    assert splits["val"].num_bytes == 10
    with pytest.raises(FileExistsError):
        prepare_documents({"train": ["x"]}, "byte", out, progress=False)
    prepare_documents({"train": ["xyz"]}, "byte", out, progress=False, overwrite=True)
    assert load_prepared(out)[1]["train"].num_tokens == 3


def test_prepare_uses_uint32_for_a_large_vocabulary_and_counts_bytes(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(WordTokenizer, "save", lambda self, d: saved.append(d), raising=True)
    out = prepare_documents(
        {"train": ["ab", "cd"]}, WordTokenizer(), tmp_path / "w", progress=False
    )
    meta, splits = load_prepared(out)
    assert meta["dtype"] == "uint32" and meta["tokenizer"] == "tokenizer" and saved
    assert splits["train"].arrays[0].tolist() == [60097, 60098, 69999, 60099, 60100]
    assert splits["train"].num_bytes == 4  # the EOS id carries no bytes


def test_prepared_shard_of_the_wrong_size_is_rejected(tmp_path):
    out = prepare_documents({"train": ["abcdef"]}, "byte", tmp_path / "p", progress=False)
    (out / "train_000000.bin").write_bytes(b"\x00\x00")
    with pytest.raises(ValueError, match="wrong size"):
        load_prepared(out)


def test_prepare_text_splits_the_end_of_tinyshakespeare(tmp_path):
    out = prepare_text("tinyshakespeare", "byte", tmp_path / "ts", progress=False)
    _, splits = load_prepared(out)
    whole = read_documents("tinyshakespeare")[0].encode()
    train = bytes(splits["train"].arrays[0].astype(np.uint8))
    val = bytes(splits["val"].arrays[0].astype(np.uint8))
    assert train + val == whole and len(val) == round(0.1 * len(whole))


def test_random_crops_are_seeded_reproducible_and_in_range():
    split = TokenSplit(
        [np.arange(100, dtype=np.uint16), np.arange(1000, 1050, dtype=np.uint16)], 150
    )
    crops = RandomCrops(split, seq_len=8, seed=3)
    assert len(crops) == (100 - 8) + (50 - 8)  # every valid offset once per epoch
    batch = crops.get_batch([0, 91, 92, len(crops) - 1])["tokens"]
    assert batch.shape == (4, 9)
    assert batch[1].tolist() == list(range(91, 100))  # last crop of the first shard
    assert batch[2].tolist() == list(range(1000, 1009))  # crops never straddle shards
    # many offsets: strided with seeded jitter, same for the same seed, differ otherwise
    big = TokenSplit([np.arange(5000, dtype=np.uint16)], 5000)
    a = RandomCrops(big, 16, seed=1, max_positions=100)
    b = RandomCrops(big, 16, seed=1, max_positions=100)
    c = RandomCrops(big, 16, seed=2, max_positions=100)
    idx = list(range(len(a)))
    assert np.array_equal(a.offsets(idx), b.offsets(idx))
    assert not np.array_equal(a.offsets(idx), c.offsets(idx))
    offsets = a.offsets(idx)
    assert offsets.min() >= 0 and offsets.max() <= 5000 - 16 - 1
    assert np.all(offsets // a.stride == np.arange(len(a)))  # one crop per stride
    rows = a.get_batch(idx)["tokens"]
    assert np.array_equal(rows[:, 0].numpy(), offsets)
    with pytest.raises(ValueError, match="no window"):
        RandomCrops(TokenSplit([np.arange(5, dtype=np.uint16)], 5), 8)


def test_sequential_windows_score_every_token_once():
    split = TokenSplit([np.arange(21, dtype=np.uint16), np.arange(100, 111, dtype=np.uint16)], 64)
    windows = SequentialWindows(split, seq_len=5)
    assert len(windows) == 4 + 2
    batch = windows.get_batch(range(len(windows)))
    targets = batch["tokens"][:, 1:].flatten().tolist()
    assert targets == list(range(1, 21)) + list(range(101, 111))  # no overlap, no gap
    # bytes per window: seq_len * bytes/token of the split (64 bytes / 32 tokens = 2)
    assert batch["bytes"].tolist() == [10.0] * 6


def test_load_splits_text_and_prepared_sources(tmp_path):
    tok = ByteTokenizer()
    corpus = tmp_path / "c.txt"
    corpus.write_text("0123456789" * 10)
    train, val = load_splits(str(corpus), None, 0.2, tok)
    assert (train.num_tokens, val.num_tokens) == (80, 20) and val.num_bytes == 20
    other = tmp_path / "v.txt"
    other.write_text("zz")
    train, val = load_splits(str(corpus), str(other), 0.2, tok)
    assert train.num_tokens == 100 and val.num_tokens == 2
    # a prepared folder without a val split: the END of its token stream
    out = prepare_documents(
        {"train": ["a" * 90 + "b" * 10]}, "byte", tmp_path / "p", progress=False
    )
    train, val = load_splits(str(out), None, 0.1, tok)
    assert bytes(val.arrays[0].astype(np.uint8)) == b"b" * 10 and train.num_tokens == 90
    with pytest.raises(ValueError, match="prepare-text"):
        load_splits("hf:HuggingFaceFW/fineweb-edu", None, 0.1, tok)


def test_hf_streaming_feeds_prepare(tmp_path, monkeypatch):
    """The `datasets` code path, with an in-memory stream in place of the network."""
    rows = [{"text": f"document {i}", "id": i} for i in range(5)]

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, config, split, streaming):
            assert (name, config, split, streaming) == ("org/corpus", "sample", "train", True)
            return iter(rows)

    monkeypatch.setitem(sys.modules, "datasets", FakeDatasets)
    monkeypatch.delenv("TITANS_SEQ_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert list(hf_documents("org/corpus", "sample")) == [r["text"] for r in rows]
    out = prepare_text(
        "hf:org/corpus:sample", "byte", tmp_path / "hf", val_documents=2, progress=False
    )
    meta, splits = load_prepared(out)
    assert meta["splits"]["val"]["documents"] == 2 and meta["splits"]["train"]["documents"] == 3
    assert bytes(splits["val"].arrays[0].astype(np.uint8)) == b"document 0document 1"
    with pytest.raises(KeyError, match="no field 'body'"):
        list(hf_documents("org/corpus", "sample", text_field="body"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(RuntimeError, match="offline"):
        list(hf_documents("org/corpus", "sample"))


def test_hf_streaming_fails_clearly_without_datasets_or_network(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import raises ImportError
    with pytest.raises(RuntimeError, match="pip install datasets"):
        list(hf_documents("HuggingFaceFW/fineweb-edu"))

    class Unreachable:
        @staticmethod
        def load_dataset(*args, **kwargs):
            raise ConnectionError("no route to host")

    monkeypatch.setitem(sys.modules, "datasets", Unreachable)
    monkeypatch.delenv("TITANS_SEQ_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(RuntimeError, match="Is this machine online"):
        list(hf_documents("HuggingFaceFW/fineweb-edu"))


def test_prepare_text_command(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("some text for the command line\n" * 20)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "titans_seq.cli",
            "prepare-text",
            str(text),
            "--tokenizer",
            "byte",
            "--out",
            str(tmp_path / "out"),
            "--val-fraction",
            "0.25",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "train: 465 tokens" in done.stdout and "val: 155 tokens" in done.stdout
    meta, _ = load_prepared(tmp_path / "out")
    assert meta["splits"]["val"]["bytes"] == 155


def test_document_starts_from_text_prepared_shards_and_wikitext(tmp_path):
    from titans_seq.data.text_sources import load_text
    from titans_seq.domains.lm.data import encode_split

    # byte level (no EOS): a document starts at its first byte
    split = encode_split(["ab", "", "cde", "f"], ByteTokenizer())
    assert split.starts[0].tolist() == [2, 5]
    # with an EOS id: at its separator, which then begins the document
    split = encode_split(["ab", "cde"], WordTokenizer())
    assert split.arrays[0][2] == WordTokenizer.eos_id and split.starts[0].tolist() == [2]
    # prepared shards keep them (two shards: a shard's first document is implicit)
    out = prepare_documents(
        {"train": ["aaaa", "bb", "cccccc", "d"]}, "byte", tmp_path / "p", shard_tokens=7,
        progress=False,
    )  # fmt: skip
    _, splits = load_prepared(out)
    assert [a.size for a in splits["train"].arrays] == [6, 7]
    assert [s.tolist() for s in splits["train"].starts] == [[4], [6]]
    # the tail of a split keeps the starts that fall in it, shifted
    head, tail = splits["train"].split_tail(0.5)  # cut at token 7: one into the second shard
    assert [s.tolist() for s in head.starts] == [[4], []]
    assert [s.tolist() for s in tail.starts] == [[5]]
    # WikiText's registered corpora are read as their articles
    docs = read_documents("wikitext2-valid")
    assert (
        len(docs) == 60
        and docs[1].startswith(" = ")
        and "".join(docs) == load_text("wikitext2-valid")
    )


def test_windows_mark_where_documents_start():
    split = TokenSplit([np.arange(30, dtype=np.uint16)], 30, [np.asarray([7, 12, 20])])
    crops = RandomCrops(split, seq_len=8, seed=0)
    batch = crops.get_batch([5, 0])
    # offset 5: inputs 5..12, documents start at 7 (position 2) and 12 (position 7)
    assert torch_list(batch["doc_starts"][0]) == [2, 7]
    assert torch_list(batch["doc_starts"][1]) == [7]
    assert "doc_starts" not in RandomCrops(split, 8, documents=False).get_batch([0])
    windows = SequentialWindows(split, seq_len=10)
    assert [torch_list(r) for r in windows.get_batch([0, 1])["doc_starts"]] == [[7], [2]]


def torch_list(row):
    return row.nonzero().flatten().tolist()
