"""Causal language modeling on Titans mixers: `TitansLM`, size presets, tokenizers.

>>> from titans_seq.domains.lm import TitansLM
>>> model = TitansLM.from_preset("tiny", mixer="mag", vocab_size=256)
>>> logits, state = model(tokens)              # tokens [B, T] -> logits [B, T, 256]
>>> out = model.generate(prompt, 100, temperature=0.8, top_p=0.95)
"""

from .evals.passkey import PasskeyRetrieval, evaluate_passkey
from .model import TitansLM, load_lm, load_lm_and_tokenizer
from .presets import PRESETS
from .tokenizers import ByteTokenizer, load_tokenizer, train_bpe

__all__ = [
    "PRESETS",
    "ByteTokenizer",
    "PasskeyRetrieval",
    "TitansLM",
    "evaluate_passkey",
    "load_lm",
    "load_lm_and_tokenizer",
    "load_tokenizer",
    "train_bpe",
]
