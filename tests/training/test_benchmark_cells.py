"""The benchmark grids' cell store: a killed cell resumes from its newest checkpoint and ends
as an uninterrupted one; a cell killed before its first checkpoint starts again."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from training_helpers import tiny_raw

from titans_seq.training import from_dict, train

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS), str(BENCHMARKS / "grids")]
from cells import CellStore  # noqa: E402


class _Killed(Exception):
    pass


def _weights(result):
    from safetensors.torch import load_file

    from titans_seq.training.loop import BEST_WEIGHTS

    return load_file(result.run_dir / BEST_WEIGHTS)


def test_a_cell_with_a_checkpoint_resumes_and_ends_as_an_uninterrupted_run(tmp_path):
    store = CellStore(tmp_path / "grid")
    reference = train(from_dict(tiny_raw(tmp_path / "reference", train={"max_steps": 40})))

    # a run stopped mid-way, after a checkpoint (as a killed cell leaves it)
    run_dir, resume = store.resumable_run_dir("tiny-seed0")
    assert not resume

    def stop_at_step_20(step, metrics):
        if step == 20:
            raise _Killed

    with pytest.raises(_Killed):
        train(from_dict(tiny_raw(run_dir, train={"max_steps": 40})), hooks=[stop_at_step_20])

    run_dir, resume = store.resumable_run_dir("tiny-seed0")
    assert resume and run_dir == tmp_path / "grid" / "runs" / "tiny-seed0"
    resumed = train(from_dict(tiny_raw(run_dir, train={"max_steps": 40})), resume=True)
    assert resumed.step == reference.step == 40
    assert resumed.best_metric == reference.best_metric
    for name, tensor in _weights(reference).items():
        torch.testing.assert_close(_weights(resumed)[name], tensor, rtol=0, atol=0)


def test_a_cell_without_a_checkpoint_starts_again(tmp_path):
    store = CellStore(tmp_path / "grid")
    stale = tmp_path / "grid" / "runs" / "tiny-seed0"
    stale.mkdir(parents=True)
    (stale / "log.csv").write_text("step,loss\n1,0.5\n")
    run_dir, resume = store.resumable_run_dir("tiny-seed0")
    assert not resume
    assert run_dir == stale and not run_dir.exists()  # emptied: the cell starts again


def test_the_grid_table_counts_seeds_per_model_over_the_whole_store(tmp_path):
    from forecasting import HORIZONS, write_table

    store = CellStore(tmp_path / "grid")
    base = dict(device="CPU", commit="abc1234", date="2026-11-24", test_mse=0.4, test_mae=0.4)
    for horizon in HORIZONS:
        store.save(f"ETTh1-H{horizon}-lmm-seed0", dict(base, dataset="ETTh1", horizon=horizon,
                                                       model="lmm", seed=0))  # fmt: skip
        for seed in (1, 2):
            store.save(f"ETTh1-H{horizon}-dlinear-seed{seed}", dict(
                base, dataset="ETTh1", horizon=horizon, model="dlinear", seed=seed,
            ))  # fmt: skip
    table = write_table(store)  # every model in the store, whichever ran last
    assert table == (tmp_path / "grid" / "forecasting.md").read_text()
    assert "| lmm MSE | lmm MAE | dlinear MSE | dlinear MAE | n |" in table
    assert "| ETTh1 | 96 | 96 | 0.400 | 0.400 | 0.400 ± 0.000 | 0.400 ± 0.000 | 1 / 2 |" in table
    assert "| 1 / 2 |" in table.split("| ETTh1 | 96 | avg |")[1].splitlines()[0]


def test_the_grid_table_gives_each_lookback_its_own_rows(tmp_path):
    from forecasting import HORIZONS, cell_name, write_table

    assert cell_name("ETTh1", 96, "lmm", 0, 96) == "ETTh1-H96-lmm-seed0"  # older cells' names
    assert cell_name("ETTh1", 96, "lmm", 0, 512) == "ETTh1-H96-lmm-seed0-L512"
    store = CellStore(tmp_path / "grid")
    base = dict(device="CPU", commit="abc1234", date="2026-11-26", dataset="ETTh1", seed=0)
    for horizon in HORIZONS:
        # a cell written before cells recorded their lookback reads as lookback 96
        store.save(f"ETTh1-H{horizon}-lmm-seed0", dict(
            base, horizon=horizon, model="lmm", test_mse=0.4, test_mae=0.4,
        ))  # fmt: skip
        store.save(f"ETTh1-H{horizon}-lmm-seed0-L512", dict(
            base, horizon=horizon, model="lmm", lookback=512, test_mse=0.3, test_mae=0.3,
        ))  # fmt: skip
    table = write_table(store)
    assert "| ETTh1 | 96 | 96 | 0.400 | 0.400 | 1 |" in table
    assert "| ETTh1 | 512 | 96 | 0.300 | 0.300 | 1 |" in table
    assert "| ETTh1 | 512 | avg | **0.300** | **0.300** | 1 |" in table
    store.save("ETTh2-H96-lmm-seed0", dict(base, dataset="ETTh2", horizon=96, model="lmm",
                                          test_mse=0.2, test_mae=0.2))  # fmt: skip
    table = write_table(store)
    assert "| ETTh2 | 96 | 96 | 0.200 | 0.200 | 1 |" in table
    assert "| ETTh2 | 96 | avg |" not in table  # one horizon of four: no average


def test_the_validation_table_reads_the_best_validation_mse_never_the_test_mse(tmp_path):
    from forecasting import validation_table

    store = CellStore(tmp_path / "grid")
    base = dict(device="CPU", commit="abc1234", date="2026-11-26", dataset="ETTh2", horizon=96)
    for seed, val in ((0, 0.5), (1, 0.7)):
        store.save(f"ETTh2-H96-lmm-seed{seed}-L512", dict(
            base, model="lmm", seed=seed, lookback=512, best_val_mse=val, test_mse=9.0,
        ))  # fmt: skip
    store.save("ETTh1-H96-patchtst-seed0", dict(
        base, dataset="ETTh1", model="patchtst", seed=0, best_val_mse=0.25, test_mse=9.0,
    ))  # fmt: skip
    table = validation_table(store)
    assert table == (tmp_path / "grid" / "validation.md").read_text()
    lines = table.splitlines()
    assert lines[0] == "| dataset | L | H | lmm val MSE | patchtst val MSE |"
    assert lines[2:] == [
        "| ETTh1 | 96 | 96 | – | 0.250 |",
        "| ETTh2 | 512 | 96 | 0.600 ± 0.141 | – |",
    ]


_POOL_PARENT = """
import multiprocessing, os, sys, time
from concurrent.futures import ProcessPoolExecutor
sys.path.insert(0, {benchmarks!r})
from cells import exit_with_parent

def report_and_wait(path):
    with open(path, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(60)

if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=exit_with_parent, initargs=(os.getpid(), 0.1))
    pool.submit(report_and_wait, {pid_file!r})
    time.sleep(60)
"""


def test_a_grid_worker_ends_when_the_grid_is_killed(tmp_path):
    import os
    import signal
    import subprocess
    import time

    pid_file = tmp_path / "worker.pid"
    script = tmp_path / "grid.py"
    script.write_text(_POOL_PARENT.format(benchmarks=str(BENCHMARKS), pid_file=str(pid_file)))
    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        worker = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)  # no handler runs: only the worker's watch helps
        parent.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(worker, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived the killed grid by 20 s")
    finally:
        parent.kill()
