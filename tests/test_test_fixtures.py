"""The shared test fixtures do what the suite relies on."""

import torch


def test_uninitialised_memory_is_poisoned():
    assert torch.empty(3).isnan().all()
    assert torch.empty_like(torch.ones(2)).isnan().all()
    assert torch.empty(2, 2, requires_grad=True).isnan().all()
    assert torch.empty(2, dtype=torch.long).shape == (2,)  # integers: left as they are
