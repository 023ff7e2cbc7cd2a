"""The chunk steps of the "compiled" backend: Inductor graphs called on flat tensors.

`segment_step.step_forward` / `step_backward` take nested tuples and return a dict of
intermediates. Here each is wrapped as a function of a flat tuple of tensors, traced once
per layout and compiled by Inductor (`GraphCache`: without Dynamo for the first geometry of
a layout, through `torch.compile` with a dynamic batch size for the others). A layout is
what the trace depends on besides tensor geometry: which optional inputs are present
(momentum, decay gates, the entry momentum of a fresh stream, the gradient of the final
state), the saved intermediates' structure, the activation, the clip and whether the
backward folds the gradient weights into the entry weights.

Geometry, the cache's guard: the first input's shape, dtype and device, and the shape and
stride of every state tensor (weights, momentum, their gradients). Everything else a step
takes is laid out by `segment_step.split_segments` (full chunks chunk-major and
contiguous) or produced by the step before it, so its strides follow from those.

Partial segments (a stream's first or last few tokens) have other shapes and stay eager, as
does everything after a compilation failure (reported once).

A `StepCompiler` owns the graphs and what compiling them has found (the Inductor options
that work here, the structure of each layout's saved intermediates). The "compiled" backend
shares one per process (`torch_backend.shared_step_compiler`): a compilation costs tens of
seconds, and every memory layer of the same layout reuses its graphs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from ..graph_cache import GraphCache

# Inductor's options, tried in order until one compiles and runs. First its C++ wrapper:
# a chunk step is some 50 small kernels, and the default Python wrapper's per-kernel
# overhead (allocations, calls) costs more than their arithmetic on CPU (the C++ wrapper is
# about 1.25x faster for a whole layer at (1, 1024, 64); benchmarks/results/NOTES.md). Then the
# default wrapper, where the C++ one does not build; then the eager step.
COMPILE_OPTIONS: tuple[dict, ...] = ({"cpp_wrapper": True}, {})
# With fewer (batch, head) pairs than threads, a chunk step's loops hold too little work to
# share: single-threaded kernels are then faster on CPU (1.16x for a layer at (1, 1024, 64)
# on 2 threads), while with B*H >= threads the threads pay (0.92x at B*H = 4 and 16 when
# serial; benchmarks/results/NOTES.md).
SERIAL_OPTIONS = {"cpp.threads": 1}


def serial_kernels(weights: torch.Tensor) -> bool:
    """Whether a layer's compiled steps get single-threaded kernels: on CPU, with fewer
    (batch, head) pairs than torch threads. weights: [B, H, out, in]."""
    programs = weights.numel() // (weights.shape[-1] * weights.shape[-2])  # B * H
    return weights.device.type == "cpu" and programs < torch.get_num_threads()


# ---- flat forms ----


class StepSegment:
    """A segment's inputs for the steps: `nested`, the tuple `step_forward` takes ((q, k, v,
    theta, eta, alpha, (Da, A, De, P, M, b), qk); see `segment_step.segment_tensors`), and its
    tensors flattened once for the compiled steps (`flat`, None entries dropped; `mask`:
    which of the 13 entries are present)."""

    __slots__ = ("nested", "flat", "mask")

    def __init__(self, nested):
        self.nested = nested
        entries = (*nested[:6], *nested[6], nested[7])
        self.mask = tuple(x is not None for x in entries)
        self.flat = [x for x in entries if x is not None]


def _nested_segment(mask, tensors):
    it = iter(tensors)
    e = [next(it) if present else None for present in mask]
    return (*e[:6], tuple(e[6:12]), e[12])


class FlatSaved:
    """A compiled forward's saved intermediates: `spec` (see `_flatten_saved`), `tensors`,
    and `origin`, the forward's geometry (the backward's graphs are keyed by it)."""

    __slots__ = ("spec", "tensors", "origin")

    def __init__(self, spec, tensors, origin):
        self.spec, self.tensors, self.origin = spec, tensors, origin

    def as_dict(self) -> dict:
        return _unflatten_saved(self.spec, self.tensors)


def _flatten_saved(saved: dict) -> tuple[tuple, list]:
    """(spec, tensors): spec holds (name, present) per entry, present a bool for a tensor
    entry and a tuple of bools for a list entry; tensors the present ones in order."""
    spec, flat = [], []
    for name, value in saved.items():
        if isinstance(value, list):
            spec.append((name, tuple(x is not None for x in value)))
            flat.extend(x for x in value if x is not None)
        else:
            spec.append((name, value is not None))
            if value is not None:
                flat.append(value)
    return tuple(spec), flat


def _unflatten_saved(spec, tensors) -> dict:
    it = iter(tensors)
    saved = {}
    for name, present in spec:
        if isinstance(present, tuple):
            saved[name] = [next(it) if p else None for p in present]
        else:
            saved[name] = next(it) if present else None
    return saved


def _step_inputs(ts, seg_mask, L: int, has_S: bool, has_base: bool):
    """(segment, Ws, Ss or None, Wg, base or None, position after them) from a step's
    flat tensors."""
    n_seg = sum(seg_mask)
    seg = _nested_segment(seg_mask, ts[:n_seg])
    Ws, pos = ts[n_seg : n_seg + L], n_seg + L
    Ss = base = None
    if has_S:
        Ss, pos = ts[pos : pos + L], pos + L
    Wg, pos = ts[pos : pos + L], pos + L
    if has_base:
        base, pos = ts[pos : pos + L], pos + L
    return seg, Ws, Ss, Wg, base, pos


def _state_geometry(first: torch.Tensor, states) -> tuple:
    """The cache's guard (see the module docstring): first, the segment's q [B, H, C, d];
    states, the state tensors the step takes."""
    layouts = tuple([(t.shape, t.stride()) for t in states])
    if first.device.type == "cuda":  # Triton kernels are specialised on 16-byte alignment
        aligned = tuple([t.data_ptr() % 16 for t in states])
        return (first.shape, first.dtype, first.device, layouts, aligned)
    return (first.shape, first.dtype, first.device, layouts)


def _traced() -> bool:
    """Whether an outer trace (a user's `torch.compile` of the whole model, `torch.export`)
    is running this code: the eager step is then what it should see and compile, not
    calls into graphs of our own, which its fake tensors cannot run."""
    return torch.compiler.is_compiling()


def _recording() -> bool:
    # a trace by make_fx records the layout's structure; Dynamo's trace of another
    # geometry of the same layout must not (and need not) write Python state
    return not torch.compiler.is_dynamo_compiling()


_EAGER = object()  # what `_compiled` returns when the step is to run eagerly


class StepCompiler:
    """The compiled forward and backward chunk steps, with their eager fallback.

    step_forward, step_backward: the eager steps (`segment_step.step_forward`,
        `segment_step.step_backward`), which the graphs are traced from.
    options: Inductor options to try in order (`COMPILE_OPTIONS`).

    Attributes: `level`, the index into `options` in use; `failure`, set (to the last error)
    once every option failed, after which every step runs eagerly.
    """

    def __init__(
        self,
        step_forward: Callable,
        step_backward: Callable,
        options: tuple[dict, ...] = COMPILE_OPTIONS,
    ):
        self.step_forward, self.step_backward = step_forward, step_backward
        self.options = options
        self.level = 0
        self.failure: str | None = None
        self._graphs: dict[bool, GraphCache] = {}  # per `serial` flag, for options[level]
        # what a layout's trace found: the saved intermediates' structure of a forward
        # layout, the present outputs of a backward layout (both fixed by the layout)
        self._saved_specs: dict[tuple, tuple] = {}
        self._output_masks: dict[tuple, tuple[bool, ...]] = {}

    def graphs(self, serial: bool) -> GraphCache | None:
        """The graph cache for the current options (None after every option failed)."""
        if self.failure is not None:
            return None
        cache = self._graphs.get(serial)
        if cache is None:
            options = dict(self.options[self.level])
            if serial:
                options.update(SERIAL_OPTIONS)
            cache = self._graphs[serial] = GraphCache(options)
        return cache

    def _failed(self, err: BaseException) -> None:
        """Drop the compiled steps; move on to the next options, or, after the last, to
        the eager step for good with one warning."""
        self._graphs.clear()
        if self.level + 1 < len(self.options):
            self.level += 1
            return
        self.failure = f"{type(err).__name__}: {err}"
        warnings.warn(
            f"compiling the LMM chunk step failed ({type(err).__name__}: "
            f"{str(err)[:300]}); the eager chunk step is used from now on",
            RuntimeWarning,
            stacklevel=5,
        )

    # ---- the steps as functions of flat tensors ----

    def _forward_fn(self, layout):
        """The forward step of a layout as a function of its flat tensors: (segment
        tensors, W [L], S [L] when present, Wg [L], base [L] when present) -> (y, W' [L],
        S' [L], saved tensors)."""
        _, seg_mask, L, has_S, activation, clip, has_base = layout

        def forward(*ts):
            seg, Ws, Ss, Wg, base, _ = _step_inputs(ts, seg_mask, L, has_S, has_base)
            y, W, S, saved = self.step_forward(seg, Ws, Ss, Wg, activation, clip, True, base=base)
            spec, flat = _flatten_saved(saved)
            if _recording():
                self._saved_specs[layout] = spec
            return (y, *W, *S, *flat)

        return forward

    def _backward_fn(self, layout):
        """The backward step of a layout as a function of its flat tensors: (segment
        tensors, Ws [L], Ss [L] when present, Wg [L], base [L] when present, saved tensors,
        dy, dW [L] and dS [L] when present) -> its present gradients in `step_backward`'s
        order (dWs, dSs, dWg and dBase as L each)."""
        _, seg_mask, L, has_S, saved_spec, has_dstate, activation, clip, fold, has_base = layout
        n_saved = sum(sum(p) if isinstance(p, tuple) else p for _, p in saved_spec)

        def backward(*ts):
            seg, Ws, Ss, Wg, base, pos = _step_inputs(ts, seg_mask, L, has_S, has_base)
            saved, pos = _unflatten_saved(saved_spec, ts[pos : pos + n_saved]), pos + n_saved
            dy, pos = ts[pos], pos + 1
            dW = dS = None
            if has_dstate:
                dW, dS = ts[pos : pos + L], ts[pos + L : pos + 2 * L]
            out = self.step_backward(
                seg, Ws, Ss, Wg, saved, dy, dW, dS, activation, clip, fold, base=base
            )
            *grads, dWs, dSs, dWg, dBase = out
            nothing = [None] * L
            entries = [*grads, *dWs, *(dSs or nothing), *(dWg or nothing), *(dBase or nothing)]
            if _recording():
                self._output_masks[layout] = tuple(x is not None for x in entries)
            return tuple(x for x in entries if x is not None)

        return backward

    def _compiled_forward(self, cache, seg: StepSegment, Ws, Ss, Wg, activation, clip, base):
        L = len(Ws)
        layout = ("forward", seg.mask, L, Ss is not None, activation, clip, base is not None)
        states = [*Ws, *(Ss or ()), *Wg, *(base or ())]
        geometry = _state_geometry(seg.flat[0], states)
        out = cache(layout, lambda: self._forward_fn(layout), [*seg.flat, *states], geometry)
        saved = FlatSaved(self._saved_specs[layout], out[1 + 2 * L :], geometry)
        return out[0], list(out[1 : 1 + L]), list(out[1 + L : 1 + 2 * L]), saved

    def _compiled_backward(
        self, cache, seg: StepSegment, Ws, Ss, Wg, saved: FlatSaved, dy, dW, dS, act, clip, fold,
        base,
    ):  # fmt: skip
        L = len(Ws)
        has_dstate = dW is not None
        layout = (
            "backward", seg.mask, L, Ss is not None, saved.spec, has_dstate, act, clip, fold,
            base is not None,
        )  # fmt: skip
        states = [*Ws, *(Ss or ()), *Wg, *(base or ()), *((*dW, *dS) if has_dstate else ())]
        geometry = (_state_geometry(seg.flat[0], states), saved.origin)
        tensors = [*seg.flat, *Ws, *(Ss or ()), *Wg, *(base or ()), *saved.tensors, dy]
        if has_dstate:
            tensors += [*dW, *dS]
        out = cache(layout, lambda: self._backward_fn(layout), tensors, geometry)
        it = iter(out)
        entries = [next(it) if present else None for present in self._output_masks[layout]]
        rest = entries[6 + 2 * L :]
        dWg = None if fold else rest[:L]
        dBase = None if base is None else rest[L:]
        return (*entries[:6], entries[6 : 6 + L], entries[6 + L : 6 + 2 * L], dWg, dBase)

    def _compiled(self, step, compile_step: bool, full: bool, serial: bool, seg, args):
        """step(cache, seg, *args) for a full chunk when compiling is asked for and
        available, moving on through the options on errors; `_EAGER` otherwise."""
        while compile_step and full and not _traced():
            cache = self.graphs(serial)
            if cache is None:
                break
            try:
                return step(cache, seg, *args)
            except Exception as err:  # noqa: BLE001 - a compiler error: the next options
                self._failed(err)
        return _EAGER

    def run_forward(
        self, compile_step: bool, full: bool, serial: bool, seg: StepSegment,
        Ws, Ss, Wg, activation, clip, base=None,
    ):  # fmt: skip
        """`step_forward(seg.nested, Ws, Ss, Wg, activation, clip, keep=True, base=base)`,
        compiled for full chunks when asked and available, else eager. serial:
        `serial_kernels` of the layer (decided once per call, not per chunk). Returns (y,
        W', S', saved); saved is a `FlatSaved` from a compiled step, a dict from the eager
        one."""
        args = (Ws, Ss, Wg, activation, clip, base)
        out = self._compiled(self._compiled_forward, compile_step, full, serial, seg, args)
        if out is _EAGER:
            return self.step_forward(seg.nested, Ws, Ss, Wg, activation, clip, True, base=base)
        return out

    def run_backward(
        self, compile_step: bool, full: bool, serial: bool, seg: StepSegment,
        Ws, Ss, Wg, saved, dy, dW, dS, activation, clip, fold, base=None,
    ):  # fmt: skip
        """`step_backward(seg.nested, Ws, Ss, Wg, saved, dy, dW, dS, activation, clip,
        fold, base=base)`, compiled like `run_forward` where the forward step was (saved as
        `run_forward` returned it: a compiled step's graph takes what a compiled forward
        saved, in its flat form)."""
        args = (Ws, Ss, Wg, saved, dy, dW, dS, activation, clip, fold, base)
        compiled_forward = isinstance(saved, FlatSaved)
        full = full and compiled_forward
        out = self._compiled(self._compiled_backward, compile_step, full, serial, seg, args)
        if out is not _EAGER:
            return out
        if compiled_forward:
            saved = saved.as_dict()
        return self.step_backward(
            seg.nested, Ws, Ss, Wg, saved, dy, dW, dS, activation, clip, fold, base=base
        )
