"""What the benchmark scripts share: where and when a measurement ran (`provenance`: device,
torch, commit, date), the median time of a step after its warm-up (`median_seconds`), and
running one measurement in a child process under a time limit and reading the JSON lines it
prints (`run_child`), and the code of an earlier commit beside today's for before/after rows
(`export_commit`, `row_env`).

A measurement runs in its own process so that its peak-memory counter, its allocator state
and any crash (out of memory, a kernel that fails to build) stay its own. The child prints
one JSON object per line as each result is ready; the parent keeps every line printed before
the child ended, also when the time limit cut it short.
"""

from __future__ import annotations

import io
import json
import os
import platform
import signal
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def git_commit() -> str:
    """The checkout's short commit, with `+dirty` when tracked files differ from it. The
    environment variable TITANS_SEQ_COMMIT, when set, names it instead: a copy of a checkout
    without its `.git` (sent to a remote GPU machine, say) cannot tell its own commit."""
    if os.environ.get("TITANS_SEQ_COMMIT"):
        return os.environ["TITANS_SEQ_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "diff", "--quiet", "HEAD", "--", "titans_seq", "domains", "data", "recipes"],
            capture_output=True,
        ).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


# The commit of the code this process runs, taken when the runner starts: a grid process
# lives for hours while the checkout moves on, and its cells must name the code they ran
STARTED_AT_COMMIT = git_commit()


def device_name(device: torch.device | str) -> str:
    """The GPU's name, or the CPU's processor and torch threads ("auto" and "cuda" resolved
    as the training loop resolves them)."""
    import torch

    from titans_seq.devices import resolve_device

    device = resolve_device(device) if isinstance(device, str) else device
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def provenance(device: torch.device | str) -> dict:
    """What a cell records about where and when it ran (the commit: the code the process
    started with, `STARTED_AT_COMMIT`)."""
    import torch

    return {
        "device": device_name(device),
        "torch": torch.__version__,
        "commit": STARTED_AT_COMMIT,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
    }


def median_seconds(
    step: Callable[[], object],
    *,
    warmup: int,
    repeat: int,
    device: torch.device | str = "cpu",
    max_seconds: float | None = None,
    gpu_events: bool = False,
) -> tuple[float, list[float]]:
    """(median, every timing) in seconds of timed calls of `step` after `warmup` untimed ones.

    repeat: timed calls; with max_seconds, no new one starts once the timed calls have
        taken that long (at least one always runs).
    device: on CUDA the clock is read after `torch.cuda.synchronize`, since kernels run
        asynchronously; gpu_events: time with CUDA events instead (the GPU's time between
        the step's first and last kernel, for microsecond-scale steps).
    """
    import torch

    cuda = torch.device(device).type == "cuda"
    for _ in range(warmup):
        step()
    times: list[float] = []
    while len(times) < repeat and (max_seconds is None or not times or sum(times) < max_seconds):
        if cuda and gpu_events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            continue
        if cuda:
            torch.cuda.synchronize()
        begin = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), times


@dataclass
class ChildResult:
    """What a child process left: its JSON lines, how it ended and how long it ran."""

    records: list[dict] = field(default_factory=list)
    returncode: int | None = None  # None: killed at the time limit
    seconds: float = 0.0
    output_tail: str = ""  # the last lines that are not JSON (errors, warnings)

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def error(self) -> str | None:
        """One line saying why the child failed, or None when it exited cleanly."""
        if self.timed_out:
            return f"cut at the time limit ({self.seconds:.0f} s)"
        if self.returncode != 0:
            lines = self.output_tail.strip().splitlines() or [f"exit code {self.returncode}"]
            return lines[-1][:200]
        return None


def json_lines(text: str) -> list[dict]:
    """Every line of `text` that parses as a JSON object, in order."""
    records = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


class Child:
    """A child process started now, its output going to a file, and collected by `wait`.

    stdout and stderr go, as printed, to the file `log` (appended to; a temporary file when
    None), so a log survives whatever happens to this process. The child runs in a process
    group of its own, and the whole group is killed at the limit: compiler worker pools it
    started would otherwise live on.
    """

    def __init__(self, cmd: list[str], env: dict | None = None, log: Path | None = None):
        self._scratch = tempfile.TemporaryDirectory()
        self.path = Path(log) if log is not None else Path(self._scratch.name) / "child.log"
        self.start = time.perf_counter()
        with open(self.path, "a") as sink:
            self.offset = sink.tell()
            self.proc = subprocess.Popen(
                cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, env=env,
                start_new_session=True,
            )  # fmt: skip

    def wait(self, timeout: float | None) -> ChildResult:
        """Wait at most `timeout` seconds (None: no limit), kill the child at the limit,
        and collect its JSON lines."""
        try:
            returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)
            self.proc.wait()
            returncode = None
        with open(self.path) as source:
            source.seek(self.offset)
            output = source.read()
        self._scratch.cleanup()
        other = [ln for ln in output.splitlines() if not ln.lstrip().startswith("{")]
        return ChildResult(
            records=json_lines(output),
            returncode=returncode,
            seconds=time.perf_counter() - self.start,
            output_tail="\n".join(other[-40:]),
        )


def run_child(
    cmd: list[str], timeout: float | None, env: dict | None = None, log: Path | None = None
) -> ChildResult:
    """Run `cmd` for at most `timeout` seconds (None: no limit) and collect its JSON lines
    (see `Child`)."""
    return Child(cmd, env=env, log=log).wait(timeout)


def run_jobs_side_by_side(
    script: Path | str,
    argv: list[str],
    jobs: list[tuple],
    threads: int,
    parallel: int,
    limit: float | None = None,
) -> list[dict]:
    """Run `python SCRIPT ARGV --_one JOB...` for each job of a study, `parallel` at a time
    and each with `threads` OpenMP threads; returns the last JSON line each job printed, in
    job order, and prints each as it arrives. A job still running after `limit` seconds
    (None: no limit) is killed and gives `{"job": [...], "cut_at_seconds": limit}`; a job
    that fails raises RuntimeError naming it and its error."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    def child(job: tuple) -> dict:
        cmd = [sys.executable, str(script), *argv, "--_one", *map(str, job)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        result = run_child(cmd, timeout=limit, env=env)
        if result.timed_out:
            record = {"job": list(job), "cut_at_seconds": limit}
            print(json.dumps(record), flush=True)
            return record
        if result.error() or not result.records:
            raise RuntimeError(f"{job}: {result.error() or 'no result printed'}")
        print(json.dumps(result.records[-1]), flush=True)
        return result.records[-1]

    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(child, jobs))


def neuralforecast_model(name: str, horizon: int, seed: int, steps: int, **options):
    """neuralforecast's "nhits" or "patchtst" at the settings its users try first (input
    two horizons, `steps` training steps; `options` for others, e.g. scaler_type), its
    progress bars and Lightning's logs silenced."""
    import logging

    from neuralforecast.models import NHITS, PatchTST

    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    kind = {"nhits": NHITS, "patchtst": PatchTST}[name]
    return kind(
        h=horizon,
        input_size=2 * horizon,
        max_steps=steps,
        random_seed=seed,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        **options,
    )


def mean_with_spread(values: list[float]) -> str:
    """ "0.814 ± 0.002": the mean of a study's seeds and their standard deviation (the mean
    alone for one seed)."""
    spread = f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else ""
    return f"{statistics.mean(values):.3f}{spread}"


def write_study_report(
    script: Path | str, argv: list[str], args, tables: str, runs: list[dict], extra: str = ""
) -> str:
    """Write a side-by-side study's Markdown (the command, date, commit, threads and jobs,
    `extra` header lines, then `tables`) and its runs as JSON to `args.out`, named after
    the script; print the Markdown and return it."""
    name = Path(script).stem
    header = (
        f"- Command: `python benchmarks/studies/{name}.py {' '.join(argv)}`\n"
        f"- Date {time.strftime('%Y-%m-%d')}, commit {STARTED_AT_COMMIT}; {args.threads} torch "
        f"thread(s) per fit, {args.jobs} fit(s) side by side\n" + extra
    )
    text = header + "\n" + tables + "\n"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(text)
    (out / f"{name}.json").write_text(json.dumps(runs, indent=1))
    print("\n" + text)
    return text


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def add_time_limit_arguments(parser) -> None:
    """--row-seconds and --total-seconds, read back by `TimeLimits.from_args`."""
    parser.add_argument(
        "--row-seconds",
        nargs="+",
        default=None,
        metavar="SECONDS|ROW=SECONDS",
        help="time limit of a row, compilation included: a default and/or ROW=SECONDS for "
        "single rows (e.g. 35 lmm/torch=60); none by default",
    )
    parser.add_argument(
        "--total-seconds",
        type=float,
        default=None,
        help="no row starts once this much time has passed, and none runs past it",
    )


class TimeLimits:
    """Each row's time limit: its own or the default one, and never past the total."""

    def __init__(self, default=None, per_row=None, total=None):
        self.default, self.per_row = default, dict(per_row or {})
        self.deadline = None if total is None else time.monotonic() + total

    @classmethod
    def from_args(cls, args) -> TimeLimits:
        default, per_row = None, {}
        for item in args.row_seconds or []:
            name, _, seconds = item.rpartition("=")
            try:
                value = float(seconds)
            except ValueError:
                raise SystemExit(f"--row-seconds: not a number of seconds: {item!r}") from None
            if name:
                per_row[name] = value
            else:
                default = value
        return cls(default, per_row, args.total_seconds)

    def for_row(self, name: str) -> float | None:
        """Seconds row `name` may take (None: no limit; 0: no time is left for it)."""
        limit = self.per_row.get(name, self.default)
        if self.deadline is not None:
            left = max(0.0, self.deadline - time.monotonic())
            limit = left if limit is None else min(limit, left)
        return limit


NO_TIME_LEFT = "not reached (total time limit)"


def export_commit(commit: str) -> str:
    """A folder holding titans_seq/ as it was at `commit` (for PYTHONPATH), with the
    top-level domains/, data/ and recipes/ of that commit inside it as the installed package
    lays them out (titans_seq.domains, ...), so that no module of today's checkout mixes in."""
    folder = tempfile.mkdtemp(prefix=f"titans_seq_{commit}_")
    repo = Path(__file__).resolve().parents[1]
    tracked = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "--name-only", commit],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    subpackages = [name for name in ("domains", "data", "recipes") if name in tracked]
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "titans_seq", *subpackages],
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    for name in subpackages:
        Path(folder, name).rename(Path(folder, "titans_seq", name))
    return folder


def row_env(row: str, exports: dict) -> dict | None:
    """The subprocess environment of a row: torch@COMMIT imports the exported checkout."""
    if "@" not in row:
        return None
    return {**os.environ, "PYTHONPATH": exports[row.split("@", 1)[1]]}
