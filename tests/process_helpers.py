"""Helpers of the tests that run `titans-seq` in child processes (kill/resume, torchrun)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def subprocess_env(*python_paths: Path, **variables: str) -> dict[str, str]:
    """Environment for child processes: one thread per process (two processes share the
    CI's two cores), no torchrun variables inherited, `python_paths` importable, plus
    `variables`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    if python_paths:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, python_paths), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(variables)
    return env


def cli_command(*args: str) -> list[str]:
    """`python -m titans_seq.cli ARGS` with this interpreter."""
    return [sys.executable, "-m", "titans_seq.cli", *args]


def torchrun_train(nproc: int, *args: str, env: dict[str, str], timeout: float = 300):
    """`torchrun --standalone --nproc_per_node NPROC -m titans_seq.cli train ARGS` with this
    interpreter; returns the completed process (output captured)."""
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc_per_node={nproc}", "-m", "titans_seq.cli", "train", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def latest_checkpoint_step(run_dir: Path) -> int:
    """Step of the run's newest complete checkpoint, -1 before the first one."""
    try:
        return int((run_dir / "checkpoints" / "latest").read_text().strip().split("_")[1])
    except (FileNotFoundError, IndexError, ValueError):
        return -1


def sigkill_after_checkpoint(
    args: list[str], env: dict[str, str], run_dir: Path, step: int, timeout: float
) -> int:
    """Start the training command `args`, SIGKILL it as soon as its newest checkpoint is at
    `step` or later, and return the step of that checkpoint (the run really was killed)."""
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    try:
        while latest_checkpoint_step(run_dir) < step:
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the run never reached the kill point"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return latest_checkpoint_step(run_dir)
