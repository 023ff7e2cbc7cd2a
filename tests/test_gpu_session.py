"""`benchmarks/gpu_session.py`, the GPU session driver, checked on the CPU: its pieces (the
pytest log parser, the time limits, a child cut at its limit, `gpu_session.sh`'s
long-context stage) in the default run, and the
whole session at toy sizes under Triton's interpreter (`slow`), so that a GPU window is not
lost to an error of the script itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from process_helpers import subprocess_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_session  # noqa: E402
from harness import TimeLimits, run_child, run_jobs_side_by_side  # noqa: E402

NODE = "tests/ops/test_lmm_triton.py::test_triton_gpu_matches_reference[{'depth': 1, 'T': 77}]"


def test_the_pytest_log_parser_reads_plain_and_xdist_lines_and_failure_reasons():
    log = "\n".join(
        [
            f"{NODE} PASSED [ 10%]",
            "[gw3] [ 20%] FAILED tests/test_attention.py::test_flex[cuda-64]",
            "[gw1] [ 30%] SKIPPED tests/test_attention.py::test_flex[cuda-128]",
            "tests/test_attention.py::test_flex[cuda-256] ",  # started, never finished
            "FAILED tests/test_attention.py::test_flex[cuda-64] - AssertionError: 3e-2 > 1e-2",
        ]
    )
    parsed = gpu_session.parse_pytest_log(log)
    assert parsed["counts"] == {"passed": 1, "failed": 1, "skipped": 1}
    by_node = {t["test"]: t for t in parsed["tests"]}
    assert by_node[NODE]["outcome"] == "passed"  # a node id with spaces stays whole
    failed = by_node["tests/test_attention.py::test_flex[cuda-64]"]
    assert failed["reason"] == "AssertionError: 3e-2 > 1e-2"


def test_time_limits_take_a_row_own_limit_the_default_and_the_total():
    limits = TimeLimits(default=30, per_row={"lmm/torch": 60}, total=45)
    assert limits.for_row("sdpa") == 30
    assert 44 < limits.for_row("lmm/torch") <= 45  # the total caps the row's own 60
    assert TimeLimits().for_row("sdpa") is None
    spent = TimeLimits(default=30, total=0)
    assert spent.for_row("sdpa") == 0


def test_a_child_cut_at_its_limit_keeps_what_it_printed(tmp_path):
    code = "import json, time; print(json.dumps({'T': 1}), flush=True); time.sleep(60)"
    start = time.monotonic()
    result = run_child([sys.executable, "-c", code], timeout=3, log=tmp_path / "child.log")
    assert time.monotonic() - start < 30
    assert result.timed_out and result.records == [{"T": 1}]
    assert "time limit" in result.error()
    assert '{"T": 1}' in (tmp_path / "child.log").read_text()
    failed = run_child([sys.executable, "-c", "raise SystemExit('no GPU here')"], timeout=30)
    assert failed.returncode == 1 and failed.error() == "no GPU here"


def test_study_jobs_run_side_by_side_in_order_and_a_failure_names_its_job(tmp_path, capsys):
    script = tmp_path / "study.py"
    script.write_text(
        "import json, os, sys\n"
        "name, n = sys.argv[sys.argv.index('--_one') + 1:]\n"
        "if name == 'bad': sys.exit('no data for bad')\n"
        "print(json.dumps({'name': name, 'n': int(n), 'threads': os.environ['OMP_NUM_THREADS']}))\n"
    )
    runs = run_jobs_side_by_side(script, ["--x"], [("a", 1), ("b", 2)], threads=3, parallel=2)
    assert runs == [{"name": "a", "n": 1, "threads": "3"}, {"name": "b", "n": 2, "threads": "3"}]
    assert capsys.readouterr().out.count('"name"') == 2  # each printed as it arrived
    with pytest.raises(RuntimeError, match=r"\('bad', 1\): no data for bad"):
        run_jobs_side_by_side(script, [], [("bad", 1)], threads=1, parallel=1)


def test_a_study_job_past_its_limit_is_cut_and_reported(tmp_path):
    script = tmp_path / "study.py"
    script.write_text(
        "import json, sys, time\n"
        "name = sys.argv[sys.argv.index('--_one') + 1]\n"
        "if name == 'slow': time.sleep(60)\n"
        "print(json.dumps({'name': name}))\n"
    )
    start = time.monotonic()
    runs = run_jobs_side_by_side(script, [], [("slow",), ("fast",)], 1, 2, limit=3)
    assert time.monotonic() - start < 30
    assert runs == [{"job": ["slow"], "cut_at_seconds": 3}, {"name": "fast"}]


def test_warm_up_groups_deal_the_rows_round_robin():
    rows = ["a", "b", "c", "d", "e"]
    assert gpu_session.warmup_groups(rows, 3) == [["a", "d"], ["b", "e"], ["c"]]
    assert gpu_session.warmup_groups(rows[:2], 3) == [["a"], ["b"]]
    assert gpu_session.warmup_groups(rows, 1) == [rows]


def test_the_command_line_picks_rows_mixers_and_caps_and_refuses_malformed_ones():
    sizes = gpu_session.with_overrides(
        gpu_session.GPU, stage_seconds=["tests=150", "warmup=60"],
        row_seconds=["lmm/compiled=200", "*=40"], layer_rows=["lmm/compiled", "mac"],
        lm_mixers=["mag"], profile_rows=["lmm/torch"], precisions=["ieee", "bf16"],
        precision_seeds=[3, 4], precision_set=["optim.lr=5e-4"], lm_compile="both",
    )  # fmt: skip
    assert sizes.layer_rows == ["lmm/compiled", "mac"] and sizes.lm_mixers == ["mag"]
    assert sizes.lm_compile == "both" and gpu_session.GPU.lm_compile == "no"
    assert sizes.precisions == ["ieee", "bf16"] and sizes.precision_seeds == [3, 4]
    assert sizes.precision_recipe == [*gpu_session.GPU.precision_recipe, "optim.lr=5e-4"]
    assert sizes.profile_rows == ["lmm/torch"]
    assert sizes.row_seconds["lmm/compiled"] == 200 and sizes.row_seconds["*"] == 40
    assert sizes.row_seconds["mac"] == gpu_session.GPU.row_seconds["mac"]  # others kept
    assert sizes.stage_seconds["tests"] == 150 and sizes.stage_seconds["warmup"] == 60
    assert gpu_session.with_overrides(gpu_session.GPU) == gpu_session.GPU
    for bad in ({"stage_seconds": ["layer=10"]}, {"row_seconds": ["mac"]},
                {"row_seconds": ["=5"]}, {"stage_seconds": ["lm=soon"]},
                {"precision_set": ["optim.lr"]}):  # fmt: skip
        with pytest.raises(ValueError):
            gpu_session.with_overrides(gpu_session.GPU, **bad)


@pytest.mark.slow
def test_the_whole_session_runs_at_toy_sizes_and_reruns_what_was_cut(tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "out"
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "gpu_session.py"), "--toy", "--out", str(out),
        "--budget", "400", "--stage-seconds", "lm=12",
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=subprocess_env(TRITON_INTERPRET="1"), timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "conv.json", "layers.json", "layers.log", "lm.json", "lm.log", "session.log",
        "summary.json", "tests.json", "tests.log",
    ]  # fmt: skip
    log = (out / "session.log").read_text()
    assert "compile warm-up of the layer rows lmm/triton, sdpa, titans-pytorch: exit code 0" in log
    assert "compile warm-up of the layer rows lmm/torch, mag: exit code 0" in log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["machine"]["toy"] is True and summary["machine"]["commit"]
    assert list(summary["stages"]) == ["tests", "layers", "lm", "precision", "profile", "rest"]
    assert all(s["status"] == "done" for s in summary["stages"].values()), summary["stages"]

    tests = json.loads((out / "tests.json").read_text())
    assert tests["counts"]["passed"] == 1 and tests["counts"]["skipped"] >= 20

    layers = json.loads((out / "layers.json").read_text())
    assert {"device", "date", "commit", "rows"} <= set(layers)
    ours = [r for r in layers["rows"] if r["name"] != "titans-pytorch"]
    assert {(r["name"], r["T"]) for r in ours} == {
        (name, T) for name in ("lmm/triton", "lmm/torch", "sdpa", "mag") for T in (16, 32)
    }
    for row in ours:
        assert "error" not in row, row
        assert row["tokens_per_s"] > 0 and {"B", "peak_mib"} <= set(row)

    # the LM stage's 12 s cut it short; the rest stage measured the rest
    assert summary["stages"]["rest"]["lm_mixers"]
    lm = json.loads((out / "lm.json").read_text())
    assert {(r["mixer"], r["seq_len"]) for r in lm["rows"]} == {
        (m, n) for m in ("attention", "lmm") for n in (32, 16)
    }
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in lm["rows"]), lm["rows"]
    # the same short training run once per memory dot precision and seed, every evaluation
    # kept; the seed reaches the run (the CPU has no reduced-precision dots, so the two
    # precisions of one seed agree here)
    runs = lm["precision"]["runs"]
    assert [(r["dot_precision"], r["seed"]) for r in runs] == [
        ("ieee", 0), ("ieee", 1), ("bf16", 0), ("bf16", 1),
    ]  # fmt: skip
    assert all(r["val"]["loss"] > 0 and len(r["evals"]) == 2 for r in runs), runs
    assert runs[0]["val"]["loss"] != runs[1]["val"]["loss"]
    # the profile: the top operators of each profiled row at both lengths
    profiles = layers["profiles"]
    assert {(r["name"], r["T"]) for r in profiles} == {
        (name, T) for name in ("lmm/triton", "lmm/torch") for T in (16, 32)
    }
    assert all(r["profile"] and r["profile"][0]["ms_per_step"] > 0 for r in profiles), profiles
    # then the convolution alone, every backend of the device (oneDNN's on a CPU only)
    conv = json.loads((out / "conv.json").read_text())["rows"]
    assert [r["name"] for r in conv] == ["triton", "onednn", "torch", "conv1d"]
    assert all("error" not in r and r["ms"] > 0 for r in conv), conv


def test_the_lm_stage_times_each_model_eagerly_and_compiled(tmp_path):
    """`lm_throughput.py --compile both` measures every row twice, the model eager and
    under torch.compile (the table says which); here at toy size on the CPU."""
    import lm_throughput

    argv = [
        *("--device", "cpu", "--preset", "tiny", "--vocab-size", "64", "--contexts", "16x1"),
        *("--steps", "1", "--warmup", "1", "--mixers", "attention", "--compile", "both"),
        *("--out-dir", str(tmp_path)),
    ]
    assert lm_throughput.main(argv) == 0
    rows = json.loads((tmp_path / "lm_throughput.json").read_text())["rows"]
    table = (tmp_path / "lm_throughput.md").read_text()
    assert [(r["mixer"], r["compiled"]) for r in rows] == [
        ("attention", False),
        ("attention", True),
    ]
    assert all("error" not in r and r["tokens_per_s"] > 0 for r in rows), rows
    assert "| attention | - | eager |" in table and "| attention | - | compiled |" in table


@pytest.mark.slow
def test_a_layer_row_under_torch_compile_and_its_launch_count(tmp_path):
    """`mixer_throughput.py` takes any row with `+compile` (the module under torch.compile)
    and, with --profile, counts what a step launches (operators on the CPU)."""
    import mixer_throughput

    out = tmp_path / "layers.json"
    mixer_throughput.main(
        [
            *("--device", "cpu", "--tokens", "32", "--lengths", "16", "--dim", "16"),
            *("--heads", "2", "--rows", "sdpa", "sdpa+compile", "--repeat", "1"),
            *("--warmup", "1", "--profile", "--json", str(out)),
        ]
    )
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"sdpa", "sdpa+compile"}
    for record in rows.values():
        assert "error" not in record and record["tokens_per_s"] > 0, record
        assert record["kernels_per_step"] > 0 and record["profile"]


def test_the_long_context_stage_names_its_files_and_brings_the_weights_back(tmp_path):
    """`gpu_session.sh long_context` at toy size: the log, the rows and the mixer's scores
    come back under LONG_CONTEXT_NAME, the best weights with KEEP_WEIGHTS=1, and the
    grid's exit status is the stage's."""
    name = f"lc_test_{os.getpid()}"
    out = tmp_path / "out"
    toy = ["--mixers", "swa", "--device", "cpu", "--threads", "1", "--train-length", "128",
           "--factors", "1", "--steps", "2", "--batch-size", "2", "--dim", "16", "--depth", "1",
           "--heads", "2", "--window", "16", "--chunk-size", "8", "--no-match-params",
           "--samples", "1", "--depths", "1", "--val-samples", "4", "--evals", "1",
           "--tasks", "niah_passkey", "--quiet"]  # fmt: skip
    env = subprocess_env(
        OUT=str(out),
        LONG_CONTEXT_NAME=name,
        KEEP_WEIGHTS="1",
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    )
    stage = ["bash", "benchmarks/gpu_session.sh", "long_context"]
    try:
        done = subprocess.run(
            [*stage, *toy], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert sorted(p.name for p in out.iterdir()) == [
            f"{name}-swa.json", f"{name}-swa.safetensors", f"{name}.json", f"{name}.log"
        ]  # fmt: skip
        assert json.loads((out / f"{name}.json").read_text())["study"] == "long_context_suite"
        more_steps = list(toy)  # other steps into the same folder: the grid's refusal
        more_steps[toy.index("--steps") + 1] = "3"
        refused = subprocess.run(
            [*stage, *more_steps], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert refused.returncode != 0
        assert "train.max_steps: 2 -> 3" in refused.stdout + refused.stderr
    finally:
        shutil.rmtree(f"/tmp/{name}", ignore_errors=True)
