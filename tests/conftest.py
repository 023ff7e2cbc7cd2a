"""Shared test configuration: the data mirror, GPU skipping, deterministic seeds."""

import os
import sys
from pathlib import Path

import pytest
import torch

# tests/ importable, for the helpers shared by test folders (process_helpers)
_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

# the offline dataset mirror beside the checkout, unless the caller points elsewhere
_MIRROR = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if "TITANS_SEQ_DATA" not in os.environ and _MIRROR.is_dir():
    os.environ["TITANS_SEQ_DATA"] = str(_MIRROR)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs CUDA (no GPU on this machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _poison_uninitialised_memory():
    """torch.empty / torch.empty_like return NaN-filled floating tensors in the tests, so code
    that reads memory it never wrote fails instead of passing on whatever was there (PyTorch's
    own switch for this, as flash-linear-attention's tests use it)."""
    import torch.utils.deterministic as deterministic

    before = deterministic.fill_uninitialized_memory, torch.are_deterministic_algorithms_enabled()
    deterministic.fill_uninitialized_memory = True
    # the filling happens only in deterministic mode; warn_only keeps ops that have no
    # deterministic implementation running (with a warning) instead of raising
    torch.use_deterministic_algorithms(True, warn_only=True)
    yield
    deterministic.fill_uninitialized_memory = before[0]
    torch.use_deterministic_algorithms(before[1])
