"""GraphCache: one Dynamo-free graph per layout for its first geometry, torch.compile for
the others, results equal to the function's own."""

from __future__ import annotations

import pytest
import torch

from titans_seq.ops.graph_cache import GraphCache


def scaled_product(a, b):
    """[B, n, m] x [B, m, k] -> ([B, n, k], [B, n, m]): a product and an element-wise term."""
    return (a @ b, a * 2 + 1)


def make():
    return scaled_product


def test_a_layout_compiles_once_and_matches_the_function():
    cache = GraphCache()
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        a, b = torch.randn(2, 4, 8, generator=g), torch.randn(2, 8, 3, generator=g)
        out = cache("product", make, [a, b], geometry=(a.shape, b.shape))
        for got, want in zip(out, scaled_product(a, b)):
            torch.testing.assert_close(got, want)
    assert len(cache) == 1 and not cache._dynamo


def test_one_tensor_passed_twice_at_trace_time_does_not_tie_the_arguments():
    """The first call passes the same tensor as both arguments; later calls pass two
    different ones. The graph must not have assumed they alias."""
    cache = GraphCache()
    a = torch.randn(2, 4, 4)
    cache("square", make, [a, a], geometry=(a.shape,))
    b = torch.randn(2, 4, 4)
    out = cache("square", make, [a, b], geometry=(a.shape,))
    torch.testing.assert_close(out[0], a @ b)


def test_another_geometry_goes_through_torch_compile_and_still_matches():
    cache = GraphCache()
    compiled = []
    real_compile = torch.compile

    def counting(fn, **kwargs):
        compiled.append(fn)
        return real_compile(fn, backend="eager")

    g = torch.Generator().manual_seed(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch, "compile", counting)
        for batch in (2, 3, 5, 2):
            a, b = torch.randn(batch, 4, 8, generator=g), torch.randn(batch, 8, 3, generator=g)
            out = cache("product", make, [a, b], geometry=(a.shape, b.shape))
            for got, want in zip(out, scaled_product(a, b)):
                torch.testing.assert_close(got, want)
    # one Dynamo-free graph (batch 2); one torch.compile'd function for the others
    assert len(cache) == 1 and len(compiled) == 1


def test_a_compilation_error_reaches_the_caller(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler")

    monkeypatch.setattr(torch._inductor, "compile", broken)
    a = torch.randn(2, 4, 4)
    with pytest.raises(RuntimeError, match="no compiler"):
        GraphCache()("product", make, [a, a], geometry=(a.shape,))
