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
