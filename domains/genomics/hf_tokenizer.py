"""The DNA vocabulary as a `transformers` tokenizer, for pipelines built on Hugging Face.

    from titans_seq.domains.genomics.hf_tokenizer import TitansDNATokenizer
    tok = TitansDNATokenizer()                    # ids as DNATokenizer: 0 pad, 1-5 A C G T N
    tok(["ACGTN", "acg"], padding=True)           # input_ids, attention_mask (right padding)
    tok.save_pretrained("dna-tok")
    AutoTokenizer.from_pretrained("dna-tok", trust_remote_code=True)   # no import first

The ids are `DNATokenizer`'s, so a batch encoded here feeds the library's DNA models
unchanged. Lowercase (soft-masked) bases are upper-cased, IUPAC ambiguity codes become N
(`strict=True` refuses them), and any other character raises a ValueError naming the
position, as `DNATokenizer` does. A saved folder names the class in its
`tokenizer_config.json` (`auto_map`) and carries a two-line module that imports it from
the installed package, the way character-level DNA tokenizers (HyenaDNA's) are shared.
"""

from __future__ import annotations

from pathlib import Path

try:
    from transformers import PreTrainedTokenizer
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Hugging Face tokenizer needs transformers: pip install 'titans-seq[hf]'"
    ) from error

from titans_seq.training.checkpoint import atomic_write_text

from .tokenizer import BASES, PAD_ID, DNATokenizer

PAD_TOKEN = "[PAD]"
VOCAB = {PAD_TOKEN: PAD_ID, **{base: i for i, base in enumerate(BASES, start=1)}}
AUTO_MODULE = "titans_seq_dna_tokenizer"
AUTO_MODULE_SOURCE = (
    '"""titans-seq\'s DNA tokenizer, from the installed package '
    "(pip install 'titans-seq[hf]')." + '"""\n\n'
    "from titans_seq.domains.genomics.hf_tokenizer import TitansDNATokenizer  # noqa: F401\n"
)


class TitansDNATokenizer(PreTrainedTokenizer):
    """Characters A, C, G, T, N as ids 1-5, padding 0; no other special tokens."""

    vocab_files_names: dict = {}  # the vocabulary is fixed: nothing to save but the config
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, strict: bool = False, **kwargs):
        self.strict = strict
        self._dna = DNATokenizer(strict=strict)
        kwargs.setdefault("pad_token", PAD_TOKEN)
        kwargs.setdefault("padding_side", "right")
        kwargs.setdefault("clean_up_tokenization_spaces", False)
        kwargs.setdefault(
            "auto_map", {"AutoTokenizer": [f"{AUTO_MODULE}.TitansDNATokenizer", None]}
        )
        super().__init__(strict=strict, **kwargs)

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    def get_vocab(self) -> dict[str, int]:
        return dict(VOCAB)

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        ids = self._dna.encode(text).tolist()  # the library's checks and IUPAC handling
        return [BASES[i - 1] for i in ids]

    def _convert_token_to_id(self, token: str) -> int:
        if token not in VOCAB:
            raise KeyError(f"{token!r} is not a DNA token ({sorted(VOCAB)})")
        return VOCAB[token]

    def _convert_id_to_token(self, index: int) -> str:
        if not 0 <= index < len(VOCAB):
            raise ValueError(f"token id {index} is outside the DNA vocabulary [0, {len(VOCAB)})")
        return PAD_TOKEN if index == PAD_ID else BASES[index - 1]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return "".join(t for t in tokens if t != PAD_TOKEN)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save_pretrained, plus the module that auto_map names."""
        written = super().save_pretrained(save_directory, *args, **kwargs)
        atomic_write_text(Path(save_directory) / f"{AUTO_MODULE}.py", AUTO_MODULE_SOURCE)
        return written
