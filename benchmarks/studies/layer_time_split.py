"""Where one memory layer's training call spends its time on CPU, part by part.

    python benchmarks/studies/layer_time_split.py
    python benchmarks/studies/layer_time_split.py --shape 1x1024x64 --backend compiled --threads 2

One `lmm` mixer (memory depth 2, chunk 16, heads of 64, fp32) at B x T x D, forward +
backward on random inputs, median milliseconds of --repeat calls after three warm-up calls
(the compiled backend compiles in the first):

  layer       the whole mixer
  project     its projections, gates and convolution (`NeuralMemory.project`) alone
  memory op   the memory (`lmm_memory`) alone, on the projections' outputs
  chunk scan  ("compiled" on a CPU) the memory op's two compiled walks over its full chunks
              (`chunk_scan.ChunkScan`, forward and backward), timed around each call
  graph calls ("compiled" where chunks are stepped one by one) the memory op's compiled
              chunk-step calls within it, timed around each call of its graph cache
  graph call  one forward and one backward graph called again and again on the same inputs
              (the kernels with their call wrappers, without the walk around them)

The memory op minus its chunk scan or graph calls is the work around them (with graph calls:
the decays and q k^T of all chunks, the chunk-major copies, the concatenations, the Python
of the walk; with the chunk scan: the chunk-major copies, the partial segments' eager
steps, the concatenations).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import titans_seq as ts
from titans_seq.ops import graph_cache
from titans_seq.ops.lmm import chunk_scan, lmm_memory


def median_ms(fn, repeat: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


class GraphCallTimer:
    """Wraps `GraphCache.__call__` and `ChunkScan.forward` / `backward` while active: the
    seconds spent in each kind and their call counts, and the first graph-cache call of
    each layout kind ("forward", "backward") for replaying."""

    def __init__(self):
        self.seconds = {"graph calls": 0.0, "chunk scan": 0.0}
        self.calls = {"graph calls": 0, "chunk scan": 0}
        self.first = {}
        self._originals = [
            (graph_cache.GraphCache, "__call__", graph_cache.GraphCache.__call__),
            (chunk_scan.ChunkScan, "forward", chunk_scan.ChunkScan.forward),
            (chunk_scan.ChunkScan, "backward", chunk_scan.ChunkScan.backward),
        ]

    def reset(self):
        self.seconds = dict.fromkeys(self.seconds, 0.0)
        self.calls = dict.fromkeys(self.calls, 0)

    def _timed(self, kind, original):
        timer = self

        def timed(obj, *args):
            start = time.perf_counter()
            out = original(obj, *args)
            timer.seconds[kind] += time.perf_counter() - start
            timer.calls[kind] += 1
            if kind == "graph calls":
                layout, make_fn, tensors, geometry = args
                timer.first.setdefault(layout[0], (obj, layout, make_fn, list(tensors), geometry))
            return out

        return timed

    def __enter__(self):
        for cls, name, original in self._originals:
            kind = "graph calls" if cls is graph_cache.GraphCache else "chunk scan"
            setattr(cls, name, self._timed(kind, original))
        return self

    def __exit__(self, *exc):
        for cls, name, original in self._originals:
            setattr(cls, name, original)


def replay_ms(recorded: tuple, repeat: int) -> float:
    """Median ms of one recorded graph-cache call (cache, layout, make_fn, tensors,
    geometry) made again on the same tensors."""
    cache, layout, make_fn, tensors, geometry = recorded
    return median_ms(lambda: cache(layout, make_fn, tensors, geometry), repeat)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="1x1024x64", help="BxTxD")
    parser.add_argument("--backend", default="compiled", choices=["torch", "compiled"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    B, T, D = (int(n) for n in args.shape.split("x"))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layer = ts.build_mixer("lmm", dim=D, heads=max(1, D // 64), chunk_size=16, backend=args.backend)
    memory = layer.memory
    x = torch.randn(B, T, D, requires_grad=True)

    def whole_layer():
        layer(x)[0].square().mean().backward()

    def project():
        outputs = memory.project(x, None)[:6]
        sum(t.square().mean() for t in outputs if t is not None).backward()

    with torch.no_grad():
        inputs = [t.detach() for t in memory.project(x, None)[:6]]
    inputs = [None if t is None else t.requires_grad_() for t in inputs]
    weights = tuple(memory.memory_weights)

    def memory_op():
        y, _ = lmm_memory(*inputs, weights, chunk_size=16, backend=args.backend)
        y.square().mean().backward()

    rows = [
        ("layer", median_ms(whole_layer, args.repeat)),
        ("project", median_ms(project, args.repeat)),
        ("memory op", median_ms(memory_op, args.repeat)),
    ]
    if args.backend == "compiled":
        with GraphCallTimer() as timer:
            memory_op()  # records one call of each kind
            timer.reset()
            for _ in range(args.repeat):
                memory_op()
        for kind, seconds in timer.seconds.items():
            if timer.calls[kind]:
                per_call = timer.calls[kind] // args.repeat
                rows.append((f"{kind} ({per_call} a call)", seconds / args.repeat * 1e3))
        for kind, recorded in sorted(timer.first.items()):
            rows.append((f"one {kind} graph call", replay_ms(recorded, 200 * args.repeat)))
    print(
        f"{args.shape}, backend {args.backend}, {args.threads} threads, torch {torch.__version__}"
    )
    print("| part | ms |\n|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
