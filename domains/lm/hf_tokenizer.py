"""The LM's tokenizers as `transformers` tokenizers, for `AutoTokenizer` and `pipeline`.

    from titans_seq.domains.lm.hf_tokenizer import TitansByteTokenizer, to_transformers
    tok = TitansByteTokenizer()                 # ids 0-255: the UTF-8 bytes, as ByteTokenizer
    tok = to_transformers(load_tokenizer(x))    # byte -> TitansByteTokenizer, tokenizer.json
                                                # -> PreTrainedTokenizerFast (same ids, EOS)
    tok.save_pretrained("titans-hf")            # AutoTokenizer.from_pretrained("titans-hf")

A folder written by `save_lm` (or `ByteTokenizer.save`) is also a `transformers` tokenizer
folder: its `tokenizer_config.json` names the class (`tokenizer_class`) beside the
library's own `kind`, so `AutoTokenizer.from_pretrained(folder)` works once this module is
imported (`titans_seq.domains.lm.hf` imports it and registers the class).

Byte level has 256 ids and no end-of-text or padding id (a byte model's vocabulary is its
bytes): `eos_token_id` and `pad_token_id` are None, generation runs to `max_new_tokens`, and
a batch of prompts must have one length, as `TitansForCausalLM` requires anyway.
"""

from __future__ import annotations

try:
    from transformers import PreTrainedTokenizer, PreTrainedTokenizerFast
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Hugging Face tokenizer needs transformers: pip install 'titans-seq[hf]'"
    ) from error

from .tokenizers import ByteTokenizer, HFTokenizer, TokenizerError


def _byte_symbols() -> list[str]:
    """One printable character per byte (GPT-2's table): tokens are strings in
    `transformers`, and a raw control or space character would not survive as one."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    symbols = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


SYMBOLS = _byte_symbols()
IDS = {symbol: i for i, symbol in enumerate(SYMBOLS)}


class TitansByteTokenizer(PreTrainedTokenizer):
    """UTF-8 bytes as ids 0-255, the same ids as `ByteTokenizer`; no special tokens.

    `decode` replaces byte sequences that are not valid UTF-8 with U+FFFD, as
    `ByteTokenizer.decode` does.
    """

    vocab_files_names: dict = {}  # nothing to save but the config
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs):
        kwargs["kind"] = ByteTokenizer.kind  # the library's own loader reads this key
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    def get_vocab(self) -> dict[str, int]:
        return dict(IDS)

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [SYMBOLS[b] for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        if token not in IDS:
            raise KeyError(f"{token!r} is not a byte token")
        return IDS[token]

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < 256:
            raise ValueError(f"token id {index} is outside the vocabulary [0, 256)")
        return SYMBOLS[index]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return bytes(IDS[t] for t in tokens).decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # the vocabulary is the 256 bytes: nothing to write


def to_transformers(tokenizer):
    """A `transformers` tokenizer with the ids of `tokenizer` (a `ByteTokenizer` or an
    `HFTokenizer`); SentencePiece models are refused by name."""
    if isinstance(tokenizer, ByteTokenizer):
        return TitansByteTokenizer()
    if isinstance(tokenizer, HFTokenizer):
        fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer.tokenizer)
        if tokenizer.eos_token is not None:
            fast.eos_token = tokenizer.eos_token
        return fast
    raise TokenizerError(
        f"no transformers tokenizer for {tokenizer!r}: byte level and tokenizer.json are "
        "supported (load a SentencePiece model with transformers' own classes)"
    )
