"""TitansDNATokenizer: the DNA vocabulary as a transformers tokenizer, ids equal to the
library's DNATokenizer, saved folders loadable by AutoTokenizer in a fresh interpreter."""

import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")

from titans_seq.domains.genomics.hf_tokenizer import TitansDNATokenizer  # noqa: E402
from titans_seq.domains.genomics.tokenizer import DNATokenizer  # noqa: E402

SEQUENCES = ["ACGTNACGT", "acgtRYsw", "T", "GATTACAgattaca" * 20]


def test_ids_and_padding_are_the_library_tokenizers():
    tokenizer = TitansDNATokenizer()
    batch = tokenizer(SEQUENCES, padding=True, return_tensors="pt")
    ids, lengths = DNATokenizer().batch(SEQUENCES)
    torch.testing.assert_close(batch["input_ids"], ids)
    torch.testing.assert_close(batch["attention_mask"].sum(1), lengths)
    assert tokenizer.pad_token_id == 0 and tokenizer.vocab_size == 6
    assert tokenizer.decode(batch["input_ids"][1]) == "ACGTNNNN"


def test_unknown_letters_are_refused_with_their_position():
    with pytest.raises(ValueError, match="unknown character 'X' at position 3"):
        TitansDNATokenizer()("ACGX")
    with pytest.raises(ValueError, match="IUPAC ambiguity code"):
        TitansDNATokenizer(strict=True)("ACGR")


def test_a_saved_tokenizer_loads_with_auto_tokenizer_without_importing_titans_seq(tmp_path):
    TitansDNATokenizer(strict=True).save_pretrained(tmp_path)
    code = (
        "from transformers import AutoTokenizer\n"
        f"t = AutoTokenizer.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "print(type(t).__name__, t.strict, t(['ACGT', 'AC'], padding=True)['input_ids'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "TitansDNATokenizer True [[1, 2, 3, 4], [1, 2, 0, 0]]"
