"""DNAClassifier: scikit-learn classifier rules, input forms, strands, save/load, bad input."""

import gzip
import json
import warnings

import numpy as np
import pytest
from Bio.Seq import Seq
from Bio.SeqRecord import SeqRecord
from damage_helpers import flip_byte
from format_helpers import as_older_format
from sklearn.base import clone
from sklearn.model_selection import cross_val_score

from titans_seq.data import DataError
from titans_seq.domains.genomics import DNAClassifier, DNATokenizer, reverse_complement
from titans_seq.domains.genomics.model import MotifStem
from titans_seq.errors import ConfigError
from titans_seq.training import CheckpointError

SMALL = dict(
    dim=16,
    depth=1,
    heads=2,
    mixer_options={"chunk_size": 8},
    max_epochs=4,
    batch_size=16,
    learning_rate=3e-3,
    random_state=0,
)


def gc_vs_at(n=120, length=40, seed=0):
    """Class 'gc_rich' draws bases with 80% G/C, 'at_rich' with 80% A/T."""
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for i in range(n):
        rich = i % 2 == 0
        p = [0.1, 0.4, 0.4, 0.1] if rich else [0.4, 0.1, 0.1, 0.4]
        seqs.append("".join(rng.choice(list("ACGT"), size=length, p=p)))
        labels.append("gc_rich" if rich else "at_rich")
    return seqs, np.array(labels)


@pytest.fixture(scope="module")
def fitted():
    X, y = gc_vs_at()
    return DNAClassifier(**SMALL).fit(X, y)


def test_estimator_rules_and_string_labels(fitted):
    assert list(fitted.classes_) == ["at_rich", "gc_rich"] and fitted.n_classes_ == 2
    clf = clone(fitted)
    assert not hasattr(clf, "model_") and clf.get_params() == fitted.get_params()
    X, y = gc_vs_at(40, seed=1)
    proba = fitted.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    assert set(fitted.predict(X)) <= {"at_rich", "gc_rich"}
    assert fitted.score(X, y) > 0.9


def test_cross_val_score():
    X, y = gc_vs_at(60)
    scores = cross_val_score(DNAClassifier(**{**SMALL, "max_epochs": 1}), X, y, cv=3)
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_seq_records_and_fasta_paths(fitted, tmp_path):
    X, _ = gc_vs_at(6, seed=2)
    expected = fitted.predict_proba(X)
    records = [SeqRecord(Seq(s), id=f"r{i}") for i, s in enumerate(X)]
    np.testing.assert_allclose(fitted.predict_proba(records), expected, rtol=1e-5)
    np.testing.assert_allclose(fitted.predict_proba([Seq(s) for s in X]), expected, rtol=1e-5)
    # bytes, as numpy "S" arrays and HDF5 string datasets hold them
    np.testing.assert_allclose(fitted.predict_proba(np.array(X, dtype="S")), expected, rtol=1e-5)
    with pytest.raises(DataError, match="not ASCII"):
        fitted.predict_proba(["ACGT".encode("utf-16")])
    with pytest.raises(DataError, match=r"X\[1\] is None"):
        fitted.predict_proba([X[0], None])
    fasta = tmp_path / "x.fa.gz"
    with gzip.open(fasta, "wt") as f:
        f.writelines(f">r{i}\n{s}\n" for i, s in enumerate(X))
    np.testing.assert_allclose(fitted.predict_proba(str(fasta)), expected, rtol=1e-5)
    fastq = tmp_path / "x.fastq"
    fastq.write_text("".join(f"@r{i}\n{s}\n+\n{'I' * len(s)}\n" for i, s in enumerate(X)))
    np.testing.assert_allclose(fitted.predict_proba(fastq), expected, rtol=1e-5)


def test_the_default_trains_on_one_pass_and_predicts_from_both_strands(fitted):
    """A training step reads each sequence once (forward, a random strand); predictions
    read both strands ("posthoc"); the conjoined, bidirectional classifier reads four
    views in both; "augment" predicts from the given strand only."""
    X, _ = gc_vs_at(8, seed=5)
    ids, lengths = DNATokenizer().batch(X)

    def rows_read(clf, training=False):
        rows = []
        hook = clf.model_.backbone.register_forward_hook(
            lambda module, inputs, output: rows.append(inputs[0].shape[0])
        )
        try:
            if training:
                clf.model_.train()(ids, lengths)
                clf.model_.eval()
            else:
                clf.predict_proba(X)
        finally:
            hook.remove()
        return sum(rows)

    assert fitted.rc_mode == "posthoc"
    assert (rows_read(fitted, training=True), rows_read(fitted)) == (len(X), 2 * len(X))
    four = DNAClassifier(**{**SMALL, "bidirectional": True, "rc_mode": "conjoin", "max_epochs": 1})
    four.fit(*gc_vs_at(40))
    assert (rows_read(four, training=True), rows_read(four)) == (4 * len(X), 4 * len(X))
    one_strand = DNAClassifier(**{**SMALL, "rc_mode": "augment", "max_epochs": 1})
    assert rows_read(one_strand.fit(*gc_vs_at(40))) == len(X)


@pytest.mark.parametrize("rc_mode", ["conjoin", "posthoc"])
def test_conjoined_strands_make_predictions_strand_invariant(rc_mode):
    conjoined = DNAClassifier(**{**SMALL, "rc_mode": rc_mode, "max_epochs": 1})
    conjoined.fit(*gc_vs_at(40))
    X, _ = gc_vs_at(8, seed=3)
    np.testing.assert_allclose(
        conjoined.predict_proba(X),
        conjoined.predict_proba([reverse_complement(s) for s in X]),
        rtol=1e-5,
        atol=1e-6,
    )


def test_save_load_round_trip(fitted, tmp_path):
    X, _ = gc_vs_at(8, seed=4)
    fitted.save(tmp_path / "m")
    loaded = DNAClassifier.load(tmp_path / "m")
    np.testing.assert_allclose(loaded.predict_proba(X), fitted.predict_proba(X), rtol=1e-6)
    assert list(loaded.classes_) == list(fitted.classes_)
    config = tmp_path / "m" / "dna_classifier.json"
    meta = json.loads(config.read_text())  # reversed classes would flip every prediction
    meta["classes"].reverse()
    config.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="dna_classifier.json does not match the checksum"):
        DNAClassifier.load(tmp_path / "m")
    fitted.save(tmp_path / "m")
    flip_byte(tmp_path / "m" / "model.safetensors")  # one byte of the weights
    with pytest.raises(CheckpointError, match="model.safetensors does not match the checksum"):
        DNAClassifier.load(tmp_path / "m")
    (tmp_path / "m" / "model_manifest.json").unlink()  # as saved by an older version
    config.write_text("{")
    with pytest.raises(CheckpointError, match="has no model_manifest.json"):
        DNAClassifier.load(tmp_path / "m")  # refused unless the user trusts it
    with pytest.warns(UserWarning, match="loaded unverified"):
        with pytest.raises(DataError, match="corrupt"):
            DNAClassifier.load(tmp_path / "m", allow_unverified=True)


def test_the_stem_is_on_for_a_fresh_backbone_and_off_for_a_pretrained_one(fitted):
    assert isinstance(fitted.model_.stem, MotifStem)  # the default ("auto": width 7)
    assert fitted.model_.stem.conv.kernel_size == (7,)
    assert DNAClassifier(pretrained="folder")._model_config(2).stem_width == 0
    assert DNAClassifier(stem_width=0)._model_config(2).stem_width == 0
    with pytest.raises(ConfigError, match="stem_width must be odd"):
        DNAClassifier(stem_width=4).fit(["ACGT", "GGCC"], [0, 1])


def test_the_k_mer_head_is_on_by_default(fitted):
    assert fitted.model_.kmer.k == 6  # "auto"
    assert DNAClassifier(pretrained="folder")._model_config(2).kmer_size == 6
    assert DNAClassifier(kmer_size=0)._model_config(2).kmer_size == 0
    assert DNAClassifier(kmer_size=0, **SMALL).fit(*gc_vs_at(20)).model_.kmer is None
    with pytest.raises(ConfigError, match="kmer_size must be at most 8"):
        DNAClassifier(kmer_size=9).fit(["ACGT", "GGCC"], [0, 1])
    with pytest.raises(ConfigError, match="kmer_size must be an integer >= 0"):
        DNAClassifier(kmer_size=-1).fit(["ACGT", "GGCC"], [0, 1])


def test_a_classifier_saved_before_the_k_mer_head_loads_without_one(tmp_path):
    """A format-5 folder (no kmer_size) is read as it was trained: without the head."""
    options = {**SMALL, "kmer_size": 0, "stem_stride": 1, "max_epochs": 1}
    old = DNAClassifier(**options).fit(*gc_vs_at(40))
    old.save(tmp_path / "m")
    as_older_format(tmp_path / "m", "dna_classifier.json", 5, ["kmer_size", "stem_stride"])
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = DNAClassifier.load(tmp_path / "m", allow_unverified=True)
    assert loaded.kmer_size == 0 and loaded.model_.kmer is None
    X, _ = gc_vs_at(8, seed=4)
    np.testing.assert_allclose(loaded.predict_proba(X), old.predict_proba(X), rtol=1e-6)


def test_a_classifier_saved_before_the_stem_loads_without_one(fitted, tmp_path):
    """A format-4 folder (no stem_width) is read as it was trained: without a stem."""
    old = DNAClassifier(**{**SMALL, "stem_width": 0, "kmer_size": 0, "max_epochs": 1})
    old.fit(*gc_vs_at(40))
    old.save(tmp_path / "m")
    as_older_format(
        tmp_path / "m", "dna_classifier.json", 4, ["stem_width", "kmer_size", "stem_stride"]
    )
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = DNAClassifier.load(tmp_path / "m", allow_unverified=True)
    assert loaded.stem_width == 0
    X, _ = gc_vs_at(8, seed=4)
    np.testing.assert_allclose(loaded.predict_proba(X), old.predict_proba(X), rtol=1e-6)


def test_the_stem_patches_four_bases_by_default(fitted):
    assert fitted.model_.stem.stride == 4  # "auto"
    assert DNAClassifier(stem_width=3)._model_config(2).stem_stride == 3
    assert DNAClassifier(stem_width=0)._model_config(2).stem_stride == 1
    assert DNAClassifier(pretrained="folder")._model_config(2).stem_stride == 1
    with pytest.raises(ConfigError, match="stem_stride must be at most stem_width"):
        DNAClassifier(stem_width=5, stem_stride=6).fit(["ACGT", "GGCC"], [0, 1])
    with pytest.raises(ConfigError, match="stem_stride must be a positive integer"):
        DNAClassifier(stem_stride=0).fit(["ACGT", "GGCC"], [0, 1])


def test_a_classifier_saved_before_the_patching_stem_reads_every_base(tmp_path):
    """A format-6 folder (no stem_stride) is read as it was trained: stride 1."""
    old = DNAClassifier(**{**SMALL, "stem_stride": 1, "max_epochs": 1}).fit(*gc_vs_at(40))
    old.save(tmp_path / "m")
    as_older_format(tmp_path / "m", "dna_classifier.json", 6, ["stem_stride"])
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = DNAClassifier.load(tmp_path / "m", allow_unverified=True)
    assert loaded.stem_stride == 1 and loaded.model_.stem.stride == 1
    X, _ = gc_vs_at(8, seed=4)
    np.testing.assert_allclose(loaded.predict_proba(X), old.predict_proba(X), rtol=1e-6)


def test_long_sequences_are_truncated_with_a_warning(fitted):
    with pytest.warns(UserWarning, match="truncated"):
        clf = DNAClassifier(**{**SMALL, "max_len": 20}).fit(*gc_vs_at(20))
    assert clf.max_len_ == 20
    with pytest.warns(UserWarning, match=r"longer than 20 bases \(max_len\)"):
        clf.predict(["ACGT" * 6])


def test_the_default_backbone_reads_every_sequence_whole(fitted):
    """max_len "auto": sequences of 1,300 bases are read whole in fit, longer ones in
    predict; a change of a base after position 1,024 changes the prediction."""
    X, y = gc_vs_at(12, length=1300)
    clf = DNAClassifier(**{**SMALL, "max_epochs": 1}).fit(X, y)
    assert clf.max_len == "auto" and clf.max_len_ == 1300
    assert fitted.max_len_ == 40
    long = X[0] + "ACGT" * 200  # longer than every training sequence
    edited = long[:1500] + ("A" if long[1500] != "A" else "C") + long[1501:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no truncation warning
        p_long, p_edited = clf.predict_proba([long, edited])
    assert not np.allclose(p_long, p_edited)


def test_the_default_trains_on_a_bounded_length_and_predicts_on_the_whole(monkeypatch):
    """Under "auto" fit reads at most AUTO_TRAINING_LEN bases of a sequence (warned about,
    naming the bound and max_len); predict still reads every sequence whole."""
    import titans_seq.domains.genomics.estimator as estimator

    monkeypatch.setattr(estimator, "AUTO_TRAINING_LEN", 64)
    X, y = gc_vs_at(12, length=100)
    with pytest.warns(UserWarning, match=r"12 sequence\(s\) longer than 64 bases .*max_len"):
        clf = DNAClassifier(**{**SMALL, "max_epochs": 1}).fit(X, y)
    assert clf.max_len_ == 64
    edited = X[0][:90] + ("A" if X[0][90] != "A" else "C") + X[0][91:]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p_whole, p_edited = clf.predict_proba([X[0], edited])
    assert not np.allclose(p_whole, p_edited)


def test_the_cnn_input_length_is_the_longest_training_sequence(tmp_path):
    X, y = gc_vs_at(24, length=70)
    X[3] = X[3][:50]  # lengths vary: the CNN pads each batch to the longest one of the fit
    cnn = DNAClassifier(architecture="cnn", max_epochs=1, batch_size=8, random_state=0).fit(X, y)
    assert cnn.max_len_ == 70 and cnn.model_.input_len == 70
    with pytest.warns(UserWarning, match=r"longer than 70 bases \(the CNN's input length"):
        cnn.predict([X[0] + "ACGT" * 5])
    cnn.save(tmp_path / "cnn")
    assert DNAClassifier.load(tmp_path / "cnn").model_.input_len == 70


def test_a_cnn_saved_with_an_integer_max_len_keeps_its_input_length(tmp_path):
    """A format-7 folder has no max_len_: its integer max_len was the CNN's input length."""
    X, y = gc_vs_at(24, length=40)
    old = DNAClassifier(architecture="cnn", max_len=64, max_epochs=1, batch_size=8).fit(X, y)
    old.save(tmp_path / "m")
    config = tmp_path / "m" / "dna_classifier.json"
    meta = json.loads(config.read_text())
    del meta["max_len_"]
    config.write_text(json.dumps(meta))
    as_older_format(tmp_path / "m", "dna_classifier.json", 7)
    with pytest.warns(UserWarning, match="loaded unverified"):
        loaded = DNAClassifier.load(tmp_path / "m", allow_unverified=True)
    assert loaded.max_len_ == 64 and loaded.model_.input_len == 64
    np.testing.assert_allclose(loaded.predict_proba(X), old.predict_proba(X), rtol=1e-6)


def test_bad_input(fitted, tmp_path):
    X, y = gc_vs_at(20)
    with pytest.raises(DataError, match="single class"):
        DNAClassifier(**SMALL).fit(X, ["a"] * 20)
    with pytest.raises(DataError, match="20 sequences but y"):
        DNAClassifier(**SMALL).fit(X, y[:5])
    with pytest.raises(ValueError, match=r"sequence 1: unknown character 'X' at position 2"):
        fitted.predict(["ACGT", "ACXT"])
    with pytest.raises(ValueError, match="empty"):
        fitted.predict(["ACGT", ""])
    with pytest.raises(TypeError, match="FASTA"):
        fitted.predict("ACGTACGT")
    empty = tmp_path / "empty.fa"
    empty.write_text("")
    with pytest.raises(DataError):
        fitted.predict(str(empty))
    with pytest.raises(DataError, match=r"X\[1\] is None .*missing"):
        fitted.predict(["ACGT", None])
    with pytest.raises(FileNotFoundError, match="nonexistent.fa does not exist"):
        fitted.predict(str(tmp_path / "nonexistent.fa"))


def test_classify_command_writes_one_row_per_sequence(fitted, tmp_path, capsys):
    import pandas as pd

    from titans_seq.cli import main

    fitted.save(tmp_path / "model")
    X, _ = gc_vs_at(5, seed=5)
    fasta = tmp_path / "in.fa"
    fasta.write_text("".join(f">seq{i}\n{s}\n" for i, s in enumerate(X)))
    out = tmp_path / "pred.csv"
    argv = [
        "classify",
        "--model",
        str(tmp_path / "model"),
        "--fasta",
        str(fasta),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    table = pd.read_csv(out)
    assert list(table.columns) == ["id", "prediction", "p_at_rich", "p_gc_rich"]
    assert table["id"].tolist() == [f"seq{i}" for i in range(5)]
    assert (table["prediction"] == fitted.predict(X)).all()
    assert "5 sequences classified" in capsys.readouterr().out
    # a folder without its manifest only with the flag that trusts it
    (tmp_path / "model" / "model_manifest.json").unlink()
    assert main(argv) == 2 and "--allow-unverified-model" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="loaded unverified"):
        assert main([*argv, "--allow-unverified-model"]) == 0


@pytest.mark.parametrize(
    "labels, message",
    [
        ([1, "a", 1, "a"], "mixes label kinds"),
        ([1.0, float("nan"), 1.0, 0.0], r"missing label\(s\) \(None or NaN\), at positions \[1\]"),
        ([None, 1, 0, 1], r"at positions \[0\]"),
        (["a", None, "b", "a"], r"at positions \[1\]"),
        ([0.5, 1.5, 0.5, 1.5], "continuous values"),
        ([1, 2, 1], "4 sequences but y has shape"),
    ],
)
def test_labels_of_one_kind_none_missing(labels, message):
    with pytest.raises(DataError, match=message):
        DNAClassifier(max_epochs=1).fit(["ACGT", "GGCC", "ACGA", "GGCA"], labels)


def test_labels_keep_their_type():
    X = ["ACGTAC", "GGCCGG", "ACGTTT", "GGGCCC"]
    for labels in ([1, 2, 1, 2], ["x", "y", "x", "y"], [True, False, True, False]):
        clf = DNAClassifier(max_epochs=1, dim=16, heads=2, random_state=0).fit(X, labels)
        predicted = clf.predict(X)
        assert all(type(p.item()) is type(labels[0]) for p in predicted), predicted


def test_predictions_follow_the_input_order(fitted):
    """Scoring runs in length order; the rows come back in the caller's order."""
    X, _ = gc_vs_at(12, seed=7)
    X = [s[: 10 + 3 * i] for i, s in enumerate(X)][::-1]  # lengths 43 down to 10
    proba = fitted.predict_proba(X)
    one_by_one = np.concatenate([fitted.predict_proba([s]) for s in X])
    np.testing.assert_allclose(proba, one_by_one, rtol=1e-5, atol=1e-6)
