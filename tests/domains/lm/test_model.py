"""TitansLM: shapes, tied weights, streaming, causality, presets, FLOPs, save/load."""

import json

import pytest
import torch

from titans_seq.domains.lm import PRESETS, TitansLM
from titans_seq.domains.lm.model import load_lm_and_tokenizer
from titans_seq.domains.lm.tokenizers import ByteTokenizer
from titans_seq.nn.mlp import swiglu_hidden_dim
from titans_seq.training.checkpoint import CheckpointError
from titans_seq.training.model_folder import write_manifest

MIXERS = ["lmm", "mag", "mal", "mac", "attention", "swa"]
# small chunks, windows and segments, so that a 23-token stream crosses their boundaries
SMALL_OPTIONS = {
    "lmm": {"chunk_size": 4, "num_persistent": 2},
    "mag": {"chunk_size": 4, "window": 5, "num_persistent": 2},
    "mal": {"chunk_size": 4, "window": 5, "num_persistent": 2},
    "mac": {"chunk_size": 4, "segment_size": 6, "num_memory_tokens": 2, "num_persistent": 2},
    "attention": {},
    "swa": {"window": 5},
}


def tiny(mixer="lmm", **overrides):
    options = overrides.pop("mixer_options", SMALL_OPTIONS.get(mixer))
    return TitansLM.from_preset("tiny", mixer=mixer, mixer_options=options, **overrides)


@pytest.mark.parametrize("mixer", MIXERS)
def test_shapes(mixer):
    model = tiny(mixer)
    tokens = torch.randint(0, 256, (3, 11))
    logits, state = model(tokens)
    assert logits.shape == (3, 11, 256)
    assert len(state) == model.depth == PRESETS["tiny"]["depth"]
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize(
    "mixer",
    ["attention", "lmm", *(pytest.param(m, marks=pytest.mark.slow) for m in ("mag", "mal", "mac"))],
)
def test_the_whole_model_compiles_as_one_graph(mixer):
    """`torch.compile(model, fullgraph=True)`, as a training script compiles it: no graph
    break anywhere in the model (a break would split the step into several graphs with
    eager code between), and the eager logits and gradients."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = tiny(mixer)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    tokens = torch.randint(0, 256, (2, 23))
    results = []
    for run in (model, compiled):
        model.zero_grad()
        logits, _ = run(tokens)
        logits.float().logsumexp(-1).mean().backward()
        results.append((logits.detach(), [p.grad.clone() for p in model.parameters()]))
    (eager, eager_grads), (graph, graph_grads) = results
    torch.testing.assert_close(graph, eager, rtol=1e-4, atol=1e-5)
    for a, b in zip(graph_grads, eager_grads):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


def test_tied_weights_are_one_tensor():
    model = tiny()
    params = dict(model.named_parameters())
    assert "embedding.weight" in params and not any(k.startswith("head") for k in params)
    assert [k for k in model.state_dict() if k.endswith("embedding.weight")] == ["embedding.weight"]
    hidden = torch.randn(2, 3, model.dim)
    torch.testing.assert_close(model.logits(hidden), hidden @ model.embedding.weight.T)
    # the head's gradient lands on the embedding: a token absent from the input still
    # gets a gradient through the output layer
    tokens = torch.zeros(1, 4, dtype=torch.long)
    logits, _ = model(tokens)
    logits[..., 7].sum().backward()
    assert model.embedding.weight.grad[7].abs().sum() > 0

    untied = tiny(tie_embeddings=False)
    assert untied.head.weight is not untied.embedding.weight
    untied_count = untied.num_parameters() - model.num_parameters()
    assert untied_count == 256 * model.dim


@pytest.mark.parametrize("mixer", MIXERS)
def test_streaming_equals_one_shot(mixer):
    model = tiny(mixer).double()
    tokens = torch.randint(0, 256, (2, 23))
    full, _ = model(tokens)
    # pieces shorter than a chunk (4), a window (5) and a segment (6), and longer ones
    for splits in ([1, 2, 3, 7, 10], [3, 1, 1, 1, 17]):
        state, pieces, start = None, [], 0
        for size in splits:
            logits, state = model(tokens[:, start : start + size], state)
            pieces.append(logits)
            start += size
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("mixer", MIXERS)
def test_causal(mixer):
    model = tiny(mixer).double()
    tokens = torch.randint(0, 256, (2, 17))
    base, _ = model(tokens)
    for t in (0, 4, 5, 6, 11, 15):
        changed = tokens.clone()
        changed[:, t + 1 :] = torch.randint(0, 256, changed[:, t + 1 :].shape)
        changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % 256  # surely different
        logits, _ = model(changed)
        assert torch.equal(logits[:, : t + 1], base[:, : t + 1]), (mixer, t)
        if t + 1 < tokens.shape[1]:
            assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :])


def test_mixer_pattern():
    options = {"lmm": SMALL_OPTIONS["lmm"], "attention": {}}
    model = tiny("lmm*1,attention", mixer_options=options).double()
    assert model.layer_mixers == ["lmm", "attention"]
    tokens = torch.randint(0, 256, (1, 9))
    full, _ = model(tokens)
    first, state = model(tokens[:, :5])
    second, _ = model(tokens[:, 5:], state)
    torch.testing.assert_close(torch.cat((first, second), 1), full, rtol=1e-9, atol=1e-9)
    rebuilt = TitansLM.from_config(json.loads(json.dumps(model.config)))
    assert rebuilt.layer_mixers == ["lmm", "attention"]


def test_config_round_trip_and_errors():
    model = tiny("mag", tie_embeddings=False)
    config = json.loads(json.dumps(model.config))
    assert config["mixer"] == "mag" and config["tie_embeddings"] is False
    clone = TitansLM.from_config(config)
    clone.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 256, (1, 6))
    torch.testing.assert_close(clone(tokens)[0], model(tokens)[0])
    with pytest.raises(TypeError, match="unknown TitansLM config keys.*'width'"):
        TitansLM.from_config({**config, "width": 3})
    with pytest.raises(ValueError, match="unknown LM preset 'huge'.*'tiny'"):
        TitansLM.from_preset("huge")
    with pytest.raises(ValueError, match="vocab_size"):
        TitansLM(0)


def test_bad_tokens():
    model = tiny()
    with pytest.raises(ValueError, match="integer ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"shape \[B, T\]"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"shape \[B, T\]"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match="token id 256 is outside the vocabulary"):
        model(torch.tensor([[1, 256]]))
    with pytest.raises(ValueError, match="token id -1"):
        model(torch.tensor([[-1, 2]]))


def _attention_lm_parameters(vocab, dim, depth, mlp_ratio=4.0):
    """Transformer++ count by hand: per block q/k/v/o (4 D^2), SwiGLU (3 D h), two norms."""
    hidden = swiglu_hidden_dim(dim, mlp_ratio)
    return depth * (4 * dim * dim + 3 * dim * hidden + 2 * dim) + dim + vocab * dim


@pytest.mark.parametrize(
    "preset, vocab, low, high",
    [
        ("tiny", 256, 20e3, 60e3),
        ("20m", 256, 18e6, 22e6),
        ("125m", 32000, 105e6, 130e6),  # GPT-2-small / Transformer++ 125M with a 32K vocabulary
        ("340m", 32000, 320e6, 360e6),  # Transformer++ 340M (d 1024, 24 layers, 16 heads)
    ],
)
def test_preset_parameter_counts(preset, vocab, low, high):
    with torch.device("meta"):  # no memory, no init time
        model = TitansLM.from_preset(preset, mixer="attention", vocab_size=vocab)
        count = model.num_parameters()
        p = PRESETS[preset]
        assert count == _attention_lm_parameters(vocab, p["dim"], p["depth"])
        assert low <= count <= high
        assert model.num_parameters(exclude_embeddings=True) == count - vocab * p["dim"]
        for mixer in ("lmm", "mag", "mac"):
            # the Titans mixers add their gates, persistent tokens and memory weights
            titans = TitansLM.from_preset(preset, mixer=mixer, vocab_size=vocab)
            assert count < titans.num_parameters() < 1.5 * count


def test_flops_per_token():
    model = tiny("attention")
    dim, depth, vocab = model.dim, model.depth, model.vocab_size
    dense = model.num_parameters(exclude_embeddings=True) + vocab * dim
    for seq_len in (1, 64, 1000):
        expected = 6 * dense + 12 * depth * dim * seq_len
        assert model.flops_per_token(seq_len) == pytest.approx(expected)
    swa = tiny("swa")  # window 5: constant beyond it
    assert swa.flops_per_token(5) == swa.flops_per_token(5000) < model.flops_per_token(5000)
    lmm = tiny("lmm")  # linear in T: no term grows with the sequence once T >= chunk
    assert lmm.flops_per_token(100) == lmm.flops_per_token(10_000)
    assert lmm.flops_per_token(100) > 6 * lmm.num_parameters(exclude_embeddings=True)
    with pytest.raises(ValueError, match="seq_len"):
        lmm.flops_per_token(0)


# ------------------------------------------------------------------------------ save/load
@pytest.mark.parametrize("mixer", ["mag", "lmm*1,attention"])
def test_save_load_round_trip(tmp_path, mixer):
    options = {"mag": SMALL_OPTIONS["mag"]} if mixer == "mag" else None
    model = TitansLM.from_preset("tiny", mixer=mixer, mixer_options=options)
    path = model.save(tmp_path / "m", tokenizer="byte")
    assert sorted(p.name for p in path.iterdir()) == [
        "lm_config.json",
        "model.safetensors",
        "model_manifest.json",
        "tokenizer_config.json",
    ]
    loaded, tokenizer = load_lm_and_tokenizer(path)
    assert isinstance(tokenizer, ByteTokenizer)
    assert loaded.config == model.config
    tokens = torch.randint(0, 256, (2, 9))
    assert torch.equal(loaded(tokens)[0], model(tokens)[0])
    assert TitansLM.load(path).config == model.config


def test_load_errors(tmp_path):
    model = tiny()
    path = model.save(tmp_path / "m")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TitansLM.load(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="neither a saved model"):
        TitansLM.load(tmp_path)

    weights = path / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match="model.safetensors does not match"):
        TitansLM.load(path)
    weights.unlink()
    with pytest.raises(CheckpointError, match="model.safetensors is missing"):
        TitansLM.load(path)
    weights.write_bytes(good)
    TitansLM.load(path)

    # a config edited by hand is refused; under a manifest made anew for it, the weights'
    # mismatch with the config is named
    config_path = path / "lm_config.json"
    meta = json.loads(config_path.read_text())
    meta["config"]["dim"] = 64
    config_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="lm_config.json does not match the checksum"):
        TitansLM.load(path)
    write_manifest(path, ["lm_config.json", "model.safetensors"])
    with pytest.raises(CheckpointError, match="do not fit.*shape mismatch"):
        TitansLM.load(path)
    config_path.write_text("{not json")
    write_manifest(path, ["lm_config.json", "model.safetensors"])
    with pytest.raises(CheckpointError, match="lm_config.json is corrupt"):
        TitansLM.load(path)

    # the weights file a config names must stay inside the folder and be checksummed
    model.save(path)
    meta = json.loads(config_path.read_text())
    meta["weights"]["file"] = "../elsewhere.safetensors"
    config_path.write_text(json.dumps(meta))
    write_manifest(path, ["lm_config.json", "model.safetensors"])
    with pytest.raises(CheckpointError, match="does not stay inside the folder"):
        TitansLM.load(path)
    (path / "copy.safetensors").write_bytes(good)
    meta["weights"]["file"] = "copy.safetensors"
    config_path.write_text(json.dumps(meta))
    write_manifest(path, ["lm_config.json", "model.safetensors"])
    with pytest.raises(CheckpointError, match="copy.safetensors is not among the files"):
        TitansLM.load(path)


def test_save_replaces_previous_save(tmp_path):
    first, second = tiny(), tiny("swa")
    first.save(tmp_path, tokenizer=ByteTokenizer())
    second.save(tmp_path)  # no tokenizer now: the stale tokenizer config goes
    assert not (tmp_path / "tokenizer_config.json").exists()
    loaded = TitansLM.load(tmp_path)
    assert loaded.layer_mixers == ["swa", "swa"]
    assert not list(tmp_path.glob(".*tmp*"))  # no temporary files left behind


def test_load_from_training_run(tmp_path):
    """The shared loop's run folder of a task whose model is a TitansLM."""
    from titans_seq.training.checkpoint import latest_checkpoint, load_checkpoint
    from titans_seq.training.config import load_config
    from titans_seq.training.loop import train

    overrides = {
        "train.max_steps": 1,
        "train.checkpoint_every": 1,
        "train.batch_size": 2,
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
        "train.out_dir": str(tmp_path / "run"),
        "eval.every": 1,
        "data.train_length": 128,
        "data.num_val": 2,
        "model.mixer_options": {"window": 8, "chunk_size": 4, "num_persistent": 2},
    }
    result = train(load_config("lm/passkey_tiny", overrides))
    ckpt = load_checkpoint(latest_checkpoint(result.run_dir / "checkpoints"))
    for where in (result.run_dir, result.run_dir / "checkpoints", ckpt.path):
        model, tokenizer = load_lm_and_tokenizer(where)
        assert isinstance(model, TitansLM) and isinstance(tokenizer, ByteTokenizer)
        for key, value in model.state_dict().items():
            assert torch.equal(value, ckpt.model_state[key]), key

    (ckpt.path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError, match="model.safetensors is truncated or corrupt"):
        TitansLM.load(result.run_dir)


def test_load_from_lm_run_with_a_bpe_tokenizer(tmp_path):
    """An `lm` run: the checkpoint rebuilds model and tokenizer; a finished run's folder
    gives its exported model."""
    pytest.importorskip("tokenizers")
    from titans_seq.domains.lm import train_bpe
    from titans_seq.training.checkpoint import latest_checkpoint, load_checkpoint
    from titans_seq.training.config import load_config
    from titans_seq.training.loop import train

    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400 + "héllo wörld\n")
    bpe = train_bpe(text, 300, tmp_path / "bpe")
    overrides = {
        "data.train": str(text),
        "data.tokenizer": str(tmp_path / "bpe"),
        "data.seq_len": 16,
        "train.max_steps": 1,
        "train.checkpoint_every": 1,
        "train.batch_size": 2,
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
        "train.out_dir": str(tmp_path / "run"),
        "eval.every": 1,
        "eval.max_batches": 1,
    }
    result = train(load_config("lm/tiny", overrides))
    ckpt = load_checkpoint(latest_checkpoint(result.run_dir / "checkpoints"))
    model, tokenizer = load_lm_and_tokenizer(ckpt.path)
    assert model.vocab_size == bpe.vocab_size
    assert tokenizer.encode("héllo fox") == bpe.encode("héllo fox")
    for key, value in model.state_dict().items():
        assert torch.equal(value, ckpt.model_state[key]), key
    # the finished run's folder: its exported best model (here: the only evaluated one)
    assert (result.run_dir / "model" / "lm_config.json").exists()
    exported, tok = load_lm_and_tokenizer(result.run_dir)
    assert exported.config == model.config and tok.encode("fox") == bpe.encode("fox")
    for key, value in exported.state_dict().items():
        assert torch.equal(value, ckpt.model_state[key]), key


@pytest.mark.parametrize("preset", ["tiny", "20m", "340m"])
def test_parameter_matched_mlp_ratio(preset):
    from titans_seq.domains.lm.sizing import parameter_matched_mlp_ratio

    p = PRESETS[preset]
    with torch.device("meta"):
        reference = TitansLM.from_preset(preset, mixer="attention").num_parameters()
        for mixer in ("lmm", "mag", "mal", "mac", "swa", "lmm*1,attention"):
            ratio = parameter_matched_mlp_ratio(preset, mixer)
            matched = TitansLM.from_preset(preset, mixer=mixer, mlp_ratio=ratio)
            # one SwiGLU width step (8) is 3 * 8 * dim * depth parameters
            assert abs(matched.num_parameters() - reference) <= 12 * p["dim"] * p["depth"]
            if mixer != "swa":
                assert ratio < p["mlp_ratio"]  # the memory's extra weights come out of the MLP
