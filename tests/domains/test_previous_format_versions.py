"""Models saved before the memory's stable parametrisation (format version 1) load with the
memory defaults they were trained with, so their predictions do not change."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from titans_seq.mixers.memory_config import PREVIOUS_MEMORY_DEFAULTS
from titans_seq.mixers.neural_memory import NeuralMemory


def _memories(model):
    return [m for m in model.modules() if isinstance(m, NeuralMemory)]


def _as_version(path, config_file, version):
    """The folder as an older save had it: its config names that version, no manifest."""
    meta = json.loads((path / config_file).read_text())
    meta["format_version"] = version
    (path / config_file).write_text(json.dumps(meta))
    (path / "model_manifest.json").unlink(missing_ok=True)


def _fitted_forecaster(**options):
    """A one-epoch TitansForecaster on two sine channels (a small model)."""
    from titans_seq.domains.forecasting import TitansForecaster

    t = np.arange(200)
    frame = pd.DataFrame({"a": np.sin(t / 5), "b": np.cos(t / 7)})
    shape = dict(lookback=16, horizon=4, dim=16, depth=1, heads=2, patch_len=4, stride=4)
    options = {"mixer": "lmm", **options}  # older formats saved the mixer itself
    return TitansForecaster(**shape, **options, max_epochs=1, random_state=0, device="cpu").fit(
        frame
    )


def _fitted_dna_classifier():
    """A one-epoch DNAClassifier at memory chunk 8 on 24 random sequences, without the
    motif stem that format 5 added and the k-mer head of format 6 (so that it can stand
    for an older folder)."""
    from titans_seq.domains.genomics import DNAClassifier

    rng = np.random.default_rng(0)
    X = ["".join(rng.choice(list("ACGT"), size=30)) for _ in range(24)]
    y = [i % 2 for i in range(24)]
    clf = DNAClassifier(
        dim=16,
        depth=1,
        heads=2,
        stem_width=0,
        kmer_size=0,
        max_epochs=1,
        random_state=0,
        device="cpu",
    )
    clf.mixer_options = {"chunk_size": 8}
    return clf.fit(X, y)


def _forecaster_as_version_2(path):
    """A forecaster folder as format 2 wrote it: one wide series, its scaler, its last
    `lookback` rows z-scored, no covariate fields and none of the later parameters."""
    config = path / "forecaster.json"
    meta = json.loads(config.read_text())
    (series,) = meta.pop("series")
    scaler = series["scaler"]["target"]
    context = (np.asarray(series["target"]) - scaler["mean"]) / np.asarray(scaler["scale"])
    for key in ("layout", "target_names", "calendar", "covariate_shape", "static_scaler"):
        meta.pop(key)
    for key in ("hist_exog_list", "futr_exog_list", "stat_exog_list", "calendar"):
        meta["params"].pop(key)
    meta.update(
        format_version=2,
        scaler=scaler,
        last_context=context.tolist(),
        last_index=series["index"],
        last_index_is_datetime=series["index_is_datetime"],
    )
    config.write_text(json.dumps(meta))
    (path / "model_manifest.json").unlink()


def test_a_version_2_forecaster_predicts_as_before(tmp_path):
    from titans_seq.domains.forecasting import TitansForecaster

    t = np.arange(120)
    frame = pd.DataFrame(
        {"a": np.sin(t / 5), "b": np.cos(t / 7) * 3 + 1},
        index=pd.date_range("2024-01-01", periods=120, freq="h"),
    )
    options = dict(lookback=16, horizon=4, dim=16, depth=1, heads=2, patch_len=4, stride=4)
    f = TitansForecaster(**options, mixer="lmm", max_epochs=1, random_state=0, device="cpu")
    f.fit(frame)
    f.save(tmp_path / "m")
    _forecaster_as_version_2(tmp_path / "m")
    old = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    pd.testing.assert_frame_equal(old.predict(), f.predict(), rtol=1e-6, atol=1e-6)
    assert old.score(frame) == f.score(frame)


def _assert_previous_defaults(model):
    memories = _memories(model)
    assert memories
    for m in memories:
        assert m.theta_max == PREVIOUS_MEMORY_DEFAULTS["theta_max"]
        assert m.inner_grad_clip == PREVIOUS_MEMORY_DEFAULTS["inner_grad_clip"]
        assert m.damped_momentum is PREVIOUS_MEMORY_DEFAULTS["damped_momentum"]


def test_a_version_1_forecaster_keeps_its_memory_defaults(tmp_path):
    from titans_seq.domains.forecasting import TitansForecaster

    f = _fitted_forecaster()
    f.save(tmp_path / "m")
    assert not any(
        m.damped_momentum is False
        for m in _memories(TitansForecaster.load(tmp_path / "m", allow_unverified=True).model_)
    )
    _forecaster_as_version_2(tmp_path / "m")
    _as_version(tmp_path / "m", "forecaster.json", 1)
    old = TitansForecaster.load(tmp_path / "m", allow_unverified=True)
    _assert_previous_defaults(old.model_)
    assert old.get_params()["mixer_options"] == PREVIOUS_MEMORY_DEFAULTS


def test_a_version_1_dna_classifier_keeps_its_memory_defaults(tmp_path):
    from titans_seq.domains.genomics import DNAClassifier

    _fitted_dna_classifier().save(tmp_path / "m")
    _as_version(tmp_path / "m", "dna_classifier.json", 1)
    old = DNAClassifier.load(tmp_path / "m", allow_unverified=True)
    _assert_previous_defaults(old.model_)
    assert old.mixer_options == {**PREVIOUS_MEMORY_DEFAULTS, "chunk_size": 8}


def test_a_version_1_language_model_keeps_its_memory_defaults(tmp_path):
    from titans_seq.domains.lm import TitansLM

    model = TitansLM(vocab_size=32, dim=16, depth=2, heads=2, mixer="lmm,attention")
    model.save(tmp_path / "lm")
    _as_version(tmp_path / "lm", "lm_config.json", 1)
    old = TitansLM.load(tmp_path / "lm", allow_unverified=True)
    _assert_previous_defaults(old)
    assert len(_memories(old)) == 1  # the attention layer got no memory option
    tokens = torch.randint(0, 32, (1, 20))
    # the same weights under the previous defaults, built by hand
    reference = TitansLM(
        vocab_size=32,
        dim=16,
        depth=2,
        heads=2,
        mixer="lmm,attention",
        mixer_options={"lmm": dict(PREVIOUS_MEMORY_DEFAULTS)},
    )
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(old(tokens)[0], reference(tokens)[0])


def _assert_chunk_coupled(model, chunk_size):
    memories = _memories(model)
    assert memories
    for m in memories:
        assert m.theta_max == 1.0 / chunk_size


def test_a_language_model_saved_while_theta_followed_the_chunk_size_keeps_it(tmp_path):
    from titans_seq.domains.lm import TitansLM

    options = {"memory": {"chunk_size": 8}}
    model = TitansLM(vocab_size=32, dim=16, depth=2, heads=2, mixer="lmm", mixer_options=options)
    assert {m.theta_max for m in _memories(model)} == {1 / 16}  # the fixed default now
    model.save(tmp_path / "lm")
    _as_version(tmp_path / "lm", "lm_config.json", 2)
    old = TitansLM.load(tmp_path / "lm", allow_unverified=True)
    _assert_chunk_coupled(old, 8)
    tokens = torch.randint(0, 32, (1, 20))
    reference = TitansLM(
        vocab_size=32,
        dim=16,
        depth=2,
        heads=2,
        mixer="lmm",
        mixer_options={"memory": {"chunk_size": 8, "theta_max": 1 / 8}},
    )
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(old(tokens)[0], reference(tokens)[0])


def test_estimators_saved_while_theta_followed_the_chunk_size_keep_it(tmp_path):
    from titans_seq.domains.forecasting import TitansForecaster
    from titans_seq.domains.genomics import DNAClassifier

    _fitted_dna_classifier().save(tmp_path / "dna")
    _as_version(tmp_path / "dna", "dna_classifier.json", 2)
    old = DNAClassifier.load(tmp_path / "dna", allow_unverified=True)
    _assert_chunk_coupled(old.model_, 8)
    assert old.mixer_options == {"chunk_size": 8, "theta_max": None}

    f = _fitted_forecaster(mixer_options={"memory": {"chunk_size": 4}})
    f.save(tmp_path / "fc")
    _as_version(tmp_path / "fc", "forecaster.json", 3)
    old_f = TitansForecaster.load(tmp_path / "fc", allow_unverified=True)
    _assert_chunk_coupled(old_f.model_, 4)
    # the current save keeps the fixed default
    assert {m.theta_max for m in _memories(f.model_)} == {1 / 16}


def _mal_layouts(model):
    from titans_seq.mixers.mal import MemoryAsLayer

    return {m.layout for m in model.modules() if isinstance(m, MemoryAsLayer)}


def test_a_language_model_saved_while_mal_was_one_block_keeps_it(tmp_path):
    """A MAL model saved in LM format 3 (MAL's default layout then "one_block") rebuilds
    that layout and its outputs; one saved now has the paper's "two_layers"."""
    from titans_seq.domains.lm import TitansLM

    options = {"window": 8, "memory": {"chunk_size": 4}}
    model = TitansLM(vocab_size=32, dim=16, depth=2, heads=2, mixer="mal", mixer_options=options)
    assert _mal_layouts(model) == {"two_layers"}
    model.save(tmp_path / "now")
    assert _mal_layouts(TitansLM.load(tmp_path / "now")) == {"two_layers"}

    before = TitansLM(
        vocab_size=32, dim=16, depth=2, heads=2, mixer="mal",
        mixer_options={**options, "layout": "one_block"},
    )  # fmt: skip
    before.save(tmp_path / "lm")
    config = json.loads((tmp_path / "lm" / "lm_config.json").read_text())
    config["config"]["mixer_options"] = options  # as format 3 stored it: no layout
    (tmp_path / "lm" / "lm_config.json").write_text(json.dumps(config))
    _as_version(tmp_path / "lm", "lm_config.json", 3)
    old = TitansLM.load(tmp_path / "lm", allow_unverified=True)
    assert _mal_layouts(old) == {"one_block"}
    tokens = torch.randint(0, 32, (1, 20))
    torch.testing.assert_close(old(tokens)[0], before(tokens)[0])


def test_each_format_maps_its_versions_to_the_defaults_of_their_time():
    """Every saved-model format pins MAL's earlier layout for the versions before the
    change, and the memory defaults of the versions before theirs."""
    from titans_seq.backbone import pin_saved_defaults
    from titans_seq.domains.forecasting.persistence import DEFAULTS_GENERATION_OF_VERSION
    from titans_seq.domains.forecasting.persistence import FORMAT_VERSION as FORECASTER
    from titans_seq.domains.genomics.estimator import DEFAULTS_GENERATION_OF_VERSION as DNA_OF
    from titans_seq.domains.genomics.estimator import FORMAT_VERSION as DNA
    from titans_seq.domains.genomics.pretraining import PRETRAINED_FORMAT
    from titans_seq.domains.lm.io import FORMAT_VERSION as LM
    from titans_seq.mixers.layer_spec import DEFAULTS_GENERATION

    assert LM == PRETRAINED_FORMAT == DEFAULTS_GENERATION
    for generation_of, current in ((DEFAULTS_GENERATION_OF_VERSION, FORECASTER), (DNA_OF, DNA)):
        assert generation_of[current] == DEFAULTS_GENERATION
        assert sorted(generation_of) == list(range(1, current + 1))

    def pinned(generation):
        return pin_saved_defaults({"window": 8}, ["mal", "lmm"], generation)

    assert pinned(4) == [{"window": 8}, {"window": 8}]
    assert pinned(3) == [{"layout": "one_block", "window": 8}, {"window": 8}]
    assert pinned(2)[0] == {"layout": "one_block", "theta_max": None, "window": 8}
    assert pinned(1)[1] == {**PREVIOUS_MEMORY_DEFAULTS, "window": 8}
    # what a model stored itself stands
    assert pin_saved_defaults({"layout": "two_layers"}, ["mal"], 3) == [{"layout": "two_layers"}]
    with pytest.raises(ValueError, match="generation"):
        pin_saved_defaults(None, ["lmm"], 5)
