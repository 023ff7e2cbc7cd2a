"""CPU runs use the cores that other work leaves free when they start, or a pinned count."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from training_helpers import tiny_raw

from titans_seq.training import from_dict, train
from titans_seq.training.config import ConfigError
from titans_seq.training.cpu_threads import (
    available_cores,
    cores_busy_with_other_work,
    cpu_threads,
    threads_for_run,
)


def test_the_thread_count_follows_the_free_cores_and_a_pinned_number():
    assert threads_for_run("auto", busy=0.1, cores=8, current=8) == 8
    assert threads_for_run("auto", busy=2.0, cores=2, current=2) == 1  # never below one
    assert threads_for_run("auto", busy=1.2, cores=4, current=4) == 3
    assert threads_for_run("auto", busy=0.0, cores=8, current=2) == 2  # never raised
    assert threads_for_run("auto", busy=None, cores=8, current=4) == 4  # nothing known
    assert threads_for_run(3, busy=8.0, cores=8, current=8) == 3


def test_other_work_is_measured_and_this_process_is_not_counted():
    busy = cores_busy_with_other_work(interval=0.2)
    if busy is None:
        pytest.skip("no /proc/stat here")
    if busy > available_cores() - 1:
        pytest.skip(f"the machine is already busy ({busy:.1f} cores): one more cannot show")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        loaded = cores_busy_with_other_work(interval=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert loaded >= busy + 0.5  # one spinning process is about one more busy core


def test_the_count_is_restored_after_the_run(tmp_path):
    before = torch.get_num_threads()
    with cpu_threads(1, torch.device("cpu")) as (threads, _):
        assert threads == torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    train(from_dict(tiny_raw(tmp_path / "run", train={"max_steps": 10, "threads": 1})))
    assert torch.get_num_threads() == before
    with pytest.raises(ConfigError, match="train.threads"):
        from_dict(tiny_raw(tmp_path / "bad", train={"threads": 0}))
