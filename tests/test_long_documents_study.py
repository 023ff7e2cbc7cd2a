"""benchmarks/studies/long_documents.py: its rows are bits per byte of each position bucket,
and its table averages them over seeds, carried beside reset."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "studies"))

import long_documents  # noqa: E402


def _run(seed: int, carried: list[float], reset: list[float], val: float) -> dict:
    def result(carry: bool, losses: list[float]) -> dict:
        edges = [0, 128, 256, 512]
        buckets = [
            {"start": a, "end": b, "tokens": b - a, "loss": loss}
            for a, b, loss in zip(edges, edges[1:], losses)
        ]
        return {"carry_state": carry, "buckets": buckets}

    return {
        "variant": "streams",
        "mixer": "lmm",
        "seed": seed,
        "train_seconds": None,
        "val_bpb": val,
        "results": [result(True, carried), result(False, reset)],
    }


def test_rows_are_bits_per_byte_by_bucket_and_the_table_averages_seeds():
    runs = [
        _run(0, [1.0, 0.9, None], [1.0, 1.0, None], 2.0),
        _run(1, [2.0, 1.1, None], [2.0, 1.2, None], 2.2),
    ]
    rows = long_documents.rows(runs)
    carried = [r for r in rows if r["task"] == "long_documents:carried" and r["seed"] == 0]
    assert [(r["length"], r["metric"]) for r in carried] == [(128, "bpb"), (256, "bpb")]
    assert carried[0]["value"] == pytest.approx(1.0 / math.log(2))  # nats per byte -> bits
    assert {r["model"] for r in rows} == {"lmm/streams"}
    table = long_documents.table(rows).splitlines()
    assert table[0] == "| model | val bpb at 256 | to 128 | to 256 |"
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    assert cells[:2] == ["lmm/streams", "2.100"]
    bits = 1 / math.log(2)
    assert cells[2] == f"{1.5 * bits:.3f} / {1.5 * bits:.3f}"
    assert cells[3] == f"{1.0 * bits:.3f} / {1.1 * bits:.3f}"
