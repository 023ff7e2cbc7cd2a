"""TitansForCausalLM: transformers round trip (safetensors), Auto classes, generate, loss."""

import json

import pytest
import torch

pytest.importorskip("transformers")

from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from titans_seq.domains.lm.hf import TitansForCausalLM, TitansLMConfig  # noqa: E402
from titans_seq.domains.lm.model import TitansLM  # noqa: E402
from titans_seq.training.checkpoint import CheckpointError  # noqa: E402

MIXERS = {
    "lmm": {"chunk_size": 4},
    "mag": {"window": 8, "chunk_size": 4},
    "mac": {"segment_size": 8, "chunk_size": 4},
    "attention": {},
}


def tiny(mixer: str, tie: bool = True) -> TitansLM:
    torch.manual_seed(0)
    model = TitansLM(
        vocab_size=40,
        dim=32,
        depth=2,
        heads=2,
        mixer=mixer,
        mixer_options=MIXERS[mixer],
        tie_embeddings=tie,
    )
    return model.eval()


@pytest.mark.parametrize("mixer", MIXERS)
def test_save_pretrained_and_auto_round_trip(mixer, tmp_path):
    model = tiny(mixer, tie=mixer != "attention")
    hf = TitansForCausalLM.from_titans(model)
    hf.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert isinstance(AutoConfig.from_pretrained(tmp_path), TitansLMConfig)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, TitansForCausalLM)
    tokens = torch.randint(0, 40, (2, 13))
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens).logits, model(tokens)[0], rtol=0, atol=0)


def test_a_config_that_does_not_describe_the_weights_is_refused(tmp_path):
    """config.json edited to another mixer: transformers would start the new mixer's
    weights afresh and only report it; the folder is refused instead."""
    TitansForCausalLM.from_titans(tiny("lmm")).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["mixer"], config["mixer_options"] = "attention", {}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="do not fit the model that config.json describes"):
        AutoModelForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("mixer", ["lmm", "mag"])
def test_generate_with_the_memory_state_as_cache_equals_the_library(mixer):
    model = tiny(mixer)
    hf = TitansForCausalLM.from_titans(model)
    prompt = torch.randint(0, 40, (3, 9))
    out = hf.generate(prompt, max_new_tokens=7, do_sample=False)
    torch.testing.assert_close(out, model.generate(prompt, 7, temperature=0))


def test_sampling_is_reproducible_with_a_seed():
    hf = TitansForCausalLM.from_titans(tiny("lmm"))
    prompt = torch.randint(0, 40, (1, 5))
    runs = []
    for _ in range(2):
        torch.manual_seed(3)
        runs.append(hf.generate(prompt, max_new_tokens=6, do_sample=True, top_k=10))
    torch.testing.assert_close(runs[0], runs[1])


def test_the_state_continues_a_stream():
    hf = TitansForCausalLM.from_titans(tiny("mag"))
    tokens = torch.randint(0, 40, (2, 20))
    with torch.no_grad():
        whole = hf(tokens).logits
        first = hf(tokens[:, :7])
        second = hf(tokens[:, 7:], memory_state=first.memory_state)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], 1), whole)


def test_labels_give_the_shifted_cross_entropy_and_gradients():
    hf = TitansForCausalLM.from_titans(tiny("lmm"))
    tokens = torch.randint(0, 40, (2, 10))
    labels = tokens.clone()
    labels[0, 5] = -100
    out = hf(tokens, labels=labels)
    logits = out.logits[:, :-1].reshape(-1, 40)
    expected = torch.nn.functional.cross_entropy(logits, labels[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    out.loss.backward()
    assert all(p.grad is not None for p in hf.parameters() if p.requires_grad)


def test_padding_is_refused():
    hf = TitansForCausalLM.from_titans(tiny("lmm"))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    with pytest.raises(ValueError, match="padding"):
        hf(torch.randint(0, 40, (2, 6)), attention_mask=mask)


def test_beam_search_is_refused_rather_than_run_with_an_unordered_state():
    hf = TitansForCausalLM.from_titans(tiny("lmm"))
    with pytest.raises(ValueError, match="beam search"):
        hf.generate(torch.randint(0, 40, (1, 5)), max_new_tokens=4, num_beams=2, do_sample=False)


def test_auto_classes_load_a_saved_folder_without_importing_titans_seq(tmp_path):
    """config.json's auto_map and the module beside it let transformers' Auto classes load
    the folder in a fresh interpreter (trust_remote_code=True, as for any architecture
    transformers does not ship), with the same greedy continuation."""
    import subprocess
    import sys

    torch.manual_seed(0)
    hf = TitansForCausalLM.from_titans(TitansLM(vocab_size=32, dim=16, depth=2, heads=2))
    hf.save_pretrained(tmp_path)
    prompt = torch.tensor([[1, 2, 3, 4]])
    expected = hf.generate(prompt, max_new_tokens=6, do_sample=False)[0].tolist()
    code = (
        "import sys, torch\n"
        "from transformers import AutoModelForCausalLM\n"
        f"hf = AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)\n"
        "out = hf.generate(torch.tensor([[1, 2, 3, 4]]), max_new_tokens=6, do_sample=False)\n"
        "print(type(hf).__name__, out[0].tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == f"TitansForCausalLM {expected}"


def test_a_folder_keeps_the_memory_defaults_it_was_saved_under(tmp_path):
    """config.json records the titans-seq format; one written before the record (format 2:
    theta_max then followed the chunk size) loads with theta_max = 1 / chunk_size."""
    import json

    from titans_seq.domains.lm.io import FORMAT_VERSION
    from titans_seq.mixers.memory_config import DEFAULT_THETA_MAX
    from titans_seq.mixers.neural_memory import NeuralMemory

    def bounds(model):
        return {m.theta_max for m in model.modules() if isinstance(m, NeuralMemory)}

    hf = TitansForCausalLM.from_titans(tiny("lmm"))  # chunk 4
    hf.save_pretrained(tmp_path / "now")
    saved = json.loads((tmp_path / "now" / "config.json").read_text())
    assert saved["titans_format_version"] == FORMAT_VERSION
    assert bounds(AutoModelForCausalLM.from_pretrained(tmp_path / "now")) == {DEFAULT_THETA_MAX}

    hf.save_pretrained(tmp_path / "before")
    config = tmp_path / "before" / "config.json"
    config.write_text(json.dumps({k: v for k, v in saved.items() if k != "titans_format_version"}))
    old = AutoModelForCausalLM.from_pretrained(tmp_path / "before")
    assert bounds(old) == {1 / 4}
    tokens = torch.randint(0, 40, (1, 12))
    reference = TitansLM(
        vocab_size=40, dim=32, depth=2, heads=2, mixer="lmm",
        mixer_options={"chunk_size": 4, "theta_max": 1 / 4},
    )  # fmt: skip
    reference.load_state_dict(hf.model.state_dict())
    torch.testing.assert_close(old(tokens).logits, reference.eval()(tokens)[0])
    # a config built in Python is the current format
    assert TitansLMConfig().titans_format_version == FORMAT_VERSION
