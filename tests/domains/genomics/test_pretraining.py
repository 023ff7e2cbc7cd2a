"""Next-base pretraining: causality, padding-free loss, crops, saving/loading, mismatch
errors, the recipes end to end, and fine-tuning through the estimator."""

import json

import numpy as np
import pytest
import torch

from titans_seq.domains.genomics import DNAClassifier, DNATokenizer
from titans_seq.domains.genomics.model import DNAClassifierNet
from titans_seq.domains.genomics.pretrain_task import (
    build_lm,
    fasta_train_val,
    pretrain,
    pretraining_sequences,
)
from titans_seq.domains.genomics.pretraining import (
    CropBatches,
    DNALanguageModel,
    load_pretrained_backbone,
    next_base_loss,
    read_pretrained,
    save_pretrained,
)
from titans_seq.domains.genomics.task import DNAModelConfig, build_net
from titans_seq.training import load_config, train
from titans_seq.training.checkpoint import CheckpointError
from titans_seq.training.config import ConfigError
from titans_seq.training.model_folder import write_manifest

ARCH = dict(dim=16, depth=1, heads=2, mixer="lmm", mixer_options={"chunk_size": 4})


def small_lm(**options):
    torch.manual_seed(0)
    return DNALanguageModel(**{**ARCH, "dropout": 0.0, **options}).eval()


@pytest.mark.parametrize(
    "mixer,options",
    [("lmm", {"chunk_size": 4}), ("mag", {"chunk_size": 4, "window": 3}), ("attention", {})],
)
def test_pretraining_model_is_causal(mixer, options):
    lm = small_lm(mixer=mixer, mixer_options=options).double()
    ids = torch.randint(1, 6, (2, 13))
    base = lm(ids)
    for t in (0, 3, 4, 9):
        changed = ids.clone()
        changed[:, t + 1 :] = torch.randint(1, 6, changed[:, t + 1 :].shape)
        out = lm(changed)
        torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=0, atol=1e-12)
        if t + 1 < ids.shape[1] and not torch.equal(changed, ids):
            assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


def test_loss_ignores_padding():
    lm = small_lm()
    tok = DNATokenizer()
    seqs = ["ACGTACGGTAGG", "GGCAT", "TTAN"]
    ids, _ = tok.batch(seqs)
    loss, count = next_base_loss(lm(ids), ids)
    assert int(count) == sum(len(s) - 1 for s in seqs)
    total = 0.0
    for s in seqs:  # each sequence alone, no padding at all
        alone = tok.encode(s)[None]
        part, _ = next_base_loss(lm(alone), alone, reduction="sum")
        total += float(part.detach())
    assert loss.item() == pytest.approx(total / int(count), rel=1e-5)

    # logits at padded positions get no gradient: they are never counted
    logits = lm(ids).detach().requires_grad_(True)
    next_base_loss(logits, ids)[0].backward()
    padded_targets = torch.zeros_like(ids, dtype=torch.bool)
    padded_targets[:, :-1] = ids[:, 1:] == 0
    assert logits.grad[padded_targets].abs().max() == 0
    assert logits.grad[:, -1].abs().max() == 0  # the last position predicts nothing


def test_crop_batches_windows_and_random_crops():
    tok = DNATokenizer()
    seqs = ["ACGT" * 5, "GGC", "T"]  # 20 bases, 3 bases, and one too short to predict
    val = CropBatches([tok.encode(s) for s in seqs], seq_len=8, random_crop=False)
    assert len(val) == 3 + 1  # ceil(20 / 8) windows + 1; "T" dropped
    ids, lengths = val.get_batch(range(len(val)))
    assert lengths.tolist() == [8, 8, 4, 3]
    assert tok.decode(torch.cat([ids[i, : lengths[i]] for i in range(3)])) == seqs[0]
    assert tok.decode(ids[3]) == "GGC" and ids[3, 3:].eq(0).all()

    train = CropBatches([tok.encode(s) for s in seqs], seq_len=8, random_crop=True)
    torch.manual_seed(1)
    starts = set()
    for _ in range(30):
        ids, lengths = train.get_batch([0])
        window = tok.decode(ids[0])
        assert lengths.item() == 8 and window in seqs[0]
        starts.add(seqs[0].index(window) % 4)
    assert starts == {0, 1, 2, 3}  # every offset modulo the period shows up
    with pytest.raises(ValueError, match="seq_len"):
        CropBatches([tok.encode("ACGT")], seq_len=1, random_crop=False)


def test_pretrained_backbone_transfers_and_mismatches_are_named(tmp_path):
    lm = small_lm()
    save_pretrained(tmp_path / "pre", lm, ARCH)
    meta = json.loads((tmp_path / "pre" / "dna_pretrained.json").read_text())
    assert meta["architecture"] == ARCH and meta["weights"] == "model.safetensors"

    cfg = DNAModelConfig(**ARCH, bidirectional=False, rc_mode="none", dropout=0.0)
    torch.manual_seed(5)
    net = build_net(cfg).eval()
    head_before = net.classifier.weight.clone()
    load_pretrained_backbone(net, tmp_path / "pre", cfg)
    ids, lengths = DNATokenizer().batch(["ACGTTGCA", "GGCATN"])
    # the classifier's causal features are exactly the pretrained model's
    expected, _ = lm.backbone(lm.embedding(ids))
    torch.testing.assert_close(net.encode(ids, lengths)[0], expected)
    assert torch.equal(net.classifier.weight, head_before)  # the head stays fresh

    # the bidirectional classifier takes the same weights (backwards reading shares them)
    bi = build_net(DNAModelConfig(**ARCH))
    load_pretrained_backbone(bi, tmp_path / "pre", ARCH)
    torch.testing.assert_close(bi.embedding.weight, lm.embedding.weight, rtol=0, atol=0)
    for name, value in lm.backbone.state_dict().items():
        torch.testing.assert_close(bi.backbone.state_dict()[name], value, rtol=0, atol=0)

    for key, value in [("dim", 32), ("depth", 2), ("mixer", "mag"), ("heads", 4)]:
        other = {**ARCH, key: value}
        if key == "mixer":
            other["mixer_options"] = {"chunk_size": 4, "window": 4}
        with pytest.raises(ValueError, match=f"{key}: pretrained"):
            load_pretrained_backbone(DNAClassifierNet(2, **other), tmp_path / "pre", other)
    # a runtime option (backend) is not an architecture difference
    runtime = {**ARCH, "mixer_options": {"chunk_size": 4, "backend": "reference"}}
    load_pretrained_backbone(DNAClassifierNet(2, **runtime), tmp_path / "pre", runtime)
    with pytest.raises(FileNotFoundError, match="dna_pretrained.json"):
        read_pretrained(tmp_path)


def recipe_overrides(tmp_path, name):
    return {
        "train.out_dir": str(tmp_path / name),
        "train.max_steps": 4,
        "train.batch_size": 8,
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
        "eval.every": 2,
        "eval.batch_size": 32,
        "optim.warmup_steps": 1,
        "model.dim": 16,
        "model.depth": 1,
        "model.heads": 2,
        "model.mixer_options": {"chunk_size": 8},
        "data.max_train": 32,
        "data.max_val": 16,
    }


@pytest.mark.slow  # two short runs on the real dataset: 6 s on one free core, 20 s on busy ones
def test_a_pretrained_folder_is_checksummed_and_its_weights_stay_inside(tmp_path):
    save_pretrained(tmp_path / "pre", small_lm(), ARCH)
    config = tmp_path / "pre" / "dna_pretrained.json"
    meta = json.loads(config.read_text())
    meta["architecture"]["depth"] = 2  # an edit by hand
    config.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="dna_pretrained.json does not match"):
        read_pretrained(tmp_path / "pre")
    meta["architecture"]["depth"] = 1
    meta["weights"] = "/etc/passwd"
    config.write_text(json.dumps(meta))
    write_manifest(tmp_path / "pre", ["dna_pretrained.json", "model.safetensors"])
    with pytest.raises(CheckpointError, match="does not stay inside the folder"):
        read_pretrained(tmp_path / "pre")


def test_recipes_pretrain_then_finetune_end_to_end(tmp_path):
    overrides = recipe_overrides(tmp_path, "pre") | {"data.seq_len": 24}
    cfg = load_config("genomics/pretrain_lmm", overrides)
    result = train(cfg)
    run = tmp_path / "pre"
    meta, weights = read_pretrained(run)
    assert meta["weights"] == "best_model.safetensors"

    # the saved weights reproduce the run's best validation loss
    from titans_seq.training.tasks import get_task

    task = get_task("dna_pretraining")
    _, val = task.build_datasets(cfg)
    lm = build_lm(cfg.model).eval()
    lm.load_state_dict(weights)
    total = count = 0.0
    with torch.no_grad():
        for start in range(0, len(val), 64):
            batch = val.get_batch(range(start, min(start + 64, len(val))))
            metrics = task.evaluate_batch(lm, batch)
            total += metrics["loss"][0]
            count += metrics["loss"][1]
    assert total / count == pytest.approx(result.best_metric, rel=1e-5)

    fine = load_config(
        "genomics/finetune_lmm",
        recipe_overrides(tmp_path, "fine") | {"model.pretrained": str(run), "data.max_len": 32},
    )
    net = get_task("dna_classification").build_model(fine)
    torch.testing.assert_close(net.embedding.weight, weights["embedding.weight"])
    out = train(fine)
    assert out.step == 4 and 0.0 <= out.last_eval["accuracy"] <= 1.0

    mismatch = load_config(
        "genomics/finetune_lmm",
        recipe_overrides(tmp_path, "bad") | {"model.pretrained": str(run), "model.dim": 24},
    )
    with pytest.raises(ValueError, match="dim: pretrained 16, model 24"):
        train(mismatch)


def test_pretraining_data_sources(tmp_path):
    fasta = tmp_path / "reads.fa"
    fasta.write_text("".join(f">r{i}\n{'ACGT' * (i + 2)}\n" for i in range(25)))
    cfg = load_config("genomics/pretrain_lmm", {"data.dataset": None, "data.fasta": str(fasta)})
    train_seqs, val_seqs = pretraining_sequences(cfg.data)
    assert len(train_seqs) + len(val_seqs) == 25 and len(val_seqs) == 1  # whole sequences
    train_parts, val_parts = fasta_train_val(["ACGT" * 25], 0.1, seed=0)  # one long sequence
    assert train_parts[0] + val_parts[0] == "ACGT" * 25 and len(val_parts[0]) == 10
    both = load_config("genomics/pretrain_lmm", {"data.fasta": str(fasta)})
    with pytest.raises(ConfigError, match="exactly one source"):
        pretraining_sequences(both.data)


def test_estimator_fine_tunes_from_a_pretrained_folder(tmp_path):
    rng = np.random.default_rng(0)
    seqs = ["".join(rng.choice(list("ACGT"), size=30)) for _ in range(48)]
    labels = ["gc" if s.count("G") + s.count("C") > 15 else "at" for s in seqs]
    arch = {"dim": 16, "depth": 1, "heads": 2, "mixer": "lmm", "mixer_options": {"chunk_size": 8}}
    folder = pretrain(
        seqs, tmp_path / "pre", model=arch, seq_len=16, max_steps=2, batch_size=8, eval_every=2
    )
    clf = DNAClassifier(
        **arch, pretrained=str(folder), max_epochs=1, batch_size=16, random_state=0
    ).fit(seqs, labels)
    assert clf.predict(seqs[:3]).shape == (3,)
    clf.save(tmp_path / "clf")
    again = DNAClassifier.load(tmp_path / "clf")
    np.testing.assert_allclose(again.predict_proba(seqs[:4]), clf.predict_proba(seqs[:4]))
    with pytest.raises(ValueError, match="depth: pretrained 1, model 2"):
        DNAClassifier(**{**arch, "depth": 2}, pretrained=str(folder), max_epochs=1).fit(
            seqs, labels
        )
