"""Checks shared by the mixer test modules."""

from __future__ import annotations

import torch

# mixer variants that every contract test also runs: id -> (registered mixer, options)
VARIANTS = {
    "mac[segment]": ("mac", dict(retrieval="segment")),
    "mac[paper]": ("mac", dict(retrieval="segment", memory_input="attention")),
    "mal[one_block]": ("mal", dict(layout="one_block")),
}


# small windows/segments/chunks, so that short test sequences cross them
SMALL_OPTIONS = {
    "lmm": dict(chunk_size=4),
    "mag": dict(chunk_size=4, window=6),
    "mal": dict(chunk_size=4, window=6),
    "mac": dict(chunk_size=4, segment_size=6),
    "swa": dict(window=6),
}


def library_mixers() -> list[str]:
    """The mixers titans-seq registers itself. A test module may register another library's
    mixer (the side-by-side peers in benchmarks/grids/) into the same registry; whether it
    was imported before a test's parameters are collected must not decide what is tested."""
    import titans_seq as ts
    from titans_seq.mixers.registry import mixer_class

    return [n for n in ts.list_mixers() if mixer_class(n).__module__.startswith("titans_seq.")]


def variant(name: str) -> tuple[str, dict]:
    """(registered mixer name, its variant options) of a mixer name or a VARIANTS id."""
    return VARIANTS.get(name, (name, {}))


def build_small(name: str, dim: int = 16, heads: int = 2) -> torch.nn.Module:
    """A float64 mixer (a registered name or a VARIANTS id) with `SMALL_OPTIONS`, seeded."""
    import titans_seq as ts

    torch.manual_seed(0)
    mixer, options = variant(name)
    options = {**SMALL_OPTIONS.get(mixer, {}), **options}
    return ts.build_mixer(mixer, dim=dim, heads=heads, **options).double()


def assert_memory_backends_agree(mixer, x: torch.Tensor) -> None:
    """The "torch" memory backend gives the "reference" backend's output, input gradient and
    every parameter gradient (float64 tolerances) for `mixer` on x [B, T, D]."""
    x = x.detach().requires_grad_(True)
    results = {}
    for backend in ("reference", "torch"):
        mixer.backend = backend
        mixer.zero_grad()
        y, _ = mixer(x)
        (gx,) = torch.autograd.grad(y.pow(2).sum(), x, retain_graph=True)
        y.pow(2).sum().backward()
        grads = {n: p.grad.clone() for n, p in mixer.named_parameters()}
        results[backend] = (y.detach(), gx, grads)
    y_ref, gx_ref, g_ref = results["reference"]
    y, gx, g = results["torch"]
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-9, atol=1e-12)
    assert set(g) == set(g_ref)
    for name in g:
        torch.testing.assert_close(g[name], g_ref[name], rtol=1e-8, atol=1e-11, msg=name)


def run_in_pieces(mixer, x: torch.Tensor, cuts) -> torch.Tensor:
    """`mixer`'s output on x [B, T, D] read in pieces that end at each of `cuts` (positions
    in (0, T); others are ignored) and at T, the state carried from piece to piece."""
    T = x.shape[1]
    outputs, state, start = [], None, 0
    for stop in [*sorted({c for c in cuts if 0 < c < T}), T]:
        out, state = mixer(x[:, start:stop], state)
        outputs.append(out)
        start = stop
    return torch.cat(outputs, 1)
