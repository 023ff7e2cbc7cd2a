"""Where the genomics recipes take their sequences from: a registered benchmark, its split,
and the seeded 70/10/20 re-split used when only the official test split is at hand.

    data:
      dataset: human_nontata_promoters   # any registered GenomicsBenchmarks name
      split: test                        # the official split to read
      resplit: true                      # 70/10/20 stratified re-split of it, seed `seed`
      seed: 0

With `resplit: false` the official `train` split gives train (90%) and validation (10%,
stratified, seeded) and the official `test` split is the test part. With `resplit: true`
the one official `split` is cut 70/10/20 (`titans_seq.data.train_val_test_resplit`): the
offline mirror holds only the test splits, so that is the setting that runs offline, and
its scores are not comparable with published train-on-train/test-on-test numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Literal

import numpy as np

from titans_seq.data import SequenceDataset, load_genomic_benchmark, train_val_test_resplit
from titans_seq.training.config import ConfigError


@dataclasses.dataclass
class BenchmarkSourceConfig:
    """The `data:` keys that pick a registered benchmark's sequences (shared by the
    classification and the pretraining recipes)."""

    # a registered GenomicsBenchmarks name, the official split to read, and whether to
    # re-split it 70/10/20 with `seed` (the offline mirror holds only the test splits)
    dataset: str | None = None
    split: Literal["train", "test"] = "train"
    resplit: bool = False
    seed: int = 0
    # subsample the training / validation parts (quick runs); null keeps everything
    max_train: int | None = None
    max_val: int | None = None
    # reject IUPAC ambiguity codes instead of mapping them to N
    strict: bool = False


PARTS = ("train", "val", "test")
RESPLIT_FRACTIONS = (0.7, 0.1, 0.2)
OFFICIAL_TRAIN_VAL = (0.9, 0.1, 0.0)


def benchmark_parts(
    dataset: str | None, split: str, resplit: bool, seed: int
) -> dict[str, SequenceDataset]:
    """{"train", "val", "test"} parts of a registered benchmark, as the data section says."""
    if not dataset:
        raise ConfigError(
            "data.dataset: name a registered GenomicsBenchmarks dataset (e.g. "
            "human_nontata_promoters) to train from a recipe"
        )
    data_dir = os.environ.get("TITANS_SEQ_DATA")
    if resplit:
        full = _load(dataset, split, data_dir)
        return dict(zip(PARTS, train_val_test_resplit(full, RESPLIT_FRACTIONS, seed)))
    official = _load(dataset, "train", data_dir)
    train, val, _ = train_val_test_resplit(official, OFFICIAL_TRAIN_VAL, seed)
    test = _load(dataset, "test", data_dir)
    return {"train": train, "val": val, "test": test.subset(range(len(test)))}


@functools.lru_cache(maxsize=4)
def _load(dataset: str, split: str, data_dir: str | None) -> SequenceDataset:
    # parsing and validating a benchmark split takes seconds; a pretraining run, the
    # fine-tuning runs and the benchmark's test evaluation of one process read the same
    # split. Callers only ever see subsets (new objects), so the cached one stays intact.
    del data_dir  # part of the cache key only: the lookup reads TITANS_SEQ_DATA itself
    return load_genomic_benchmark(dataset, split)


def subsample(data: SequenceDataset, limit: int | None, seed: int) -> SequenceDataset:
    """At most `limit` items, drawn without replacement with a seeded RNG (order kept)."""
    if limit is None or limit >= len(data):
        return data
    if limit <= 0:
        raise ConfigError(f"a subsample size must be positive, got {limit}")
    keep = np.sort(np.random.default_rng(seed).choice(len(data), size=limit, replace=False))
    return data.subset(keep, source=f"{data.source} [subsample {limit}, seed {seed}]")


def describe_protocol(dataset: str, split: str, resplit: bool, seed: int) -> str:
    """One line saying which data a result was computed on (for logs and benchmark tables)."""
    if resplit:
        return (
            f"{dataset}: official {split} split re-split 70/10/20 (stratified, seed {seed}); "
            "not comparable with published train/test scores"
        )
    return f"{dataset}: official train split (90/10 train/val, seed {seed}), official test split"
