"""Model-FLOPs utilization: logged from the task's FLOPs per token and the device's peak."""

from __future__ import annotations

import pytest
import torch
from training_helpers import tiny_raw
from training_tiny_task import TinyRegression

from titans_seq.training import from_dict, train
from titans_seq.training.logs import peak_flops, read_csv

FLOPS_PER_TOKEN = 1234.0
TOKENS_PER_EXAMPLE = 8


class CountingTask(TinyRegression):
    """The tiny regression task with a token count and a declared FLOPs per token."""

    def count_tokens(self, batch):
        return batch["x"].shape[0] * TOKENS_PER_EXAMPLE

    def flops_per_token(self, model, cfg):
        return FLOPS_PER_TOKEN


def _run(tmp_path, task, **train_options):
    raw = tiny_raw(tmp_path / "run", train={"max_steps": 10, **train_options})
    train(from_dict(raw), task=task)
    return read_csv(tmp_path / "run" / "train_log.csv")


def test_mfu_is_achieved_over_peak_flops_with_a_configured_peak(tmp_path):
    rows = _run(tmp_path, CountingTask(), peak_flops=1.0e9)
    assert rows and all("mfu" in r for r in rows)
    for row in rows:
        expected = row["tokens_per_s"] * FLOPS_PER_TOKEN / 1.0e9
        assert row["mfu"] == pytest.approx(expected, rel=1e-12)
        # tokens/s is the examples/s times the tokens per example (same time window)
        assert row["tokens_per_s"] == pytest.approx(
            row["examples_per_s"] * TOKENS_PER_EXAMPLE, rel=1e-12
        )


def test_no_mfu_on_cpu_without_a_peak_or_without_flops(tmp_path):
    rows = _run(tmp_path / "a", CountingTask())  # CPU: the peak is unknown, not invented
    assert rows and all("mfu" not in r and "tokens_per_s" in r for r in rows)
    rows = _run(tmp_path / "b", TinyRegression(), peak_flops=1.0e9)  # no FLOPs declared
    assert rows and all("mfu" not in r for r in rows)


def test_peak_flops_table(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert peak_flops(None, cpu, None) is None
    assert peak_flops(None, cpu, torch.bfloat16) is None
    assert peak_flops(5.0e12, cpu, None) == 5.0e12  # configured wins everywhere
    names = {
        "NVIDIA H100 80GB HBM3": 989e12,
        "NVIDIA H100 PCIe": 756e12,
        "NVIDIA H200": 989e12,
        "NVIDIA A100-SXM4-80GB": 312e12,
        "NVIDIA A100-PCIE-40GB": 312e12,
        "NVIDIA GeForce RTX 3090": None,
    }
    for name, expected in names.items():
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None, n=name: n)
        assert peak_flops(None, cuda, torch.bfloat16) == expected, name
        assert peak_flops(None, cuda, None) is None  # fp32: the 16-bit peak does not apply
        assert peak_flops(2.0e12, cuda, torch.bfloat16) == 2.0e12


def test_peak_flops_must_be_positive(tmp_path):
    from titans_seq.training.config import ConfigError

    with pytest.raises(ConfigError, match="peak_flops"):
        from_dict(tiny_raw(tmp_path, train={"peak_flops": 0}))
