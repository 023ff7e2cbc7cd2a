"""benchmarks/grids/lm_long_context.py end to end at toy size: a mixer trained and scored,
the control that reads only the prompts' last bytes added to the same rows, and a finished
run re-scored (another control, lengths its stored scores lack, other examples) from its run
folder without training again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "benchmarks" / "grids")]

import lm_long_context  # noqa: E402

TOY = ["--mixers", "swa", "--device", "cpu", "--threads", "1", "--train-length", "128",
       "--factors", "1,2", "--steps", "2", "--batch-size", "2", "--dim", "16", "--depth", "1",
       "--heads", "2", "--window", "16", "--chunk-size", "8", "--no-match-params",
       "--samples", "2", "--depths", "0,1", "--val-samples", "4", "--evals", "1",
       "--tasks", "niah_passkey", "--quiet"]  # fmt: skip


def test_the_last_bytes_control_joins_the_rows_and_rescores_a_finished_run(tmp_path):
    out, record = tmp_path / "grid", tmp_path / "suite.json"
    args = [*TOY, "--out-dir", str(out), "--json", str(record), "--compare-context", "32"]
    assert lm_long_context.main(args) == 0
    payload = json.loads(record.read_text())
    assert payload["reset_context"] == 32
    cells = {(r["task"], r["length"], r["metric"]) for r in payload["rows"]}
    assert cells == {
        (t, n, m)
        for t in ("niah_passkey", "niah_passkey:reset")
        for n in (128, 256)
        for m in ("accuracy", "characters")
    }
    assert all(0.0 <= r["value"] <= 1.0 for r in payload["rows"])
    value = {(r["task"], r["length"], r["metric"]): r["value"] for r in payload["rows"]}
    for task, length, _ in cells:  # an exact answer has every character right
        assert value[task, length, "characters"] >= value[task, length, "accuracy"]
    assert "mean, last 32 bytes only" in (out / "long_context.md").read_text()

    finished = json.loads((out / "swa.json").read_text())
    args[args.index("32")] = "64"
    assert lm_long_context.main(args) == 0
    again = json.loads((out / "swa.json").read_text())
    assert again["train_seconds"] == finished["train_seconds"]  # not trained again
    assert again["reset_evaluation"]["context"] == 64
    assert json.loads(record.read_text())["reset_context"] == 64

    args[args.index("--samples") + 1] = "1"  # other examples: the control scored anew with them
    assert lm_long_context.main(args) == 0
    other = json.loads((out / "swa.json").read_text())
    assert other["evaluation"]["samples"] == other["reset_evaluation"]["samples"] == 1


def test_a_control_of_no_bytes_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="--compare-context"):
        lm_long_context.main([*TOY, "--out-dir", str(tmp_path), "--compare-context", "0"])


def test_a_finished_run_is_scored_at_the_lengths_it_lacks_and_keeps_the_rest(tmp_path):
    out, record = tmp_path / "grid", tmp_path / "suite.json"
    args = [*TOY, "--out-dir", str(out), "--json", str(record)]
    assert lm_long_context.main(args) == 0
    finished = json.loads((out / "swa.json").read_text())
    assert finished["evaluation"]["lengths"] == [128, 256]

    args[args.index("1,2")] = "2,3"
    assert lm_long_context.main(args) == 0
    again = json.loads((out / "swa.json").read_text())
    assert again["train_seconds"] == finished["train_seconds"]  # not trained again
    assert again["evaluation"]["lengths"] == [128, 256, 384]
    for measure in ("scores", "characters"):  # the stored cells kept as they were
        for n in ("128", "256"):
            kept = again["evaluation"][measure]["niah_passkey"][n]
            assert kept == finished["evaluation"][measure]["niah_passkey"][n]
    assert set(again["mean_by_length"]) == {"128", "256", "384"}
    payload = json.loads(record.read_text())
    assert {r["length"] for r in payload["rows"]} == {256, 384}  # the lengths asked for
    assert "| 256 | 384 |" in (out / "long_context.md").read_text()

    args[args.index("--samples") + 1] = "1"  # other examples: every length scored anew
    assert lm_long_context.main(args) == 0
    other = json.loads((out / "swa.json").read_text())["evaluation"]
    assert other["samples"] == 1 and other["lengths"] == [256, 384]


def test_a_finished_run_trained_otherwise_is_refused_by_the_settings_that_differ(tmp_path):
    out = tmp_path / "grid"
    assert lm_long_context.main([*TOY, "--out-dir", str(out)]) == 0
    finished = (out / "swa.json").read_text()
    steps = TOY.index("--steps") + 1
    other = [*TOY[:steps], "3", *TOY[steps + 1 :], "--out-dir", str(out)]
    with pytest.raises(SystemExit, match=r"train\.max_steps: 2 -> 3.*another --out-dir"):
        lm_long_context.main(other)
    assert (out / "swa.json").read_text() == finished  # nothing rewritten
    # what only changes how a run is reported (here its progress bars) is no other training
    loud = [a for a in TOY if a != "--quiet"]
    assert lm_long_context.main([*loud, "--out-dir", str(out)]) == 0
