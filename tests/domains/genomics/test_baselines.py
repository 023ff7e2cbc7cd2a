"""Baselines: the GenomicsBenchmarks CNN (layers, shapes, padding, lengths, strands), the
architecture switch of the task and the estimator, parameter counts, the CNN recipe."""

import numpy as np
import pytest
import torch
from torch import nn

from titans_seq.domains.genomics import (
    DNAClassifier,
    DNATokenizer,
    GenomicsCNN,
    count_parameters,
    reverse_complement,
)
from titans_seq.domains.genomics.baselines import MIN_INPUT_LEN
from titans_seq.domains.genomics.model import DNAClassifierNet
from titans_seq.domains.genomics.task import DNAModelConfig, build_net
from titans_seq.training import load_config, train


def small_cnn(**options):
    torch.manual_seed(0)
    return GenomicsCNN(**{"num_classes": 3, "input_len": 80, **options}).eval()


def test_cnn_layers_follow_the_reference():
    cnn = GenomicsCNN(2, input_len=500)
    convs = [m for m in cnn.features if isinstance(m, nn.Conv1d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size[0]) for c in convs] == [
        (100, 16, 8),
        (16, 8, 8),
        (8, 4, 8),
    ]
    assert sum(isinstance(m, nn.BatchNorm1d) for m in cnn.features) == 3
    assert sum(isinstance(m, nn.MaxPool1d) for m in cnn.features) == 3
    # 500 -> conv 493 -> pool 246 -> 239 -> 119 -> 112 -> 56 positions x 4 channels
    assert cnn.flat_size == 56 * 4
    assert [m.out_features for m in cnn.dense] == [512, 2]
    manual = sum(p.numel() for p in cnn.parameters())
    assert count_parameters(cnn) == manual


def test_cnn_shapes_padding_and_lengths():
    cnn = small_cnn()
    tok = DNATokenizer()
    ids, lengths = tok.batch(["ACGT" * 15, "GGCAT" * 3, "T"])
    logits = cnn(ids, lengths)
    assert logits.shape == (3, 3) and torch.isfinite(logits).all()
    # every batch is padded to input_len inside: a sequence's logits do not depend on the
    # length of the other sequences in its batch
    for i, seq in enumerate(["ACGT" * 15, "GGCAT" * 3, "T"]):
        alone_ids, alone_len = tok.batch([seq])
        torch.testing.assert_close(logits[i : i + 1], cnn(alone_ids, alone_len))
    with pytest.raises(ValueError, match="exceed the CNN's input_len 80"):
        cnn(*tok.batch(["A" * 81]))
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        cnn(torch.ones(2, 3, 4, dtype=torch.long), torch.tensor([3, 3]))
    assert GenomicsCNN(2, input_len=10).input_len == MIN_INPUT_LEN  # short inputs still fit


def test_cnn_conjoin_is_strand_invariant_and_trains():
    cnn = small_cnn(rc_mode="conjoin")
    tok = DNATokenizer()
    seqs = ["ACGTTGCAAGG", "GATTACA"]
    rc = [reverse_complement(s) for s in seqs]
    torch.testing.assert_close(cnn(*tok.batch(seqs)), cnn(*tok.batch(rc)), rtol=1e-5, atol=1e-6)
    cnn.train()
    loss = nn.functional.cross_entropy(cnn(*tok.batch(seqs)), torch.tensor([0, 2]))
    loss.backward()
    assert all(p.grad is not None for p in cnn.parameters())


def test_architecture_switch():
    cnn = build_net(DNAModelConfig(architecture="cnn", cnn_options={"embedding_dim": 8}), 64)
    assert isinstance(cnn, GenomicsCNN) and cnn.embedding.embedding_dim == 8
    transformer = build_net(DNAModelConfig(mixer="attention", dim=16, heads=2))
    assert isinstance(transformer, DNAClassifierNet)
    assert transformer.backbone.layer_mixers == ["attention"] * 2
    with pytest.raises(ValueError, match="architecture must be one of"):
        DNAModelConfig(architecture="rnn")
    with pytest.raises(ValueError, match="CNN baseline has no pretrained backbone"):
        build_net(DNAModelConfig(architecture="cnn", pretrained="somewhere"))


def test_estimator_with_the_cnn(tmp_path):
    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACGT"), size=rng.integers(20, 60))) for _ in range(40)]
    labels = [s.count("G") > s.count("A") for s in seqs]
    clf = DNAClassifier(
        architecture="cnn", max_len=64, max_epochs=1, batch_size=16, random_state=0
    ).fit(seqs, labels)
    assert isinstance(clf.model_, GenomicsCNN) and clf.model_.input_len == 64
    proba = clf.predict_proba(seqs[:5])
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-6)
    clf.save(tmp_path / "cnn")
    np.testing.assert_allclose(DNAClassifier.load(tmp_path / "cnn").predict_proba(seqs[:5]), proba)


def test_cnn_and_attention_recipes_run(tmp_path):
    common = {
        "train.max_steps": 3,
        "train.batch_size": 8,
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
        "eval.every": 3,
        "optim.warmup_steps": 1,
        "data.max_train": 24,
        "data.max_val": 16,
    }
    cnn = load_config("genomics/nontata_cnn", common | {"train.out_dir": str(tmp_path / "c")})
    assert cnn.data.resplit and cnn.data.split == "test"  # offline protocol
    assert train(cnn).step == 3
    attention = load_config(
        "genomics/nontata_attention",
        common | {"train.out_dir": str(tmp_path / "a"), "model.dim": 16, "model.depth": 1},
    )
    assert train(attention).step == 3
