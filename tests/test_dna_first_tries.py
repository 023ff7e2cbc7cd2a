"""benchmarks/studies/dna_first_tries.py: the baselines a user tries first, on a re-split of
a mirrored GenomicsBenchmarks task."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import dna_first_tries  # noqa: E402


def test_the_kmer_and_length_rows_fit_and_score(tmp_path):
    if not os.environ.get("TITANS_SEQ_DATA"):
        pytest.skip("needs the data mirror ($TITANS_SEQ_DATA)")
    import argparse

    options = argparse.Namespace(threads=1, test=60, titans_options="{}")
    runs = [
        dna_first_tries.run_one("human_nontata_promoters", model, 120, 0, options)
        for model in ("kmer", "length")
    ]
    assert [(r["model"], r["train"], r["test"]) for r in runs] == [
        ("kmer", 120, 60), ("length", 120, 60),
    ]  # fmt: skip
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in runs)
    text = dna_first_tries.table(runs)
    assert "| human_nontata_promoters | 120 | kmer |" in text


def test_the_kmer_model_reads_both_strands():
    assert dna_first_tries.reverse_complement("AACGT") == "ACGTT"
    model = dna_first_tries.fit_model("kmer", ["AAAAAAAC", "GGGGGGGT"] * 4, [0, 1] * 4, 0)
    assert list(model.predict(["TTTTTTTT", "CCCCCCCC"])) == [0, 1]  # the other strands
