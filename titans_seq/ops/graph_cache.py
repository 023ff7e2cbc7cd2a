"""Inductor graphs of small, hot functions, called without Dynamo on their hot path.

`torch.compile` checks Dynamo's guards and runs AOTAutograd's runtime wrappers on every
call. For a function of a few dozen tensors called thousands of times a second (a memory
chunk step is 50-100 us of kernels on CPU) that costs 15-30 us a call
(benchmarks/results/NOTES.md). `GraphCache` traces such a function once per layout with `make_fx`,
compiles the trace with `torch._inductor.compile` (Inductor's entry point for graphs
captured without Dynamo) and calls the result on the flat tensors.

What Dynamo's guards would check, the caller states: `layout`, a hashable description of
everything the trace depends on besides tensor geometry (which arguments are present, the
Python scalars baked into the graph), and `geometry`, a hashable description of the
tensors' shapes and strides that the caller guarantees determines every input's shape,
stride, dtype and device. The first geometry of each layout gets the Dynamo-free graph;
other geometries (another batch size, another width) go through `torch.compile` with
dimension 0 marked dynamic, so a layout costs at most two compilations however many batch
sizes a fit meets, as with Dynamo alone.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch


def _trace_inputs(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Distinct tensors of the same shapes, strides, dtypes and devices: the trace must not
    see two arguments as one tensor because one call passed the same tensor twice (the
    compiled graph would then assume they always alias)."""
    return [
        torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).zero_()
        for t in tensors
    ]


class GraphCache:
    """Compiled graphs of functions of flat tensors, keyed by (layout, geometry).

    options: Inductor options (`torch._inductor.config` names) for every graph.
    `__call__(layout, make_fn, tensors, geometry)` returns `make_fn()(*tensors)` computed by
    a compiled graph: make_fn builds the function for a layout (called once per layout);
    the function takes tensors only and returns a tuple of tensors. Compilation errors
    propagate (the caller decides what to fall back to).
    """

    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})
        # layout -> (geometry, compiled graph, function): the Dynamo-free graph
        self._direct: dict[Hashable, tuple[Hashable, Callable, Callable]] = {}
        # layout -> torch.compile'd function, for the layout's other geometries
        self._dynamo: dict[Hashable, Callable] = {}

    def __len__(self) -> int:
        """Graphs compiled without Dynamo (one per layout)."""
        return len(self._direct)

    def __call__(
        self,
        layout: Hashable,
        make_fn: Callable[[], Callable],
        tensors: Sequence[torch.Tensor],
        geometry: Hashable,
    ) -> Sequence[torch.Tensor]:
        entry = self._direct.get(layout)
        if entry is None:
            entry = self._compile_direct(layout, make_fn(), tensors, geometry)
        if entry[0] == geometry:
            return entry[1](*tensors)
        return self._other_geometry(layout, entry[2], tensors)

    def _compile_direct(self, layout, fn, tensors, geometry):
        import torch._inductor  # noqa: F401 - `torch._inductor.compile` is looked up at call time
        from torch.fx.experimental.proxy_tensor import make_fx

        example = _trace_inputs(tensors)
        graph = make_fx(fn, tracing_mode="fake")(*example)
        compiled = torch._inductor.compile(graph, example, options=self.options or None)
        entry = (geometry, compiled, fn)
        self._direct[layout] = entry
        return entry

    def _other_geometry(self, layout, fn, tensors):
        compiled = self._dynamo.get(layout)
        if compiled is None:
            compiled = torch.compile(fn, options=self.options or None)
            self._dynamo[layout] = compiled
        for t in tensors:
            # the batch size is what varies between a fit's calls: one graph for all of them
            torch._dynamo.maybe_mark_dynamic(t, 0)
        return compiled(*tensors)
