"""The full chunks of a call as one compiled loop per direction: the "compiled" backend on CPU.

A call's full chunks run the same step one after the other. Calling a compiled graph per
chunk (`compiled_step.py`) costs, besides the chunk's kernels, the graph's call wrappers,
handles for some 50 tensors, fresh output allocations and the Python walk around it: at
small widths more than the kernels themselves (benchmarks/results/NOTES.md). Here all the
full chunks of a call are one `torch.compile`d function per direction:

* forward: the chunks' decays and q k^T in one batched operation each, then
  `torch._higher_order_ops.scan` over the chunks with `segment_step.step_forward` as its
  body. Inductor lowers the scan to a loop inside its C++ wrapper that writes every chunk's
  outputs (y, the entry state, the intermediates the adjoint reads) into preallocated
  stacks;
* backward: the same precomputations, then a scan over the chunks in reverse with
  `segment_step.step_backward` as its body, carrying the gradient of the state and reading
  each chunk's inputs, entry state and intermediates by index from the forward's stacks.

The bodies are the per-chunk steps of the other backends, so the maths is shared; the
tests compare this walk with the per-chunk one and the float64 reference. The number of
chunks and the batch size are symbolic from a layout's first compilation (`_symbolic`), so
a fit over many lengths and batch sizes compiles each direction once per layout. A layout
is what the trace depends on besides shapes: which gates are present, the memory depth,
the activation, the clip, the chunk size and whether the kernels are single-threaded.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable

import torch
import torch.utils._pytree as pytree

from .compiled_step import (
    COMPILE_OPTIONS,
    SERIAL_OPTIONS,
    _flatten_saved,
    _nested_segment,
    _unflatten_saved,
)
from .decays import segment_decays
from .segment_step import step_backward, step_forward

try:  # a prototype operator of recent PyTorch; without it the per-chunk steps serve
    from torch._higher_order_ops.scan import scan as _scan
except ImportError:  # pragma: no cover - older PyTorch
    _scan = None


def available() -> bool:
    """Whether this PyTorch has the scan operator the compiled walk needs."""
    return _scan is not None


def _python_scan(body: Callable, init, xs):
    """What `scan(body, init, xs)` computes, as a Python loop over dim 0 of xs' tensors:
    the walk without compilation (the scan operator itself traces with Dynamo even when
    run eagerly)."""
    leaves, spec = pytree.tree_flatten(xs)
    carry, outs = init, []
    for i in range(leaves[0].shape[0]):
        carry, out = body(carry, pytree.tree_unflatten([x[i] for x in leaves], spec))
        outs.append(pytree.tree_flatten(out))
    stacked = [torch.stack(parts) for parts in zip(*(leaves for leaves, _ in outs))]
    return carry, pytree.tree_unflatten(stacked, outs[0][1])


# ---- the chunks' inputs ----


def _grid(x: torch.Tensor | None, C: int) -> torch.Tensor | None:
    """[B, H, N*C, ...] -> [N, B, H, C, ...] (a chunk-major view)."""
    return None if x is None else x.unflatten(2, (x.shape[2] // C, C)).movedim(2, 0)


def _tokens(x: torch.Tensor) -> torch.Tensor:
    """[N, B, H, C, ...] -> [B, H, N*C, ...], the inverse of `_grid`."""
    x = x.movedim(0, 2)
    return x.reshape(*x.shape[:2], -1, *x.shape[4:])


def _chunk_inputs(q, k, v, theta, eta, alpha) -> list:
    """Every chunk's step inputs from chunk-major ones ([N, B, H, C, ...]): q, k, v, theta,
    eta, alpha, the decays Da, A, De, P, M, b (`segment_decays` of all chunks at once) and
    q k^T. Absent gates give None; M is None when it is Da (no momentum), since a scan's
    inputs must not alias each other."""
    dec = segment_decays(alpha, eta, theta)
    M = None if dec.M is dec.Da else dec.M
    qk = q @ k.transpose(-1, -2)
    return [q, k, v, theta, eta, alpha, dec.Da, dec.A, dec.De, dec.P, M, dec.b, qk]


def _present(entries) -> list[torch.Tensor]:
    return [x for x in entries if x is not None]


def _step_tensors(mask: tuple[bool, ...], tensors) -> tuple:
    """A chunk's inputs as `step_forward` and `step_backward` take them, from the present
    entries of `_chunk_inputs` (mask: which are; an absent M is Da)."""
    q, k, v, th, et, al, (Da, A, De, P, M, b), qk = _nested_segment(mask, tensors)
    return (q, k, v, th, et, al, (Da, A, De, P, Da if M is None else M, b), qk)


def _carried(tensors) -> list[torch.Tensor]:
    """A scan's carry: its entry must be laid out as the body returns it (contiguous;
    fresh-stream weights are a batch expansion of the learned ones)."""
    return [t.contiguous() for t in tensors]


def _symbolic(stacked, states) -> None:
    """Compile the walks with the number of chunks and the batch size symbolic from the
    first call (stacked: [N, B, ...]; states: [B, ...]): a fit meets many lengths and a last
    partial batch, and each compilation of a walk costs seconds even with a warm Inductor
    cache (a graph holding a scan is not cached whole). A size of 1 stays specialised."""
    for x in stacked:
        torch._dynamo.maybe_mark_dynamic(x, 0)
        torch._dynamo.maybe_mark_dynamic(x, 1)
    for x in states:
        torch._dynamo.maybe_mark_dynamic(x, 0)


def _own_code(fn: Callable, tag: str) -> Callable:
    """A copy of fn with a code object of its own (named fn's name + tag). Dynamo keeps its
    compilations per code object and stops compiling one after `recompile_limit` of them:
    each layout's function gets its own count instead of sharing one with every other."""
    code = fn.__code__.replace(co_name=f"{fn.__code__.co_name}_{tag}")
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


# ---- the two walks, for one layout ----


class _LayoutWalks:
    """The forward and backward walk over full chunks for one layout, compiled and eager.

    layout: ((eta present, alpha present), depth, activation, clip, chunk size, base
        present: forgetting toward W_0).
    mask: which of `_chunk_inputs`' 13 entries are present (found by the layout's probe).
    alias: which of a chunk's outputs (y, then the flat saved intermediates) share storage
        with an input or an earlier output (a scan's outputs must not alias: they are
        copied); spec: the saved intermediates' structure (`compiled_step._flatten_saved`).
    """

    def __init__(self, layout, mask: tuple[bool, ...], alias: tuple[bool, ...], spec, options):
        self.layout, self.mask, self.alias, self.spec = layout, mask, alias, spec
        self.options = options
        tag = f"{id(self):x}"
        self._walk = {
            "forward": types.MethodType(_own_code(_LayoutWalks._forward, tag), self),
            "backward": types.MethodType(_own_code(_LayoutWalks._backward, tag), self),
        }
        self._compiled: dict[str, Callable] = {}

    def compiled(self, direction: str, *args):
        """The walk ("forward" or "backward") through `torch.compile` (created at first use)."""
        fn = self._compiled.get(direction)
        if fn is None:
            fn = torch.compile(self._walk[direction], fullgraph=True, options=self.options)
            self._compiled[direction] = fn
        return fn(_scan, *args)

    def eager(self, direction: str, *args):
        """The same walk as a Python loop over the chunks."""
        return self._walk[direction](_python_scan, *args)

    def _forward(self, scan, q, k, v, theta, eta, alpha, Ws, Ss, base):
        """scan: the scan operator (compiled) or `_python_scan` (eager). q, k, v [N, B, H, C,
        d], gates [N, B, H, C] (eta, alpha may be None), chunk-major and contiguous; Ws, Ss:
        per layer [B, H, out, in], the state entering the first chunk (deviations from
        base, per layer [1, H, out, in], when given; else base is None). Returns (y [B, H,
        N*C, d], W' [L], S' [L], entry W [L] and S [L] of every chunk [N, B, H, out, in],
        the saved intermediates stacked [N, ...])."""
        _, _, activation, clip, _, _ = self.layout
        mask, alias = self.mask, self.alias
        xs = _present(_chunk_inputs(q, k, v, theta, eta, alpha))

        def body(carry, x):
            W, S = carry
            seg = _step_tensors(mask, x)
            y, W2, S2, saved = step_forward(seg, W, S, W, activation, clip, True, base=base)
            outs = [y, *_flatten_saved(saved)[1]]
            outs = [t.clone() if a else t for t, a in zip(outs, alias)]
            entries = ([w.clone() for w in W], [s.clone() for s in S])
            return (list(W2), list(S2)), (outs[0], entries, outs[1:])

        (W, S), (ys, (entry_W, entry_S), saved) = scan(body, (list(Ws), list(Ss)), xs)
        return _tokens(ys), W, S, entry_W, entry_S, saved

    def _backward(
        self, scan, q, k, v, theta, eta, alpha, entry_W, entry_S, saved, dys, dW, dS, base
    ):
        """The adjoint of `_forward` (scan: as there): its inputs and stacks (entry W, S and
        saved), dys [N, B, H, C, d] the gradient of y chunk-major with the last chunk first,
        and dW, dS (per layer [B, H, out, in]) w.r.t. the state after the last chunk.
        Returns (dq, dk, dv [B, H, N*C, d], dtheta, deta, dalpha [B, H, N*C] (None for
        absent gates), dW [L] and dS [L] w.r.t. the entry state, dBase [L] (None without
        base))."""
        _, _, activation, clip, _, _ = self.layout
        mask, spec = self.mask, self.spec
        xs = _present(_chunk_inputs(q, k, v, theta, eta, alpha))

        def body(carry, dy):
            dW, dS, dB, index = carry  # index: [1], the chunk this step takes

            def take(t):
                return torch.index_select(t, 0, index).squeeze(0)

            seg = _step_tensors(mask, [take(t) for t in xs])
            W, S = [take(t) for t in entry_W], [take(t) for t in entry_S]
            sv = _unflatten_saved(spec, [take(t) for t in saved])
            # fold: the gradient weights are the entry's (Wg = W), one gradient for both
            *input_grads, dWs, dSs, _, shares = step_backward(
                seg, W, S, W, sv, dy, dW, dS, activation, clip, fold=True, base=base
            )
            dB = dB if shares is None else [a + b for a, b in zip(dB, shares)]
            return (list(dWs), list(dSs), list(dB), index - 1), _present(input_grads)

        last = torch.full((1,), q.shape[0] - 1, dtype=torch.long, device=q.device)
        # the base's gradient is carried as a sum (an empty list without base)
        dB0 = [] if base is None else [torch.zeros_like(b) for b in base]
        (dW0, dS0, dB0, _), grads = scan(body, (list(dW), list(dS), dB0, last), dys)
        it = iter(_tokens(g.flip(0)) for g in grads)
        present = (True, True, True, True, eta is not None, alpha is not None)
        dBase = None if base is None else dB0
        return (*(next(it) if p else None for p in present), dW0, dS0, dBase)


class ChunkScan:
    """The compiled walks over a call's full chunks, per layout and thread setting.

    options: Inductor options (`compiled_step.COMPILE_OPTIONS[0]`: the C++ wrapper, which
    holds the scan's loop). A compilation or run that fails is reported once with a
    warning; the walks then run eagerly (the scan in Python over the same steps) for that
    layout, so a call that started here always finishes with the same maths.
    """

    def __init__(self, options: dict = COMPILE_OPTIONS[0]):
        self.options = dict(options)
        self._walks: dict[tuple, _LayoutWalks] = {}
        self._failed: set[tuple] = set()

    def __len__(self) -> int:
        """Layouts whose walks run compiled (created and not failed)."""
        return len(self._walks.keys() - self._failed)

    def _walks_for(self, key, probe: Callable) -> _LayoutWalks:
        walks = self._walks.get(key)
        if walks is None:
            layout, serial = key
            mask, alias, spec = probe()
            options = {**self.options, **(SERIAL_OPTIONS if serial else {})}
            walks = self._walks[key] = _LayoutWalks(layout, mask, alias, spec, options)
        return walks

    def _run(self, key, walks: _LayoutWalks, direction: str, *args):
        if key not in self._failed:
            try:
                return walks.compiled(direction, *args)
            except Exception as err:  # noqa: BLE001 - a compiler error: run it eagerly
                self._failed.add(key)
                warnings.warn(
                    f"compiling the LMM chunk walk failed ({type(err).__name__}: "
                    f"{str(err)[:300]}); this layout's walk runs eagerly from now on",
                    RuntimeWarning,
                    stacklevel=4,
                )
        return walks.eager(direction, *args)

    def forward(
        self, serial: bool, inputs, Ws, Ss, activation: str, clip, chunk_size: int, base=None
    ):
        """The walk over N >= 2 full chunks. inputs: (q, k, v, theta, eta, alpha) of the
        chunks ([B, H, N*C, ...], eta/alpha may be None); Ws, Ss: per layer [B, H, out, in],
        the entry state (a tensor, zeros for a fresh stream); base: None, or W_0 per layer
        [1, H, out, in] when the memory forgets toward it (Ws, W' deviations from it).
        serial: single-threaded kernels (`compiled_step.serial_kernels`). Returns (y [B, H,
        N*C, d], W', S', stacks): stacks is what `backward` takes."""
        # chunk-major copies: the number of chunks leads every stacked tensor the walks take
        chunks = [None if x is None else _grid(x, chunk_size).contiguous() for x in inputs]
        Ws, Ss = _carried(Ws), _carried(Ss)
        _symbolic([*_present(chunks)], Ws + Ss)
        q, k, v, theta, eta, alpha = chunks

        def probe():
            # the first chunk's step run eagerly: which of its inputs exist, which outputs
            # alias, what it saves
            first = [None if x is None else x[:1] for x in chunks]
            chunk_inputs = [None if x is None else x[0] for x in _chunk_inputs(*first)]
            mask = tuple(x is not None for x in chunk_inputs)
            seg = _step_tensors(mask, _present(chunk_inputs))
            y, _, _, saved = step_forward(seg, Ws, Ss, Ws, activation, clip, True, base=base)
            spec, flat = _flatten_saved(saved)
            seen = {t.untyped_storage().data_ptr() for t in (*_present(chunk_inputs), *Ws, *Ss)}
            alias = []
            for t in (y, *flat):
                ptr = t.untyped_storage().data_ptr()
                alias.append(ptr in seen)
                seen.add(ptr)
            return mask, tuple(alias), spec

        # the chunk inputs that exist follow from the gates given, not from their values
        gates = (eta is not None, alpha is not None)
        layout = (gates, len(Ws), activation, clip, chunk_size, base is not None)
        key = (layout, serial)
        walks = self._walks_for(key, probe)
        base = None if base is None else list(base)
        y, W, S, entry_W, entry_S, saved = self._run(key, walks, "forward", *chunks, Ws, Ss, base)
        return y, list(W), list(S), (key, walks, chunks, entry_W, entry_S, saved, base)

    def backward(self, stacks, dy, dW, dS):
        """The adjoint of `forward`: stacks as it returned them, dy [B, H, N*C, d], dW and
        dS per layer (None: nothing downstream read the state after the last chunk).
        Returns (dq, dk, dv, dtheta, deta, dalpha, dW [L], dS [L], dBase [L] or None)
        w.r.t. its inputs."""
        key, walks, chunks, entry_W, entry_S, saved, base = stacks
        if dW is None:
            dW = [torch.zeros_like(w[0]) for w in entry_W]
            dS = [torch.zeros_like(s[0]) for s in entry_S]
        C = key[0][4]
        dys = _grid(dy, C).flip(0).contiguous()  # the chunks in the order the scan takes
        dW, dS = _carried(dW), _carried(dS)
        _symbolic([*_present(chunks), *entry_W, *entry_S, *saved, dys], dW + dS)
        return self._run(
            key, walks, "backward", *chunks, entry_W, entry_S, saved, dys, dW, dS, base
        )
