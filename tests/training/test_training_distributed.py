"""Multi-process training: 2 processes (torchrun, gloo, CPU) follow the 1-process run that
has the same global batch."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from training_helpers import subprocess_env, tiny_raw, write_recipe

from titans_seq.training import from_dict, train
from titans_seq.training.checkpoint import load_checkpoint
from titans_seq.training.logs import read_csv
from titans_seq.training.sampling import ShardedSampler, eval_batches


def test_sharded_sampler_keeps_the_global_batch_and_resumes():
    single = ShardedSampler(20, 8, rank=0, world_size=1, seed=3)
    ranks = [ShardedSampler(20, 8, rank=r, world_size=2, seed=3) for r in range(2)]
    for _ in range(5):  # crosses epoch boundaries (20 examples, 8 per step: last 4 dropped)
        whole = single.next_local_batch()
        parts = [s.next_local_batch() for s in ranks]
        assert parts[0] + parts[1] == whole and len(set(whole)) == 8
    state = single.state_dict()
    after = [single.next_local_batch() for _ in range(3)]
    fresh = ShardedSampler(20, 8, seed=0)
    fresh.load_state_dict(state)
    assert [fresh.next_local_batch() for _ in range(3)] == after
    with pytest.raises(ValueError, match="divisible by the number of processes"):
        ShardedSampler(20, 9, world_size=2)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        ShardedSampler(4, 8)


def test_eval_batches_are_disjoint_and_equal_in_number_across_ranks():
    shares = [eval_batches(21, 8, r, 2, None) for r in range(2)]
    assert len(shares[0]) == len(shares[1])
    seen = [i for share in shares for batch in share for i in batch]
    assert sorted(seen) == list(range(20))  # one trailing example left out for equal shares
    assert sum(map(len, eval_batches(21, 8, 0, 1, None))) == 21
    assert sum(map(len, eval_batches(100, 8, 0, 1, 2))) == 16


def test_length_buckets_keep_every_example_once_and_batch_similar_lengths():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(10, 1000, (403,), generator=g)
    sampler = ShardedSampler(403, 16, seed=5, lengths=lengths, bucket_batches=8)
    batches = [sampler.next_global_batch() for _ in range(25)]  # one epoch: 25 full batches
    seen = [i for batch in batches for i in batch]
    assert len(seen) == len(set(seen)) == 400  # the 3 trailing examples wait
    spread = [int(lengths[b].max() - lengths[b].min()) for b in batches]
    unbucketed = ShardedSampler(403, 16, seed=5)
    random_spread = [
        int(lengths[b].max() - lengths[b].min())
        for b in (unbucketed.next_global_batch() for _ in range(25))
    ]
    assert sum(spread) < sum(random_spread) / 4
    # the order is a function of (seed, epoch): a restored sampler continues identically
    state = sampler.state_dict()
    after = [sampler.next_global_batch() for _ in range(30)]
    fresh = ShardedSampler(403, 16, seed=0, lengths=lengths, bucket_batches=8)
    fresh.load_state_dict(state)
    assert [fresh.next_global_batch() for _ in range(30)] == after
    with pytest.raises(ValueError, match="lengths for"):
        ShardedSampler(403, 16, lengths=lengths[:-1])


def test_eval_batches_in_length_order_cover_the_same_examples():
    lengths = torch.tensor([5, 1, 9, 3, 7, 2, 8, 4, 6, 0])
    batches = eval_batches(10, 3, 0, 1, None, lengths=lengths)
    assert [lengths[b].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    shares = [eval_batches(10, 4, r, 2, None, lengths=lengths) for r in range(2)]
    assert sorted(i for share in shares for b in share for i in b) == list(range(10))


def _run_torchrun(recipe, nproc, *extra):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "titans_seq.cli",
        "train",
        str(recipe),
        *extra,
    ]
    done = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.parametrize("strategy", ["ddp", pytest.param("fsdp", marks=pytest.mark.slow)])
def test_two_processes_match_one_process_with_the_same_global_batch(tmp_path, strategy):
    common = {"model": {"dropout": 0.0}, "eval": {"every": 10}}
    # 1 process: global batch 16 as 2 accumulation micro-batches of 8
    one = tiny_raw(tmp_path / "one", train={"max_steps": 30, "grad_accum": 2}, **common)
    reference = train(from_dict(one))
    # 2 processes: the same global batch, 8 examples each, no accumulation
    two = tiny_raw(
        tmp_path / "two",
        train={"max_steps": 30, "grad_accum": 1, "distributed": strategy},
        **common,
    )
    _run_torchrun(write_recipe(tmp_path / "two.yaml", two), 2)

    got = read_csv(tmp_path / "two" / "train_log.csv")
    want = read_csv(reference.run_dir / "train_log.csv")
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
        assert g["lr"] == pytest.approx(w["lr"], rel=1e-12)
    val_got = read_csv(tmp_path / "two" / "eval_log.csv")
    val_want = read_csv(reference.run_dir / "eval_log.csv")
    for g, w in zip(val_got, val_want, strict=True):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
    a = load_checkpoint(tmp_path / "two" / "checkpoints" / "step_00000030")
    b = load_checkpoint(reference.run_dir / "checkpoints" / "step_00000030")
    for key, value in b.model_state.items():
        torch.testing.assert_close(a.model_state[key], value, rtol=1e-4, atol=1e-6)
    assert len(a.training_state["rng"]) == 2  # one RNG state per process

    # a multi-process run resumes under torchrun (and extends its schedule)
    two["train"]["max_steps"] = 40
    _run_torchrun(write_recipe(tmp_path / "two.yaml", two), 2, "--resume")
    steps = [r["step"] for r in read_csv(tmp_path / "two" / "eval_log.csv")]
    assert steps == [10, 20, 30, 40]

    # checkpoints hold full states keyed by name: a single process takes the run over
    two["train"].update(max_steps=50, distributed="ddp")
    with pytest.warns(UserWarning) as caught:
        assert train(from_dict(two), resume=True).step == 50
    messages = " | ".join(str(w.message) for w in caught)
    assert "written by 2 process" in messages and "train.max_steps: 40 -> 50" in messages


@pytest.mark.slow
def test_two_processes_with_compiled_steps_match_one_eager_process(tmp_path):
    """train.compile: true under torchrun (DDP, the compiled model wraps the DDP module):
    the same losses as one eager process with the same global batch."""
    common = {"model": {"dropout": 0.0}, "eval": {"every": 10}}
    one = tiny_raw(tmp_path / "one", train={"max_steps": 20, "grad_accum": 2}, **common)
    reference = train(from_dict(one))
    two = tiny_raw(
        tmp_path / "two", train={"max_steps": 20, "grad_accum": 1, "compile": True}, **common
    )
    _run_torchrun(write_recipe(tmp_path / "two.yaml", two), 2)
    got = read_csv(tmp_path / "two" / "train_log.csv")
    want = read_csv(reference.run_dir / "train_log.csv")
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for g, w in zip(got, want):
        assert g["loss"] == pytest.approx(w["loss"], rel=1e-5)
