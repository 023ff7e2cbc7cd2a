"""The LM's tokenizers inside `transformers`: the byte tokenizer's ids equal ByteTokenizer's,
saved folders load through AutoTokenizer (a save_lm folder too, and a tokenizer.json one
with the same ids and EOS), and `pipeline("text-generation")` runs offline."""

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoTokenizer, PreTrainedTokenizerFast, pipeline  # noqa: E402

from titans_seq.domains.lm import ByteTokenizer, TitansLM, load_tokenizer  # noqa: E402
from titans_seq.domains.lm import train_bpe as train_bpe_fn  # noqa: E402
from titans_seq.domains.lm.hf import TitansForCausalLM  # noqa: E402
from titans_seq.domains.lm.hf_tokenizer import TitansByteTokenizer, to_transformers  # noqa: E402
from titans_seq.domains.lm.io import save_lm  # noqa: E402
from titans_seq.domains.lm.tokenizers import TokenizerError  # noqa: E402

TEXTS = [
    "Hello, world!\n",
    "héllo wörld — ünïcode",
    "数学 and 🚀",
    "\x00 nul, \t tab,  two  spaces",
]


@pytest.mark.parametrize("text", TEXTS)
def test_byte_ids_and_decoding_equal_the_byte_tokenizer(text):
    tok = TitansByteTokenizer()
    ids = tok(text)["input_ids"]
    assert ids == ByteTokenizer().encode(text)
    assert tok.decode(ids) == text
    assert tok.vocab_size == len(tok) == 256
    assert tok.eos_token_id is None and tok.pad_token_id is None


def test_invalid_utf8_decodes_with_replacement_characters_as_the_byte_tokenizer():
    ids = [104, 0xC3, 105]  # a lone lead byte
    assert TitansByteTokenizer().decode(ids) == ByteTokenizer().decode(ids) == "h\ufffdi"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        TitansByteTokenizer().convert_ids_to_tokens([256])


def test_a_save_lm_folder_is_an_autotokenizer_folder(tmp_path):
    model = TitansLM(vocab_size=256, dim=16, depth=1, heads=2)
    save_lm(model, tmp_path / "lm", tokenizer="byte")
    auto = AutoTokenizer.from_pretrained(tmp_path / "lm")
    assert isinstance(auto, TitansByteTokenizer)
    assert auto("ok")["input_ids"] == [111, 107]
    # and the other way: a folder written by save_pretrained loads in the library
    auto.save_pretrained(tmp_path / "hf")
    assert isinstance(load_tokenizer(tmp_path / "hf"), ByteTokenizer)


def test_a_tokenizer_json_folder_loads_with_the_same_ids_and_eos(tmp_path):
    pytest.importorskip("tokenizers")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "".join(f"line {i}: the quick brown fox <|endoftext|>\n" for i in range(300)),
        encoding="utf-8",
    )
    trained = load_tokenizer(train_bpe_fn(corpus, 300, tmp_path / "bpe"))
    trained.save(tmp_path / "folder")
    auto = AutoTokenizer.from_pretrained(tmp_path / "folder")
    assert isinstance(auto, PreTrainedTokenizerFast)
    for text in TEXTS:
        assert auto(text, add_special_tokens=False)["input_ids"] == trained.encode(text)
    assert auto.eos_token_id == trained.eos_id
    converted = to_transformers(trained)
    assert converted("the fox")["input_ids"] == trained.encode("the fox")
    assert converted.eos_token_id == trained.eos_id


def test_sentencepiece_is_refused_by_name():
    class Other:
        pass

    with pytest.raises(TokenizerError, match="byte level and tokenizer.json"):
        to_transformers(Other())


def test_text_generation_pipeline_offline():
    torch.manual_seed(0)
    model = TitansLM(vocab_size=256, dim=32, depth=1, heads=2, mixer_options={"chunk_size": 4})
    hf = TitansForCausalLM.from_titans(model.eval())
    generate = pipeline("text-generation", model=hf, tokenizer=TitansByteTokenizer(), device="cpu")
    out = generate("hello", max_new_tokens=6, do_sample=False)[0]["generated_text"]
    ids = torch.tensor([ByteTokenizer().encode("hello")])
    expected = hf.generate(ids, max_new_tokens=6, do_sample=False)[0].tolist()
    assert out == ByteTokenizer().decode(expected)
    assert out.startswith("hello") and len(out.encode("utf-8", errors="replace")) >= 6
