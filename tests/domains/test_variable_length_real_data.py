"""Every domain trains with finite losses on real data cut to the shapes users bring:
sequences of very different lengths in one batch, short and long documents, gaps."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from titans_seq.data.files import data_dirs

MIXERS = ["lmm", "mag"]


def _mirror(relative: str):
    for folder in data_dirs():
        if (folder / relative).exists():
            return folder / relative
    pytest.skip(f"{relative} is not in the data mirror ($TITANS_SEQ_DATA)")


def _finite_history(history):
    assert history, "no evaluation ran"
    for row in history:
        for key, value in row.items():
            assert math.isfinite(value), f"{key} = {value} at step {row['step']}"


@pytest.mark.parametrize("mixer", MIXERS)
def test_dna_classifier_and_pretraining_on_variable_length_sequences(mixer, tmp_path):
    from titans_seq.domains.genomics import DNAClassifier
    from titans_seq.domains.genomics.pretrain_task import pretrain

    frame = pd.read_csv(_mirror("genomics/human_nontata_promoters.test.csv.gz")).sample(
        96, random_state=0
    )
    rng = np.random.default_rng(0)
    # 8 to 251 bases: one batch mixes sequences padded by up to 30x their length
    X = [s[: int(rng.integers(8, len(s) + 1))] for s in frame.seq]
    assert max(map(len, X)) / min(map(len, X)) > 10
    options = {"chunk_size": 8} | ({"window": 16} if mixer == "mag" else {})
    small = dict(dim=16, depth=1, heads=2, mixer=mixer, mixer_options=options)
    clf = DNAClassifier(**small, max_epochs=2, batch_size=16, random_state=0, device="cpu")
    clf.fit(X, frame.label.to_numpy())
    _finite_history(clf.history_)
    assert np.isfinite(clf.predict_proba(X[:10])).all()

    # next-base pretraining: the first batch holds sequences shorter than the crop length
    folder = pretrain(
        X,
        tmp_path / "pretrained",
        model={"dim": 16, "depth": 1, "heads": 2, "mixer": mixer, "mixer_options": options},
        seq_len=128,
        max_steps=6,
        batch_size=8,
        device="cpu",
    )
    assert (folder / "model.safetensors").is_file()


@pytest.mark.parametrize("mixer", MIXERS)
def test_forecaster_on_a_short_series_with_gaps(mixer):
    from titans_seq.domains.forecasting import TitansForecaster

    frame = pd.read_csv(_mirror("timeseries/ETTh1.csv.gz"), parse_dates=["date"])
    frame = frame.set_index("date").iloc[:400]
    frame.iloc[[50, 51, 52, 200, 333], [0, 3]] = np.nan  # sensor gaps
    options = {"chunk_size": 4} | ({"window": 8} if mixer == "mag" else {})
    forecaster = TitansForecaster(
        lookback=48,
        horizon=12,
        dim=16,
        depth=1,
        heads=2,
        patch_len=8,
        stride=4,
        mixer=mixer,
        mixer_options=options,
        max_epochs=2,
        missing="interpolate",
        random_state=0,
        device="cpu",
    ).fit(frame)
    _finite_history(forecaster.history_)
    assert np.isfinite(forecaster.predict().to_numpy()).all()


@pytest.mark.parametrize("mixer", MIXERS)
def test_language_model_on_documents_of_very_different_lengths(mixer, tmp_path):
    from titans_seq.domains.lm.data import read_documents
    from titans_seq.training import load_config, train

    text = read_documents("tinyshakespeare")[0]
    wiki = "".join(read_documents("wikitext-2-valid"))  # its articles, joined
    rng = np.random.default_rng(0)
    docs = tmp_path / "docs"
    docs.mkdir()
    start = 0
    for i in range(40):  # 1 byte to 3 KB per document
        length = int(rng.choice([1, 3, 17, 64, 500, 3000]))
        source = text if i % 2 else wiki
        (docs / f"doc{i:02d}.txt").write_text(source[start : start + length])
        start += length
    val = tmp_path / "val.txt"
    val.write_text(wiki[start : start + 2000])
    options = {"chunk_size": 8} | ({"window": 16} if mixer == "mag" else {})
    raw = {
        "name": "lm_variable",
        "task": "lm",
        "model": {"preset": "tiny", "mixer": mixer, "mixer_options": options},
        "data": {"train": str(docs), "val": str(val), "seq_len": 96},
        "optim": {"lr": 3.0e-3, "warmup_steps": 2},
        "train": {
            "max_steps": 6,
            "batch_size": 4,
            "log_every": 2,
            "checkpoint_every": 6,
            "out_dir": str(tmp_path / "run"),
            "progress": False,
            "plot": False,
            "tensorboard": False,
            "device": "cpu",
        },
        "eval": {"every": 3, "batch_size": 4, "max_batches": 2},
    }
    result = train(load_config(raw))
    _finite_history(result.history)
