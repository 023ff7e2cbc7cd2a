"""One GPU session of measurements, most important first, inside a fixed time budget.

    python benchmarks/gpu_session.py --out runs/gpu                  # a GPU, about 7.5 minutes
    python benchmarks/gpu_session.py --out runs/gpu --budget 300 --stages tests layers
    python benchmarks/gpu_session.py --stages tests layers --layer-rows lmm/compiled mac \
        --row-seconds lmm/compiled=200           # only the rows a session has still to measure
    TRITON_INTERPRET=1 python benchmarks/gpu_session.py --toy --out /tmp/toy   # CPU dry run

Stages, in this order, each under a time limit (its own cap and what is left of --budget):

1. `tests`: the `gpu` correctness tests of the Triton kernels and flex attention
   (pytest-xdist workers compile kernels side by side when it is installed), with one
   untimed step of every timed row beside them so that their kernels are compiled (and
   cached on disk) before the timed stages; the stage waits for those warm-ups up to its
   "warmup" cap;
2. `layers`: the layer table of `mixer_throughput.py` (D = 1024, 16 heads x 64, memory depth
   2, expansion 1, chunk 16, bf16 autocast, forward+backward, 16K tokens per batch,
   T = 2K-16K): the Titans layers beside SDPA attention, fla GatedDeltaNet and titans-pytorch,
   each row capped in time;
3. `lm`: training throughput and MFU of the 125M language model (`lm_throughput.py`) at 2K
   and 16K context, Transformer++ beside the Titans mixers;
4. `precision`: the tinyshakespeare LMM recipe trained for 300 steps once per memory dot
   precision (fp32, tf32 and bf16 operands; `memory.triton.dot_precision`) and seed (three
   by default), the runs side by side, validation loss at every evaluation (needs
   `text/tinyshakespeare.txt.gz` under `$TITANS_SEQ_DATA`, or `.data/` carried);
5. `profile`: the Triton LMM layer at each dot precision under the PyTorch profiler, at the
   shortest and the longest T: tokens/s and the top kernels by device time per step;
6. `rest`: the layer and LM rows that earlier stages cut at their limits, again, with
   whatever time is left.

Everything lands in --out, at most eight files: `session.log` (this driver, the device and
versions), `summary.json` (per stage: status, seconds, limit), and for each stage a log and
a JSON (`tests.log`/`tests.json`, `layers.log`/`layers.json`, `lm.log`/`lm.json`). The
layer JSON has the format of `benchmarks/results/gpu/` (device, date, commit, rows of name,
T, tokens_per_s, peak_mib). A copy of the checkout without `.git` names its commit in the
environment variable TITANS_SEQ_COMMIT.

--toy runs every stage at toy sizes on the CPU (the Triton kernels under TRITON_INTERPRET=1),
so that the script itself is checked before GPU time is spent on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import Child, run_child

from titans_seq.training.checkpoint import atomic_write_text

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
STAGES = ("tests", "layers", "lm", "precision", "profile", "rest")


@dataclass
class Sizes:
    """What a stage measures, at GPU size or toy size."""

    device: str
    tests: list[str]  # pytest arguments: selection and files
    layer_args: list[str]  # mixer_throughput.py's size arguments
    layer_rows: list[str]  # most important first
    row_seconds: dict[str, float]  # per layer row; "*" for the others
    lm_args: list[str]  # lm_throughput.py's size arguments
    lm_mixers: list[str]
    lm_row_seconds: float
    # the dot-precision comparison: a recipe and its overrides, trained once per precision
    precision_recipe: list[str]
    precisions: list[str]  # the memory kernels' dot precisions trained side by side
    precision_seeds: list[int]  # each precision trained once per seed (`train.seed`)
    profile_rows: list[str]  # the layer rows profiled, at the first and last profile length
    profile_lengths: list[int]
    conv_args: list[str]  # conv_speed.py's size arguments (the profile stage's last part)
    warmup_processes: int = 1  # processes compiling the layer rows side by side
    lm_compile: str = "no"  # lm_throughput.py's --compile: "no", "yes" or "both"
    stage_seconds: dict[str, float] = field(default_factory=dict)  # each stage's own cap


GPU = Sizes(
    device="cuda",
    tests=[
        *("-m", "gpu", "tests/ops/test_lmm_triton.py", "tests/ops/test_causal_conv.py"),
        "tests/ops/test_lmm_triton_graph.py",
        "tests/test_attention.py",
    ],
    layer_args=["--lift-fla-guard"],  # the script's defaults are the layer table's sizes
    layer_rows=[
        *("lmm/triton", "titans-pytorch", "fla/GatedDeltaNet", "sdpa", "mag", "mal", "mac"),
        *("lmm/torch", "lmm/triton-ieee", "lmm/compiled"),
    ],
    row_seconds={
        **{"fla/GatedDeltaNet": 90, "lmm/compiled": 90, "mag": 70, "mal": 70, "mac": 70},
        "*": 50,
    },
    lm_args=["--preset", "125m", "--contexts", "2048x8", "16384x1", "--steps", "5"],
    lm_mixers=["attention", "lmm", "mag"],
    lm_row_seconds=60,
    precision_recipe=[
        "lm/tinyshakespeare_lmm",
        "train.max_steps=300",
        "train.log_every=50",
        "eval.every=100",
        "train.checkpoint_every=300",
    ],
    precisions=["ieee", "tf32", "bf16"],
    precision_seeds=[0, 1, 2],
    profile_rows=["lmm/triton", "lmm/triton-tf32", "lmm/triton-ieee"],
    profile_lengths=[2048, 16384],
    conv_args=[],  # the script's defaults are the layer table's shape (B 8, T 2K, C 3072)
    # with the tests' 12 pytest workers and the LM warm-up: 16 cores, as the GPU machines
    # have; one process compiled only the rows up to SDPA within the 170 s warm-up cap
    warmup_processes=3,
    # "warmup": how long the compile warm-ups may run from the start of the tests stage (it
    # waits for them once the tests are done); on a fresh machine both runs so far cut them
    # at 100 s, and the rows they had not compiled (fla, MAG) then hit their own limits
    stage_seconds={
        "tests": 100,
        "warmup": 170,
        "layers": 180,
        "lm": 80,
        "precision": 240,  # nine runs side by side (three seeds of three precisions)
        "profile": 90,
    },  # fmt: skip
)

TOY = Sizes(
    device="cpu",
    tests=[
        "tests/ops/test_lmm_triton.py::test_triton_options_are_validated",
        "tests/ops/test_lmm_triton.py::test_triton_gpu_matches_reference",
    ],
    layer_args=["--dim", "32", "--heads", "2", "--tokens", "32", "--lengths", "16", "32"],
    layer_rows=["lmm/triton", "lmm/torch", "sdpa", "mag", "titans-pytorch"],
    row_seconds={"*": 60},
    # the Triton kernels' interpreter run is the layer stage's; the LM stage checks the driver
    lm_args=[
        *("--preset", "tiny", "--vocab-size", "64", "--contexts", "32x2", "16x1"),
        *("--steps", "1", "--warmup", "1", "--backends", "torch"),
    ],
    lm_mixers=["attention", "lmm"],
    lm_row_seconds=60,
    precision_recipe=[
        "lm/tiny",
        "train.max_steps=4",
        "train.log_every=2",
        "eval.every=2",
        "train.checkpoint_every=4",
        "train.device=cpu",
    ],
    precisions=["ieee", "bf16"],
    precision_seeds=[0, 1],
    profile_rows=["lmm/triton", "lmm/torch"],
    profile_lengths=[16, 32],
    conv_args=[
        *("--batch", "1", "--length", "16", "--channels", "8"),
        *("--repeat", "1", "--warmup", "0", "--dtypes", "fp32"),
    ],
    warmup_processes=2,
    stage_seconds={
        "tests": 120,
        "warmup": 120,
        "layers": 300,
        "lm": 120,
        "precision": 120,
        "profile": 120,
    },  # fmt: skip
)


class Session:
    """The budget, the output folder and the driver's own log."""

    def __init__(self, out: Path, budget: float, sizes: Sizes, toy: bool):
        self.out, self.budget, self.sizes, self.toy = out, budget, sizes, toy
        self.start = time.monotonic()
        self.summary: dict = {"stages": {}}
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_session_"))
        out.mkdir(parents=True, exist_ok=True)
        self.log_path = out / "session.log"

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.start)

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.start:6.1f} s] {text}"
        print(line, flush=True)
        with open(self.log_path, "a") as handle:
            handle.write(line + "\n")

    def limit(self, stage: str) -> float:
        """The stage's time: its own cap, and never more than what is left."""
        cap = self.sizes.stage_seconds.get(stage, float("inf"))
        return max(0.0, min(cap, self.left()))

    def python(self, script: str, *args: str) -> list[str]:
        return [sys.executable, str(HERE / script), *args]

    def write_summary(self) -> None:
        atomic_write_text(self.out / "summary.json", json.dumps(self.summary, indent=1))


def describe_machine(session: Session) -> dict:
    """Device, versions, date and commit, also written to the session log."""
    import torch
    from harness import provenance

    info = provenance(torch.device(session.sizes.device))
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    from importlib.metadata import PackageNotFoundError, version

    for anchor in ("titans-pytorch", "flash-linear-attention"):
        try:
            info[anchor] = version(anchor)
        except PackageNotFoundError:
            info[anchor] = None
    info["toy"] = session.toy
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        session.say("nvidia-smi:\n" + smi.stdout.strip())
    session.say("machine: " + json.dumps(info))
    return info


# ---------------------------------------------------------------------------------- tests

_OUTCOMES = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
# `pytest -v` prints "NODE OUTCOME [ 10%]", with xdist "[gw0] [ 10%] OUTCOME NODE"; a node
# id may hold spaces (parametrize ids made by str())
_PLAIN = re.compile(rf"^(tests/\S.*?) ({_OUTCOMES})(?:\s+\[\s*\d+%\])?$")
_XDIST = re.compile(rf"^\[gw\d+\] \[\s*\d+%\] ({_OUTCOMES}) (tests/\S.*)$")
_SUMMARY = re.compile(r"^(FAILED|ERROR) (tests/\S.*?)(?: - (.*))?$")
# a failure's section in the report: "____ test_name[id] ____", then "E   " lines
_SECTION = re.compile(r"^_{3,} (?:ERROR at \w+ of )?(\S.*?) _{3,}$")


def parse_pytest_log(text: str) -> dict:
    """Per-test outcomes of a `pytest -v` log (with or without xdist), and the reason of
    each failure from the short summary (`-rfE`)."""
    outcomes: dict[str, str] = {}
    reasons: dict[str, str] = {}
    first_error: dict[str, str] = {}  # test name (without its file) -> its first "E" line
    section = None
    for line in text.splitlines():
        line = line.strip()
        if heading := _SECTION.match(line):
            section = heading.group(1)
        elif section and line.startswith("E ") and section not in first_error:
            first_error[section] = line[1:].strip()[:300]
        if summary := _SUMMARY.match(line):
            reasons[summary.group(2)] = (summary.group(3) or "").strip()[:300]
        elif plain := _PLAIN.match(line):
            outcomes[plain.group(1)] = plain.group(2).lower()
        elif xdist := _XDIST.match(line):
            outcomes[xdist.group(2)] = xdist.group(1).lower()
    for node, outcome in outcomes.items():
        name = node.split("::", 1)[-1]
        if outcome in ("failed", "error") and not reasons.get(node) and name in first_error:
            reasons[node] = first_error[name]
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    tests = [
        {"test": node, "outcome": outcome, **({"reason": reasons[node]} if node in reasons else {})}
        for node, outcome in outcomes.items()
    ]
    return {"counts": counts, "tests": tests}


def warmup_groups(rows: list[str], groups: int) -> list[list[str]]:
    """`rows` dealt round-robin into at most `groups` non-empty lists, so that the slow
    compilers (the first rows) land in different processes."""
    return [rows[i::groups] for i in range(min(groups, len(rows)))]


def start_compile_warmup(session: Session) -> list[tuple[str, Child]]:
    """One untimed step of every layer and LM row at every size, in the background.

    Most of a row's first seconds go to compiling its kernels (Triton's and Inductor's, on
    the CPU, cached on disk); the tests stage, itself mostly compilation, leaves the GPU idle
    enough to do this beside it, so that the timed stages find the caches warm. The layer
    rows compile in `warmup_processes` processes side by side (a compiler uses one core);
    a row's step on the GPU is a few milliseconds, so they hardly wait for each other there.
    Returns (what, child) pairs.
    """
    children = []
    groups = warmup_groups(session.sizes.layer_rows, session.sizes.warmup_processes)
    for index, rows in enumerate(groups):
        cmd = session.python(
            "mixer_throughput.py", "--device", session.sizes.device, *session.sizes.layer_args,
            "--rows", *rows, "--warmup", "1", "--repeat", "1", "--seconds-per-length", "0",
        )  # fmt: skip
        log = session.scratch / f"warmup_layers_{index}.log"
        children.append((f"layer rows {', '.join(rows)}", Child(cmd, log=log)))
    lm = session.python(
        "lm_throughput.py", "--device", session.sizes.device, *session.sizes.lm_args,
        "--mixers", *session.sizes.lm_mixers, "--steps", "1", "--warmup", "1",
        "--compile", session.sizes.lm_compile, "--out-dir", str(session.scratch / "lm_warmup"),
    )  # fmt: skip
    children.append(("LM rows", Child(lm, log=session.scratch / "warmup_lm.log")))
    return children


def stage_tests(session: Session) -> dict:
    limit = session.limit("tests")
    cmd = [sys.executable, "-m", "pytest", "-v", "-rfE", "-p", "no:cacheprovider"]
    if not session.toy and _has_module("xdist"):
        workers = max(1, min(12, (os.cpu_count() or 2) - 4))
        cmd += ["-n", str(workers)]
    cmd += session.sizes.tests
    # the warm-ups may outlast the tests, up to their own cap and never past the budget
    warm_seconds = min(session.sizes.stage_seconds.get("warmup", limit), session.left())
    warm_until = time.monotonic() + warm_seconds
    warmups = start_compile_warmup(session)
    result = run_child(cmd, timeout=limit, log=session.out / "tests.log")
    for what, child in warmups:  # ends by warm_until, done or not
        warmed = child.wait(timeout=max(0.0, warm_until - time.monotonic()))
        state = "cut" if warmed.timed_out else f"exit code {warmed.returncode}"
        session.say(f"tests: compile warm-up of the {what}: {state}")
    parsed = parse_pytest_log((session.out / "tests.log").read_text())
    record = {
        "command": " ".join(cmd[1:]), "limit_s": round(limit), "seconds": round(result.seconds, 1),
        "cut": result.timed_out, "returncode": result.returncode, **parsed,
    }  # fmt: skip
    atomic_write_text(session.out / "tests.json", json.dumps(record, indent=1))
    return {"status": _status(result), "counts": parsed["counts"]}


# --------------------------------------------------------------------------------- layers


def run_layer_rows(session: Session, rows: list[str], limit: float, scale: float = 1.0) -> None:
    """`mixer_throughput.py` over `rows`, each under its cap (times `scale`), none started
    past `limit`; the rows measured are merged into `layers.json`."""
    part = session.scratch / "layers.json"
    caps = session.sizes.row_seconds
    row_seconds = [f"{caps['*'] * scale:.0f}"]
    row_seconds += [f"{row}={seconds * scale:.0f}" for row, seconds in caps.items() if row != "*"]
    cmd = session.python(
        "mixer_throughput.py", "--device", session.sizes.device, *session.sizes.layer_args,
        "--rows", *rows, "--row-seconds", *row_seconds, "--total-seconds", f"{limit - 5:.0f}",
        "--json", str(part), "--log", str(session.out / "layers.log"),
    )  # fmt: skip
    with open(session.out / "layers.log", "a") as log:
        log.write(f"\n$ {' '.join(cmd[1:])}\n")
    result = run_child(cmd, timeout=limit + 10, log=session.out / "layers.log")
    measured = _load(part).get("rows", [])
    done = {r["name"] for r in measured}
    measured += [{"name": r, "error": result.error() or "no output"} for r in rows if r not in done]
    table = _load(session.out / "layers.json") or {
        k: v for k, v in _load(part).items() if k != "rows"
    }
    table["rows"] = [r for r in table.get("rows", []) if r["name"] not in rows] + measured
    atomic_write_text(session.out / "layers.json", json.dumps(table, indent=1))
    for row in rows:
        cells = [_layer_cell(r) for r in measured if r["name"] == row]
        session.say(f"layers: {row}: " + "; ".join(cells))


def stage_layers(session: Session) -> dict:
    run_layer_rows(session, session.sizes.layer_rows, session.limit("layers"))
    return _rows_status(_load(session.out / "layers.json").get("rows", []))


# ------------------------------------------------------------------------------------- lm


def run_lm_rows(session: Session, mixers: list[str], limit: float) -> None:
    """`lm_throughput.py` over `mixers` (each at every context), none started past `limit`;
    the rows measured are merged into `lm.json`."""
    out_dir = session.scratch / "lm"
    cmd = session.python(
        "lm_throughput.py", "--device", session.sizes.device, *session.sizes.lm_args,
        "--mixers", *mixers, "--row-seconds", f"{session.sizes.lm_row_seconds:.0f}",
        "--compile", session.sizes.lm_compile,
        "--total-seconds", f"{limit - 5:.0f}", "--out-dir", str(out_dir),
        "--log", str(session.out / "lm.log"),
    )  # fmt: skip
    with open(session.out / "lm.log", "a") as log:
        log.write(f"\n$ {' '.join(cmd[1:])}\n")
    result = run_child(cmd, timeout=limit + 10, log=session.out / "lm.log")
    part = _load(out_dir / "lm_throughput.json")
    shutil.rmtree(out_dir, ignore_errors=True)
    rows = part.get("rows", [])
    done = {r["mixer"] for r in rows}
    rows += [{"mixer": m, "error": result.error() or "no output"} for m in mixers if m not in done]
    merged = _load(session.out / "lm.json") or {k: v for k, v in part.items() if k != "rows"}
    merged["rows"] = [r for r in merged.get("rows", []) if r["mixer"] not in mixers] + rows
    atomic_write_text(session.out / "lm.json", json.dumps(merged, indent=1))
    for mixer in mixers:
        session.say(f"lm: {mixer}: " + "; ".join(_lm_cell(r) for r in rows if r["mixer"] == mixer))


def stage_lm(session: Session) -> dict:
    run_lm_rows(session, session.sizes.lm_mixers, session.limit("lm"))
    return _rows_status(_load(session.out / "lm.json").get("rows", []))


# ------------------------------------------------------------------------------ precision

# the memory kernels' dot-operand precisions compared (`memory.triton.dot_precision`); the
# rest of the model is the same in every run (bf16 autocast)
MEMORY_DOT_PRECISIONS = ("ieee", "tf32", "bf16")


def stage_precision(session: Session) -> dict:
    """The same training run once per memory dot precision and seed, the runs side by side
    on the one GPU: validation loss at every evaluation, so that what the faster dots cost in
    accuracy is measured against the seed-to-seed spread, not guessed. The runs share the
    device, so their tokens/s are not each precision's speed (the layer table and the profile
    stage measure that). Results go into `lm.json` (its "precision" entry) and the runs'
    output into `lm.log`."""
    from titans_seq.training.logs import read_csv

    limit = session.limit("precision")
    runs = {}
    for precision in session.sizes.precisions:
        for seed in session.sizes.precision_seeds:
            run_dir = session.scratch / f"precision_{precision}_seed{seed}"
            cmd = [
                sys.executable, "-m", "titans_seq.cli", "train", *session.sizes.precision_recipe,
                f"model.mixer_options.memory.triton.dot_precision={precision}",
                f"train.seed={seed}", f"train.out_dir={run_dir}",
                "train.progress=false", "train.plot=false", "train.tensorboard=false",
            ]  # fmt: skip
            log = session.scratch / f"precision_{precision}_seed{seed}.log"
            runs[precision, seed] = (run_dir, cmd, log, Child(cmd, log=log))
    results = []
    began = time.monotonic()
    for (precision, seed), (run_dir, cmd, log, child) in runs.items():
        result = child.wait(timeout=max(0.0, limit - (time.monotonic() - began)))
        with open(session.out / "lm.log", "a") as sink:
            sink.write(f"\n$ {' '.join(cmd[2:])}\n{log.read_text()}")
        record = {"dot_precision": precision, "seed": seed, "seconds": round(result.seconds, 1)}
        try:
            evals = read_csv(run_dir / "eval_log.csv")
            trains = read_csv(run_dir / "train_log.csv")
        except OSError:
            evals, trains = [], []
        if evals:
            record["step"] = int(evals[-1]["step"])
            record["val"] = {k: float(v) for k, v in evals[-1].items() if k != "step"}
            record["evals"] = [{k: float(v) for k, v in row.items()} for row in evals]
        losses = [float(r["loss"]) for r in trains if r.get("loss")]
        if losses:
            record["last_train_loss"] = losses[-1]
        if result.error():
            record["error"] = result.error()
        results.append(record)
        session.say(f"precision: {json.dumps({k: v for k, v in record.items() if k != 'evals'})}")
    merged = _load(session.out / "lm.json")
    merged["precision"] = {
        "recipe": session.sizes.precision_recipe,
        "compared": "model.mixer_options.memory.triton.dot_precision",
        "runs": results,
    }
    atomic_write_text(session.out / "lm.json", json.dumps(merged, indent=1))
    failed = [r for r in results if "val" not in r]
    return {"status": "done", "measured": len(results) - len(failed), "errors": len(failed)}


# -------------------------------------------------------------------------------- profile


def stage_profile(session: Session) -> dict:
    """Where a memory layer's training step spends its GPU time: the layer rows of
    `profile_rows` under the PyTorch profiler at the shortest and longest length, the top
    kernels by device time per step, into `layers.json` (each row's "profile"); then the
    memory's convolution alone per backend (`conv_speed.py`, into `conv.json`)."""
    limit = session.limit("profile")
    part = session.scratch / "profile.json"
    lengths = session.sizes.profile_lengths
    cmd = session.python(
        "mixer_throughput.py", "--device", session.sizes.device, *session.sizes.layer_args,
        "--lengths", *map(str, lengths), "--rows", *session.sizes.profile_rows, "--profile",
        "--row-seconds", f"{limit / len(session.sizes.profile_rows):.0f}",
        "--total-seconds", f"{limit - 5:.0f}", "--json", str(part),
        "--log", str(session.out / "layers.log"),
    )  # fmt: skip
    with open(session.out / "layers.log", "a") as log:
        log.write(f"\n$ {' '.join(cmd[1:])}\n")
    run_child(cmd, timeout=limit + 10, log=session.out / "layers.log")
    measured = _load(part).get("rows", [])
    table = _load(session.out / "layers.json") or {
        k: v for k, v in _load(part).items() if k != "rows"
    }
    table["profiles"] = measured
    atomic_write_text(session.out / "layers.json", json.dumps(table, indent=1))
    for record in measured:
        top = record.get("profile", [])[:3]
        kernels = "; ".join(f"{k['kernel'][:40]} {k['ms_per_step']:.2f} ms" for k in top)
        launches = record.get("kernels_per_step")
        count = "" if launches is None else f" ({launches:.0f} kernels a step)"
        session.say(f"profile: {record.get('name')}: {_layer_cell(record)}{count}: {kernels}")
    if session.left() > 20:  # the convolution alone, each backend (conv.json)
        conv = session.out / "conv.json"
        cmd = session.python(
            "conv_speed.py", "--device", session.sizes.device, *session.sizes.conv_args,
            "--json", str(conv),
        )  # fmt: skip
        run_child(cmd, timeout=min(90.0, session.left() - 10), log=session.out / "layers.log")
        for record in _load(conv).get("rows", []):
            cell = record.get("error") or f"{record['ms']:.3f} ms, {record['gb_per_s']:.0f} GB/s"
            session.say(f"conv: {record['name']} {record['dtype']}: {cell}")
    return _rows_status(measured)


# ----------------------------------------------------------------------------------- rest


def _was_cut(record: dict) -> bool:
    error = record.get("error", "")
    return "time limit" in error or "not reached" in error or "no output" in error


def stage_rest(session: Session) -> dict:
    """Rows cut at a time limit (or never reached), again with twice their cap."""
    layer_rows = _load(session.out / "layers.json").get("rows", [])
    cut_layers = list(dict.fromkeys(r["name"] for r in layer_rows if _was_cut(r)))
    measured = {r["name"] for r in layer_rows}
    cut_layers += [r for r in session.sizes.layer_rows if r not in measured]
    lm_rows = _load(session.out / "lm.json").get("rows", [])
    cut_lm = list(dict.fromkeys(r["mixer"] for r in lm_rows if _was_cut(r)))
    cut_lm += [m for m in session.sizes.lm_mixers if m not in {r["mixer"] for r in lm_rows}]
    session.say(f"rest: layer rows {cut_layers or 'none'}; LM mixers {cut_lm or 'none'}")
    if cut_layers and session.left() > 10:
        run_layer_rows(session, cut_layers, session.left() - 5, scale=2.0)
    if cut_lm and session.left() > 10:
        run_lm_rows(session, cut_lm, session.left() - 5)
    return {"status": "done", "layer_rows": cut_layers, "lm_mixers": cut_lm}


# -------------------------------------------------------------------------------- helpers


def _has_module(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _status(result) -> str:
    if result.timed_out:
        return "cut"
    return "done" if result.returncode in (0, 1) else f"failed ({result.error()})"


def _rows_status(rows: list[dict]) -> dict:
    failed = [r for r in rows if "error" in r]
    return {"status": "done", "measured": len(rows) - len(failed), "errors": len(failed)}


def _layer_cell(record: dict) -> str:
    if "error" in record:
        return f"T={record.get('T')}: {record['error'][:80]}"
    return f"T={record['T']}: {record['tokens_per_s']:,.0f} tok/s"


def _lm_cell(record: dict) -> str:
    context = f"{record.get('seq_len')}x{record.get('batch_size')}"
    if record.get("compiled"):
        context += " compiled"
    if "error" in record:
        return f"{context}: {record['error'][:80]}"
    mfu = "" if record.get("mfu") is None else f", MFU {100 * record['mfu']:.1f}%"
    return f"{context}: {record['tokens_per_s']:,.0f} tok/s{mfu}"


STAGE_FUNCTIONS = {
    "tests": stage_tests,
    "layers": stage_layers,
    "lm": stage_lm,
    "precision": stage_precision,
    "profile": stage_profile,
    "rest": stage_rest,
}


def with_overrides(
    sizes: Sizes,
    stage_seconds: Sequence[str] = (),
    row_seconds: Sequence[str] = (),
    layer_rows: list[str] | None = None,
    lm_mixers: list[str] | None = None,
    profile_rows: list[str] | None = None,
    precisions: list[str] | None = None,
    precision_seeds: list[int] | None = None,
    precision_set: Sequence[str] = (),
    lm_compile: str | None = None,
) -> Sizes:
    """`sizes` with the command line's choices: STAGE=SECONDS and ROW=SECONDS caps, and the
    rows and mixers to measure in place of the default lists. Raises ValueError on a
    malformed cap or an unknown stage."""

    def pairs(items: Sequence[str], what: str) -> dict[str, float]:
        out = {}
        for item in items:
            name, _, seconds = item.partition("=")
            if not name or not seconds.replace(".", "", 1).isdigit():
                raise ValueError(f"{what} takes NAME=SECONDS: {item!r}")
            out[name] = float(seconds)
        return out

    stages = pairs(stage_seconds, "--stage-seconds")
    unknown = set(stages) - {*STAGES, "warmup"}
    if unknown:
        raise ValueError(
            f"--stage-seconds takes a stage of {STAGES} or 'warmup' (the compile warm-ups' "
            f"cap): {sorted(unknown)}"
        )
    sizes = replace(
        sizes,
        stage_seconds={**sizes.stage_seconds, **stages},
        row_seconds={**sizes.row_seconds, **pairs(row_seconds, "--row-seconds")},
    )
    if any("=" not in item[1:] for item in precision_set):
        raise ValueError(f"--precision-set takes KEY=VALUE overrides: {list(precision_set)}")
    sizes = replace(sizes, precision_recipe=[*sizes.precision_recipe, *precision_set])
    if lm_compile is not None:
        sizes = replace(sizes, lm_compile=lm_compile)
    lists = {
        "layer_rows": layer_rows, "lm_mixers": lm_mixers, "profile_rows": profile_rows,
        "precisions": precisions, "precision_seeds": precision_seeds,
    }  # fmt: skip
    return replace(sizes, **{name: list(value) for name, value in lists.items() if value})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "runs/gpu"), help="output folder")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for all stages")
    p.add_argument("--stages", nargs="+", choices=STAGES, default=list(STAGES))
    p.add_argument("--toy", action="store_true", help="toy sizes on the CPU (a dry run)")
    p.add_argument(
        "--stage-seconds",
        nargs="+",
        default=[],
        metavar="STAGE=SECONDS",
        help="a stage's own cap instead of the default (e.g. tests=150)",
    )
    p.add_argument(
        "--layer-rows", nargs="+", metavar="ROW", help="the layer rows, in this order, instead "
        "of the default list (e.g. the rows an earlier session could not measure)",
    )  # fmt: skip
    p.add_argument("--lm-mixers", nargs="+", metavar="MIXER", help="the LM stage's mixers")
    p.add_argument(
        "--lm-compile", choices=("no", "yes", "both"),
        help="the LM stage's models eager (no, the default), under torch.compile (yes), or "
        "each (both)",
    )  # fmt: skip
    p.add_argument("--profile-rows", nargs="+", metavar="ROW", help="the profile stage's rows")
    p.add_argument(
        "--precisions", nargs="+", choices=MEMORY_DOT_PRECISIONS,
        help="the precision stage's memory dot precisions",
    )  # fmt: skip
    p.add_argument(
        "--precision-seeds", nargs="+", type=int, metavar="SEED",
        help="the precision stage's seeds (each precision trained once per seed)",
    )  # fmt: skip
    p.add_argument(
        "--precision-set", nargs="+", default=[], metavar="KEY=VALUE",
        help="recipe overrides added to the precision stage's runs (e.g. optim.lr=5e-4)",
    )  # fmt: skip
    p.add_argument(
        "--row-seconds", nargs="+", default=[], metavar="ROW=SECONDS",
        help="a layer row's time cap instead of the default (e.g. lmm/compiled=200)",
    )  # fmt: skip
    args = p.parse_args(argv)
    os.chdir(ROOT)  # the tests' paths and the scripts' imports are relative to the checkout
    if "TITANS_SEQ_DATA" not in os.environ:  # a carried .data/, else the mirror beside us
        for folder in (ROOT / ".data", ROOT.parent / "shared" / "data"):
            if folder.is_dir():
                os.environ["TITANS_SEQ_DATA"] = str(folder)
                break
    try:
        sizes = with_overrides(
            TOY if args.toy else GPU, stage_seconds=args.stage_seconds,
            row_seconds=args.row_seconds, layer_rows=args.layer_rows,
            lm_mixers=args.lm_mixers, profile_rows=args.profile_rows,
            precisions=args.precisions, precision_seeds=args.precision_seeds,
            precision_set=args.precision_set, lm_compile=args.lm_compile,
        )  # fmt: skip
    except ValueError as error:
        p.error(str(error))
    session = Session(Path(args.out).resolve(), args.budget, sizes, args.toy)
    session.summary["machine"] = describe_machine(session)
    session.summary["budget_s"] = args.budget
    session.write_summary()
    try:
        for stage in args.stages:
            limit = session.limit(stage) if stage != "rest" else session.left()
            if limit < 5:
                session.say(f"{stage}: skipped, {session.left():.0f} s left")
                session.summary["stages"][stage] = {"status": "skipped (no time left)"}
                continue
            session.say(f"{stage}: start, limit {limit:.0f} s")
            began = time.monotonic()
            try:
                outcome = STAGE_FUNCTIONS[stage](session)
            except Exception as error:  # a broken stage must not cost the ones after it
                outcome = {"status": f"failed ({type(error).__name__}: {error})"}
            outcome["seconds"] = round(time.monotonic() - began, 1)
            outcome["limit_s"] = round(limit)
            session.summary["stages"][stage] = outcome
            session.write_summary()
            session.say(f"{stage}: {json.dumps(outcome)}")
    finally:
        shutil.rmtree(session.scratch, ignore_errors=True)
    session.say(f"done, {session.left():.0f} s of the budget left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
