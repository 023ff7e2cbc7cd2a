"""Tokenizers of the LM: byte level by default, Hugging Face `tokenizers` or SentencePiece.

Every tokenizer has the same small protocol:

    tokenizer.vocab_size        int: the ids are 0 .. vocab_size - 1
    tokenizer.encode(text)      str -> list[int]
    tokenizer.decode(ids)       iterable of ints -> str
    tokenizer.eos_id            int or None: the end-of-text id (None: there is none)
    tokenizer.save(directory)   writes `tokenizer_config.json` (+ the tokenizer's model file);
                                byte-level and tokenizer.json folders are also `transformers`
                                tokenizer folders (`hf_tokenizer.py`)

`load_tokenizer(spec)` reads "byte", a `tokenizer.json` (Hugging Face), a `.model`
(SentencePiece) or a directory written by `save`.

Byte level (`ByteTokenizer`): ids 0-255 are the bytes of the UTF-8 encoding; there is no
extra end-of-text id (`eos_id` is None, `vocab_size` is 256), so a byte model's loss in nats
divided by ln 2 is its bits per byte and any byte string is representable. Decoding replaces
byte sequences that are not valid UTF-8 (a generated model may emit them) with U+FFFD.

`tokenizers` and `sentencepiece` are optional (`pip install titans-seq[lm]`); they are
imported only when a tokenizer of that kind is used.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from titans_seq.errors import UserError
from titans_seq.training.checkpoint import atomic_write_bytes, atomic_write_text
from titans_seq.training.model_folder import inside

CONFIG_FILE = "tokenizer_config.json"
HF_FILE = "tokenizer.json"
SP_FILE = "tokenizer.model"
# end-of-text tokens looked for in a Hugging Face tokenizer when none is named
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


class TokenizerError(UserError, ValueError):
    """A tokenizer file is missing, corrupt or of an unknown kind (the message names it)."""


@runtime_checkable
class Tokenizer(Protocol):
    vocab_size: int
    eos_id: int | None

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def save(self, directory: str | Path) -> None: ...


def _write_config(directory: str | Path, config: dict) -> None:
    atomic_write_text(Path(directory) / CONFIG_FILE, json.dumps(config, indent=1) + "\n")


def _check_text(text) -> str:
    if not isinstance(text, str):
        raise TypeError(f"encode expects a str, got {type(text).__name__}")
    return text


def _as_ids(ids, vocab_size: int) -> list[int]:
    if hasattr(ids, "tolist"):  # tensors and arrays
        ids = ids.tolist()
    ids = [int(i) for i in ids]
    for i in ids:
        if not 0 <= i < vocab_size:
            raise ValueError(f"token id {i} is outside the vocabulary [0, {vocab_size})")
    return ids


# --------------------------------------------------------------------------------- bytes
class ByteTokenizer:
    """UTF-8 bytes as ids 0-255; no files, works offline, no end-of-text id."""

    kind = "byte"
    vocab_size = 256
    eos_id = None

    def encode(self, text: str) -> list[int]:
        return list(_check_text(text).encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(_as_ids(ids, 256)).decode("utf-8", errors="replace")

    def save(self, directory: str | Path) -> None:
        # tokenizer_class: `transformers`' AutoTokenizer reads the same file (hf_tokenizer.py)
        _write_config(directory, {"kind": self.kind, "tokenizer_class": "TitansByteTokenizer"})

    def __repr__(self) -> str:
        return "ByteTokenizer()"


# ------------------------------------------------------------------------- Hugging Face
class HFTokenizer:
    """A Hugging Face `tokenizers.Tokenizer` (a `tokenizer.json`).

    `encode` adds no special tokens (no BOS), `decode` keeps them, so that
    `decode(encode(text)) == text` for a byte-level BPE. `eos_token` names the end-of-text
    token; None picks the first of <|endoftext|>, </s>, <eos>, <|end_of_text|> in the
    vocabulary (eos_id None when there is none).
    """

    kind = "huggingface"

    def __init__(self, tokenizer, eos_token: str | None = None):
        self.tokenizer = tokenizer
        self.vocab_size = int(tokenizer.get_vocab_size(with_added_tokens=True))
        if eos_token is not None and tokenizer.token_to_id(eos_token) is None:
            raise ValueError(f"eos_token {eos_token!r} is not in the tokenizer's vocabulary")
        candidates = (eos_token,) if eos_token is not None else EOS_CANDIDATES
        self.eos_token = next((t for t in candidates if tokenizer.token_to_id(t) is not None), None)
        self.eos_id = None if self.eos_token is None else tokenizer.token_to_id(self.eos_token)

    @classmethod
    def from_file(cls, path: str | Path, eos_token: str | None = None) -> HFTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"tokenizer file {path} does not exist")
        tokenizers = _import("tokenizers")
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust side raises a bare Exception on bad JSON
            raise TokenizerError(
                f"tokenizer file {path} is corrupt or not a tokenizer.json: {err}"
            ) from None
        return cls(tokenizer, eos_token=eos_token)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(_check_text(text), add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode(_as_ids(ids, self.vocab_size), skip_special_tokens=False)

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        atomic_write_text(directory / HF_FILE, self.tokenizer.to_str())
        config = {"kind": self.kind, "file": HF_FILE, "eos_token": self.eos_token}
        # what `transformers`' AutoTokenizer reads from the same file and folder
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
        _write_config(directory, config)

    def __repr__(self) -> str:
        return f"HFTokenizer(vocab_size={self.vocab_size}, eos_token={self.eos_token!r})"


# --------------------------------------------------------------------------- SentencePiece
class SentencePieceTokenizer:
    """A SentencePiece model (a `.model` file); `eos_id` is its </s> id (None if absent).

    Round trips are exact only for models trained without whitespace normalization
    (`normalization_rule_name="identity"`, `remove_extra_whitespaces=False`) and with
    `byte_fallback=True` for characters outside the training alphabet.
    """

    kind = "sentencepiece"

    def __init__(self, model_bytes: bytes, source: str = "<bytes>"):
        spm = _import("sentencepiece")
        processor = spm.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(model_bytes)
        except Exception as err:  # RuntimeError/OSError depending on the version
            raise TokenizerError(f"SentencePiece model {source} is corrupt: {err}") from None
        self.processor = processor
        self.model_bytes = bytes(model_bytes)
        self.vocab_size = int(processor.GetPieceSize())
        eos = int(processor.eos_id())
        self.eos_id = eos if eos >= 0 else None

    @classmethod
    def from_file(cls, path: str | Path) -> SentencePieceTokenizer:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"SentencePiece model {path} does not exist")
        return cls(path.read_bytes(), source=str(path))

    def encode(self, text: str) -> list[int]:
        return list(self.processor.EncodeAsIds(_check_text(text)))

    def decode(self, ids: Iterable[int]) -> str:
        return self.processor.DecodeIds(_as_ids(ids, self.vocab_size))

    def save(self, directory: str | Path) -> None:
        directory = Path(directory)
        atomic_write_bytes(directory / SP_FILE, self.model_bytes)
        _write_config(directory, {"kind": self.kind, "file": SP_FILE})

    def __repr__(self) -> str:
        return f"SentencePieceTokenizer(vocab_size={self.vocab_size}, eos_id={self.eos_id})"


# ---------------------------------------------------------------------------------- load
def load_tokenizer(spec) -> ByteTokenizer | HFTokenizer | SentencePieceTokenizer:
    """A tokenizer from `spec`: "byte", a tokenizer.json path, a SentencePiece .model path, a
    directory written by `save` (or holding one of those two files), or a tokenizer object
    (returned as is)."""
    if isinstance(spec, (ByteTokenizer, HFTokenizer, SentencePieceTokenizer)):
        return spec
    if spec is None or (isinstance(spec, str) and spec.lower() == "byte"):
        return ByteTokenizer()
    if not isinstance(spec, (str, Path)):
        if isinstance(spec, Tokenizer):
            return spec
        raise TypeError(f"a tokenizer spec is 'byte' or a path, got {type(spec).__name__}")
    path = Path(spec).expanduser()
    if path.is_dir():
        return _load_directory(path)
    if not path.exists():
        raise FileNotFoundError(
            f"tokenizer {str(spec)!r} is neither 'byte' nor an existing file or directory"
        )
    if path.suffix == ".json":
        return HFTokenizer.from_file(path)
    if path.suffix == ".model":
        return SentencePieceTokenizer.from_file(path)
    raise TokenizerError(
        f"cannot tell the kind of tokenizer file {path}: expected a Hugging Face .json or a "
        "SentencePiece .model"
    )


def tokenizer_files(directory: str | Path) -> list[str]:
    """The files a tokenizer saved in `directory` consists of: its config and the file the
    config names (none for byte level)."""
    directory = Path(directory)
    try:
        config = json.loads((directory / CONFIG_FILE).read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        path = directory / CONFIG_FILE
        raise TokenizerError(f"tokenizer config {path} is unreadable: {err!r}") from None
    named = config.get("file") if isinstance(config, dict) else None
    return [CONFIG_FILE] + ([named] if isinstance(named, str) else [])


def _load_directory(path: Path):
    config_path = path / CONFIG_FILE
    if not config_path.exists():
        if (path / HF_FILE).exists():
            return HFTokenizer.from_file(path / HF_FILE)
        if (path / SP_FILE).exists():
            return SentencePieceTokenizer.from_file(path / SP_FILE)
        raise FileNotFoundError(
            f"directory {path} holds no tokenizer ({CONFIG_FILE}, {HF_FILE} or {SP_FILE})"
        )
    try:
        config = json.loads(config_path.read_text())
        kind = config["kind"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise TokenizerError(f"tokenizer config {config_path} is corrupt: {err!r}") from None
    if kind == ByteTokenizer.kind:
        return ByteTokenizer()
    if kind == HFTokenizer.kind:
        file = inside(path, config.get("file", HF_FILE))
        return HFTokenizer.from_file(file, config.get("eos_token"))
    if kind == SentencePieceTokenizer.kind:
        return SentencePieceTokenizer.from_file(inside(path, config.get("file", SP_FILE)))
    raise TokenizerError(f"tokenizer config {config_path} names an unknown kind {kind!r}")


# --------------------------------------------------------------------------------- train
def _text_lines(files: Sequence[Path]):
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            yield from f


def train_bpe(
    files: str | Path | Sequence[str | Path],
    vocab_size: int,
    out_dir: str | Path | None = None,
    special_tokens: Sequence[str] = ("<|endoftext|>",),
    min_frequency: int = 2,
) -> HFTokenizer:
    """Train a byte-level BPE (GPT-2 style) on local text files (plain or .gz), offline.

    The 256 byte symbols are always in the vocabulary, so any text encodes without unknown
    tokens and decodes back exactly. `special_tokens` take the first ids (the first one is
    the end-of-text token). Saves to `out_dir` (`tokenizer.json` + config) when given.
    """
    tokenizers = _import("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    paths = [Path(files)] if isinstance(files, (str, Path)) else [Path(f) for f in files]
    if not paths:
        raise ValueError("train_bpe needs at least one text file")
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"training text {path} does not exist")
    minimum = 256 + len(special_tokens)
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < minimum:
        raise ValueError(
            f"vocab_size must be an integer >= {minimum} (256 bytes + the special tokens), "
            f"got {vocab_size!r}"
        )
    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_text_lines(paths), trainer=trainer)
    result = HFTokenizer(tokenizer, eos_token=special_tokens[0] if special_tokens else None)
    if out_dir is not None:
        result.save(out_dir)
    return result


def _import(name: str):
    try:
        return __import__(name)
    except ImportError:
        raise ImportError(
            f"this tokenizer needs the {name!r} package: pip install 'titans-seq[lm]'"
        ) from None
