"""One run per run folder: a second run is refused with the holder's pid, and the lock of a
killed run is taken over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from training_helpers import cli_command, subprocess_env, tiny_raw, write_recipe

from titans_seq.training import from_dict, train
from titans_seq.training.logs import read_csv
from titans_seq.training.run_lock import RunFolderBusy, RunLock


def test_a_second_lock_on_a_folder_is_refused_with_the_holders_pid(tmp_path):
    with RunLock(tmp_path / "run"):
        with pytest.raises(RunFolderBusy, match=rf"in use by another run \(pid {os.getpid()}"):
            RunLock(tmp_path / "run").acquire()
    RunLock(tmp_path / "run").acquire().release()  # free again once released


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError
        time.sleep(0.05)


def test_two_runs_in_one_folder_the_second_is_refused_and_the_first_is_intact(tmp_path):
    run_dir = tmp_path / "run"
    first = write_recipe(
        tmp_path / "first.yaml",
        tiny_raw(run_dir, data={"delay": 0.05}, train={"max_steps": 200, "seed": 0}),
    )
    second = write_recipe(tmp_path / "second.yaml", tiny_raw(run_dir, train={"seed": 1}))
    env = subprocess_env()
    holder = subprocess.Popen(
        cli_command("train", str(first)), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        _wait_for(lambda: (run_dir / "train_log.csv").exists() or holder.poll() is not None)
        refused = subprocess.run(
            cli_command("train", str(second)), env=env, capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 2, refused.stderr
        assert f"in use by another run (pid {holder.pid}" in refused.stderr
        assert "Traceback" not in refused.stderr
        _, err = holder.communicate(timeout=300)
        assert holder.returncode == 0, err.decode()[-2000:]
    finally:
        holder.kill()
    # the first run's logs are its own: one header, steps in order, to the last step
    steps = [int(row["step"]) for row in read_csv(run_dir / "train_log.csv")]
    assert steps == sorted(steps) and steps[-1] == 200
    assert (run_dir / "eval_log.csv").read_text().count("step") == 1


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    run_dir = tmp_path / "run"
    code = (
        "import sys, time; from titans_seq.training.run_lock import RunLock; "
        f"lock = RunLock({str(run_dir)!r}).acquire(); print('held', flush=True); time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunFolderBusy, match=f"pid {holder.pid}"):
            train(from_dict(tiny_raw(run_dir, train={"max_steps": 10})))
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = train(from_dict(tiny_raw(run_dir, train={"max_steps": 10})))
    assert result.step == 10
