"""Whether the memory's retrieval should leave the sequential chunk walk on CPU.

    python benchmarks/studies/batched_retrieval.py
    python benchmarks/studies/batched_retrieval.py --shapes 1x1x1024x64 --threads 1 --repeat 3

A chunk segment's work splits in two (`segment_step.py`): the chain, which the next segment
waits for (the inner gradients at the entry weights and the state after the segment), and
the retrieval y_t = f_{W_t}(q_t) with its adjoint, which needs only the segment's entry
state and what the chain found. The fused Triton backward already takes the retrieval's
adjoint for every segment in one pass. This study times, on the eager PyTorch steps, one
forward + backward over a sequence both ways:

  walk      every segment's whole step in turn (`step_forward` / `step_backward`: what the
            "torch" backend does)
  batched   only the chain in turn; the retrieval of all segments as one stacked call of
            `retrieve` after the forward walk, and its adjoint (`retrieval_adjoint`) as one
            call before the backward walk (`chain_backward` per segment)

on random inputs at each B x H x T x d (memory depth 2, chunk 16, momentum, forgetting and
the inner-gradient clip on), checks that both give the same outputs and gradients, and
prints the median seconds of each (in turns, --repeat rounds) and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from titans_seq.ops.lmm.memory_mlp import activation_fn, activation_second_derivative
from titans_seq.ops.lmm.segment_step import (
    chain_backward,
    chain_forward,
    retrieval_adjoint,
    retrieve,
    segment_tensors,
    split_segments,
    step_backward,
    step_forward,
)

CHUNK = 16
CLIP = 8.0


def inputs(B: int, H: int, T: int, d: int):
    """(segments, initial weights): q, k, v [B, H, T, d] and gates [B, H, T] split into
    chunks of 16 tokens; two memory layers [B, H, d, d]."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, d, generator=g) / d**0.5 for _ in range(3))
    theta = torch.rand(B, H, T, generator=g) * 0.05
    eta = torch.rand(B, H, T, generator=g) * 0.5 + 0.4
    alpha = torch.rand(B, H, T, generator=g) * 0.05
    lengths = [CHUNK] * (T // CHUNK)
    segments = split_segments(q, k, v, theta, eta, alpha, lengths, CHUNK)
    weights = [torch.randn(B, H, d, d, generator=g) / d**0.5 for _ in range(2)]
    return segments, weights


def walk(segments, weights):
    """Forward and backward with every segment's whole step in turn; returns (y [B, H, T,
    d], gradient w.r.t. the initial weights, per-segment input gradients)."""
    W, S = weights, None
    ys, entries, saved = [], [], []
    for seg in segments:
        entries.append((W, S))
        y, W, S, sv = step_forward(segment_tensors(seg), W, S, W, "silu", CLIP, True)
        ys.append(y)
        saved.append(sv)
    dW = dS = None
    grads = []
    for i in range(len(segments) - 1, -1, -1):
        Wi, Si = entries[i]
        dy = torch.ones_like(ys[i])
        out = step_backward(
            segment_tensors(segments[i]), Wi, Si, Wi, saved[i], dy, dW, dS, "silu", CLIP, True
        )
        grads.append(out[:6])
        dW, dS = out[6], out[7]
    return torch.cat(ys, 2), dW, grads[::-1]


def batched(segments, weights):
    """The same with the retrieval of all segments stacked (see the module docstring)."""
    act, dact = activation_fn("silu")
    ddact = activation_second_derivative("silu")
    W, S = weights, None
    entries, chains = [], []
    for seg in segments:
        entries.append((W, S))
        W, S, chain = chain_forward(seg, W, S, W, act, dact, CLIP)
        chains.append(chain)
    L = len(weights)

    def stack(xs):
        return torch.stack(xs, 2)  # [B, H, N, ...]

    Wst = [stack([e[0][i] for e in entries]) for i in range(L)]
    # a fresh stream's first segment enters with zero momentum
    Sst = [stack([e[0][i] * 0 if e[1] is None else e[1][i] for e in entries]) for i in range(L)]
    hs = [stack([c["inputs"][i] for c in chains]) for i in range(L)]
    deltas = [stack([c["deltas"][i] for c in chains]) for i in range(L)]
    Mlr = stack([c["Mlr"] for c in chains])
    q, qk = stack([s.q for s in segments]), stack([s.qk for s in segments])
    A, b = stack([s.dec.A for s in segments]), stack([s.dec.b for s in segments])
    y, saved = retrieve(q, qk, A, b, Wst, Sst, hs, deltas, Mlr, act)
    r = retrieval_adjoint(torch.ones_like(y), A, b, Wst, Sst, hs, deltas, Mlr, saved, dact)

    def segment_share(j):
        def take(x):
            return None if x is None else x[:, :, j].clone()

        return {k: [take(x) for x in v] if isinstance(v, list) else take(v) for k, v in r.items()}

    dW = dS = None
    grads = []
    for i in range(len(segments) - 1, -1, -1):
        Wi, Si = entries[i]
        share = segment_share(i)
        out = chain_backward(
            segments[i], Wi, Si, Wi, chains[i], share, dW, dS, act, dact, ddact, CLIP
        )
        grads.append(out[:6])
        dW = [a + g for a, g in zip(out[6], out[8])]
        dS = out[7]
    B, H, N, C, d = y.shape
    return y.reshape(B, H, N * C, d), dW, grads[::-1]


def max_difference(a, b) -> float:
    (ya, dWa, ga), (yb, dWb, gb) = a, b
    diffs = [(ya - yb).abs().max()] + [(x - z).abs().max() for x, z in zip(dWa, dWb)]
    for sa, sb in zip(ga, gb):
        diffs += [(x - z).abs().max() for x, z in zip(sa, sb) if x is not None]
    return max(float(x) for x in diffs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shapes", default="1x1x1024x64,1x1x256x64,4x4x1024x64", help="BxHxTxd,...")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"{args.threads} threads; seconds of one forward + backward, median of {args.repeat}\n")
    print("| B x H x T x d | walk | batched | walk / batched | max difference |")
    print("|---|---|---|---|---|")
    for shape in args.shapes.split(","):
        B, H, T, d = (int(x) for x in shape.split("x"))
        segments, weights = inputs(B, H, T, d)
        difference = max_difference(walk(segments, weights), batched(segments, weights))
        seconds = {"walk": [], "batched": []}
        for _ in range(args.repeat):
            for name, fn in (("walk", walk), ("batched", batched)):
                start = time.perf_counter()
                fn(segments, weights)
                seconds[name].append(time.perf_counter() - start)
        w, bt = (statistics.median(seconds[n]) for n in ("walk", "batched"))
        print(f"| {shape} | {w:.4f} | {bt:.4f} | {w / bt:.2f}x | {difference:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
