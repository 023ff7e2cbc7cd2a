"""The classifier's cheap members: the k-mer model and the length tree agree with the
scikit-learn models they store, and a cheap member predicts only where validation shows it
clearly ahead of the network."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from format_helpers import edited_config

from titans_seq.data import DataError
from titans_seq.domains.genomics import DNAClassifier, DNATokenizer
from titans_seq.domains.genomics.cheap_models import (
    KmerModel,
    LengthModel,
    choose_member,
    kmer_features,
)
from titans_seq.errors import ConfigError

CONFIG = "dna_classifier.json"
SMALL = dict(dim=16, depth=1, heads=2, mixer_options={"chunk_size": 8}, max_epochs=4,
             batch_size=16, learning_rate=3e-3, random_state=0)  # fmt: skip


def gc_vs_at(n=120, length=40, seed=0):
    """Equal lengths; 'gc_rich' draws 80% G/C, 'at_rich' 80% A/T."""
    rng = np.random.default_rng(seed)
    rich = np.arange(n) % 2 == 0
    seqs = ["".join(rng.choice(list("ACGT"), size=length, p=[0.1, 0.4, 0.4, 0.1] if r
                               else [0.4, 0.1, 0.1, 0.4])) for r in rich]  # fmt: skip
    return seqs, np.where(rich, "gc_rich", "at_rich")


def length_task(n=160, seed=0):
    """Random bases; class 'long' is 150-200 bases, 'short' 60-100: only length tells."""
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for i in range(n):
        long = i % 2 == 0
        size = int(rng.integers(150, 200) if long else rng.integers(60, 100))
        seqs.append("".join(rng.choice(list("ACGT"), size=size)))
        labels.append("long" if long else "short")
    return seqs, np.array(labels)


def encoded(seqs):
    return DNATokenizer().batch(seqs, [str(i) for i in range(len(seqs))])


@pytest.mark.parametrize("classes", [2, 3])
def test_the_kmer_model_is_the_logistic_regression_it_stores(classes):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(classes)
    seqs = ["".join(rng.choice(list("ACGTN"), size=int(rng.integers(20, 60)))) for _ in range(90)]
    labels = np.arange(90) % classes
    ids, lengths = encoded(seqs)
    model = KmerModel.fit(ids, lengths, labels, classes, seed=0)
    features = kmer_features(ids, lengths)
    want = LogisticRegression(max_iter=2000, random_state=0).fit(features, labels)
    np.testing.assert_allclose(model.proba(ids, lengths), want.predict_proba(features), atol=1e-6)
    again = KmerModel.from_state(json.loads(json.dumps(model.state())))
    np.testing.assert_array_equal(again.proba(ids, lengths), model.proba(ids, lengths))


def test_the_length_model_is_the_tree_it_stores():
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 400, size=300)
    labels = (lengths > 120).astype(int) + (lengths > 260)  # three classes by length
    labels[rng.random(300) < 0.1] = 0  # and some noise, so that leaves are mixed
    model = LengthModel.fit(torch.as_tensor(lengths), labels, 3, seed=0)
    tree = DecisionTreeClassifier(max_depth=3, random_state=0).fit(lengths[:, None], labels)
    probe = np.arange(0, 500)  # every length, the thresholds' neighbours included
    np.testing.assert_allclose(model.proba(None, probe), tree.predict_proba(probe[:, None]))
    same = LengthModel.fit(torch.full((10,), 7), np.arange(10) % 2, 2, seed=0)
    np.testing.assert_allclose(same.proba(None, np.array([1, 7, 99])), 0.5)  # no split


def _correct(n, right):
    """[n] bool with the positions in `right` True."""
    out = np.zeros(n, dtype=bool)
    out[list(right)] = True
    return out


def test_a_cheap_member_is_chosen_only_when_clearly_ahead():
    network = _correct(100, range(80))  # 80 of 100 right
    # right on 12 that the network misses, wrong on 2 it gets: 10 >= 2 x sqrt(14)
    kmer = _correct(100, [*range(2, 80), *range(80, 92)])
    assert choose_member({"network": network, "kmer": kmer}) == "kmer"
    # 8 against 6: two more, well within the noise
    close = _correct(100, [*range(6, 80), *range(80, 88)])
    assert choose_member({"network": network, "kmer": close}) == "network"
    # the larger gain wins between two that pass
    length = _correct(100, [*range(0, 80), *range(80, 100)])
    assert choose_member({"network": network, "kmer": kmer, "length": length}) == "length"
    assert choose_member({"network": network}) == "network"
    few = _correct(4, [0]), _correct(4, [0, 1])  # one more right: never enough
    assert choose_member({"network": few[0], "kmer": few[1]}) == "network"


def test_where_only_the_length_tells_the_classes_the_length_model_predicts(tmp_path):
    X, y = length_task()
    clf = DNAClassifier(**{**SMALL, "max_epochs": 1}, validation_fraction=0.25).fit(X, y)
    assert clf.member_ == "length" and clf.baseline_model_ is not None
    assert clf.member_accuracies_["length"] >= clf.member_accuracies_["network"] + 0.2
    X_test, y_test = length_task(60, seed=1)
    assert clf.score(X_test, y_test) > 0.95
    clf.save(tmp_path / "m")
    loaded = DNAClassifier.load(tmp_path / "m")
    assert loaded.member_ == "length" and loaded.member_accuracies_ == clf.member_accuracies_
    np.testing.assert_array_equal(loaded.predict_proba(X_test), clf.predict_proba(X_test))
    alone = DNAClassifier(**{**SMALL, "max_epochs": 1}, baselines=None).fit(X, y)
    assert alone.member_ == "network" and alone.member_accuracies_ is None


def test_equal_lengths_leave_the_length_model_out_and_the_network_kept():
    clf = DNAClassifier(**SMALL).fit(*gc_vs_at())
    assert set(clf.member_accuracies_) == {"network", "kmer"}
    assert clf.member_ == "network"  # both separate GC from AT: the network stays
    no_validation = DNAClassifier(**{**SMALL, "max_epochs": 1}, validation_fraction=0.0)
    assert no_validation.fit(*gc_vs_at(40)).member_accuracies_ is None


def test_saved_members_are_checked_and_older_folders_predict_with_the_network(tmp_path):
    with pytest.raises(ConfigError, match="baselines must be 'auto' or None"):
        DNAClassifier(baselines="kmer").fit(["ACGT", "GGCC"], [0, 1])
    X, y = length_task(80)
    clf = DNAClassifier(**{**SMALL, "max_epochs": 1}, validation_fraction=0.25).fit(X, y)
    assert clf.member_ == "length"
    clf.save(tmp_path / "old")

    def as_format_8(meta):  # as version 8 wrote it: no baselines, no member
        meta["format_version"] = 8
        del meta["params"]["baselines"]
        for key in ("member", "member_accuracies", "baseline_model"):
            del meta[key]

    edited_config(tmp_path / "old", CONFIG, as_format_8)
    with pytest.warns(UserWarning, match="loaded unverified"):
        old = DNAClassifier.load(tmp_path / "old", allow_unverified=True)
    assert old.member_ == "network" and old.baseline_model_ is None
    for folder, change, message in [
        ("bad_member", lambda m: m.update(member="forest"), "member 'forest' is none of"),
        ("no_arrays", lambda m: m.update(baseline_model=None), "does not hold its arrays"),
    ]:
        clf.save(tmp_path / folder)
        edited_config(tmp_path / folder, CONFIG, change)
        with pytest.warns(UserWarning, match="loaded unverified"):
            with pytest.raises(DataError, match=message):
                DNAClassifier.load(tmp_path / folder, allow_unverified=True)
