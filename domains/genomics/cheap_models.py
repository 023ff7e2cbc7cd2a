"""The models a user fits first on a small labelled DNA set, as members the classifier can
choose instead of its network: k-mer counts with a logistic regression, and the sequence's
length alone. Both fit in about a second and are stored as plain arrays (JSON), so that a
saved classifier never needs pickle.

`choose_member` compares them with the network on the validation share: the network stays
the choice unless a cheap model is clearly more accurate there.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from scipy.special import softmax

from .kmer_profile import kmer_profile

KMER_SIZE = 6
LENGTH_TREE_DEPTH = 3
# a cheap model replaces the network only where, over the validation sequences that the
# two classify differently, it is right on this many standard errors more of them than the
# network (McNemar's paired comparison): a validation share of 100 sequences cannot tell
# models 1-2% apart, and choosing by its noise would lose accuracy on average
MIN_Z = 2.0
MIN_MORE_CORRECT = 2
NETWORK, KMER, LENGTH = "network", "kmer", "length"
MEMBERS = (NETWORK, KMER, LENGTH)


def kmer_features(ids: torch.Tensor, lengths: torch.Tensor, batch: int = 512) -> np.ndarray:
    """[N, 4**k] float32: the normalised k-mer counts of both strands (`kmer_profile`),
    computed in batches so that memory stays bounded."""
    parts = [
        kmer_profile(ids[i : i + batch], lengths[i : i + batch], KMER_SIZE).numpy()
        for i in range(0, len(ids), batch)
    ]
    return np.concatenate(parts)


@dataclasses.dataclass
class KmerModel:
    """A logistic regression over `kmer_features`: weights [C, 4**k], bias [C] (logits)."""

    weight: np.ndarray
    bias: np.ndarray

    @classmethod
    def fit(cls, ids, lengths, labels: np.ndarray, num_classes: int, seed: int) -> KmerModel:
        from sklearn.linear_model import LogisticRegression

        fitted = LogisticRegression(max_iter=2000, random_state=seed)
        fitted.fit(kmer_features(ids, lengths), labels)
        weight = np.zeros((num_classes, fitted.coef_.shape[1]))
        bias = np.zeros(num_classes)
        if len(fitted.classes_) == 2:  # one column of log-odds: class 1 against class 0
            second = fitted.classes_[1]
            weight[second], bias[second] = fitted.coef_[0], fitted.intercept_[0]
        else:
            weight[fitted.classes_], bias[fitted.classes_] = fitted.coef_, fitted.intercept_
        return cls(weight, bias)

    def proba(self, ids, lengths) -> np.ndarray:
        """[N, C] class probabilities."""
        return softmax(kmer_features(ids, lengths) @ self.weight.T + self.bias, axis=1)

    def state(self) -> dict:
        return {"weight": self.weight.tolist(), "bias": self.bias.tolist()}

    @classmethod
    def from_state(cls, state: dict) -> KmerModel:
        return cls(np.asarray(state["weight"], float), np.asarray(state["bias"], float))


@dataclasses.dataclass
class LengthModel:
    """A depth-3 decision tree on the length, stored as what it is: the lengths it splits
    at, `thresholds` [K] ascending, and the class probabilities of each of the K + 1
    intervals they make, `interval_proba` [K + 1, C] (a length equal to a threshold falls
    in the interval below it, as the tree sends it left)."""

    thresholds: np.ndarray
    interval_proba: np.ndarray

    @classmethod
    def fit(cls, lengths, labels: np.ndarray, num_classes: int, seed: int) -> LengthModel:
        from sklearn.tree import DecisionTreeClassifier

        x = np.asarray(lengths, dtype=np.float64)[:, None]
        tree = DecisionTreeClassifier(max_depth=LENGTH_TREE_DEPTH, random_state=seed)
        tree.fit(x, labels)
        split = tree.tree_.children_left >= 0  # internal nodes
        thresholds = np.unique(tree.tree_.threshold[split])
        # one length inside each interval: each threshold itself, and one past the last
        inside = np.r_[thresholds, (thresholds[-1] if len(thresholds) else 0.0) + 1.0]
        proba = np.zeros((len(inside), num_classes))
        proba[:, tree.classes_] = tree.predict_proba(inside[:, None])
        return cls(thresholds, proba)

    def proba(self, ids, lengths) -> np.ndarray:
        """[N, C] class probabilities from the lengths alone."""
        x = np.asarray(lengths, dtype=np.float64)
        return self.interval_proba[np.searchsorted(self.thresholds, x, side="left")]

    def state(self) -> dict:
        return {
            "thresholds": self.thresholds.tolist(),
            "interval_proba": self.interval_proba.tolist(),
        }

    @classmethod
    def from_state(cls, state: dict) -> LengthModel:
        return cls(
            np.asarray(state["thresholds"], float), np.asarray(state["interval_proba"], float)
        )


CHEAP_MODELS = {KMER: KmerModel, LENGTH: LengthModel}


def fit_cheap_model(name: str, ids, lengths, labels: np.ndarray, num_classes: int, seed: int):
    if name == KMER:
        return KmerModel.fit(ids, lengths, labels, num_classes, seed)
    return LengthModel.fit(lengths, labels, num_classes, seed)


def choose_member(correct: dict[str, np.ndarray]) -> str:
    """The member to predict with, from which validation sequences each member classifies
    correctly ([M] bool each, the network's under NETWORK): the cheap model with the most
    where it is right on at least MIN_MORE_CORRECT and MIN_Z standard errors more of the
    sequences the two disagree on than the network, else the network."""
    network = correct[NETWORK]
    best, best_gain = NETWORK, 0
    for name, right in correct.items():
        if name == NETWORK:
            continue
        only_cheap = int((right & ~network).sum())
        only_network = int((network & ~right).sum())
        gain = only_cheap - only_network
        if gain >= MIN_MORE_CORRECT and gain >= MIN_Z * np.sqrt(only_cheap + only_network):
            if gain > best_gain:
                best, best_gain = name, gain
    return best
