"""Long-document evaluation: loss over whole documents with the model's state carried from
one window to the next, reported per position bucket.

A language model's validation usually restarts at every window, which hides what a memory
is for: a token late in a long document may be predicted from everything before it. Here
each document is fed in windows of `window` tokens with the streaming state passed along
(`logits, state = model(tokens, state)`), so position t is predicted from the document's
first t + 1 tokens; the loss of every prediction is filed under its position's bucket
([0, 128), [128, 256), ... doubling). Run with `carry_state=False` the state restarts at
every window instead: the difference between the two, bucket by bucket, is what the
carried context buys.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

LN2 = math.log(2.0)


def position_buckets(longest: int, first: int = 128) -> list[int]:
    """Bucket edges [0, first, 2 first, 4 first, ...] up to and including `longest`."""
    if longest < 1 or first < 1:
        raise ValueError(f"longest and first must be positive, got {longest}, {first}")
    edges = [0]
    edge = first
    while edges[-1] < longest:
        edges.append(min(edge, longest))
        edge *= 2
    return edges


@dataclasses.dataclass
class LongDocumentResult:
    """Loss per position bucket: `edges` [0, e_1, ..., e_K] delimit K buckets of predicting
    positions; `nats[k]` / `tokens[k]` is bucket k's mean loss in nats per token."""

    window: int
    carry_state: bool
    edges: list[int]
    nats: list[float]
    tokens: list[int]
    documents: int
    num_bytes: float
    seconds: float

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens)

    @property
    def loss(self) -> float:
        """Mean nats per predicted token over every document."""
        return sum(self.nats) / max(self.total_tokens, 1)

    @property
    def bpb(self) -> float:
        """Bits per UTF-8 byte of the documents' text."""
        return sum(self.nats) / LN2 / max(self.num_bytes, 1e-9)

    def bucket_loss(self) -> list[float | None]:
        return [n / t if t else None for n, t in zip(self.nats, self.tokens)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "carry_state": self.carry_state,
            "documents": self.documents,
            "tokens": self.total_tokens,
            "bytes": self.num_bytes,
            "loss": self.loss,
            "bpb": self.bpb,
            "ppl": math.exp(min(self.loss, 700.0)),
            "buckets": [
                {"start": a, "end": b, "tokens": t, "loss": loss}
                for a, b, t, loss in zip(
                    self.edges, self.edges[1:], self.tokens, self.bucket_loss()
                )
            ],
            "seconds": self.seconds,
        }


def bucket_table(results: Sequence[LongDocumentResult]) -> str:
    """Markdown: one row per position bucket, the loss (nats/token) of each result side by
    side (named by whether it carried the state), then the overall loss and bits/byte."""
    names = [f"{'carried' if r.carry_state else 'reset every'} {r.window}" for r in results]
    lines = [
        "| positions | tokens | " + " | ".join(f"loss, {n}" for n in names) + " |",
        "|---|---|" + "---|" * len(results),
    ]
    first = results[0]
    for k, (a, b) in enumerate(zip(first.edges, first.edges[1:])):
        cells = [f"{r.bucket_loss()[k]:.4f}" if r.tokens[k] else "–" for r in results]
        lines.append(f"| {a}–{b} | {first.tokens[k]} | " + " | ".join(cells) + " |")
    overall = " | ".join(f"{r.loss:.4f}" for r in results)
    lines.append(f"| all | {first.total_tokens} | {overall} |")
    lines.append("| bits/byte | | " + " | ".join(f"{r.bpb:.4f}" for r in results) + " |")
    return "\n".join(lines)


@torch.no_grad()
def evaluate_long_documents(
    model: torch.nn.Module,
    documents: Sequence[torch.Tensor],
    window: int = 1024,
    carry_state: bool = True,
    num_bytes: float | None = None,
    edges: Sequence[int] | None = None,
    device: torch.device | str | None = None,
    progress: bool = False,
) -> LongDocumentResult:
    """Loss of `model` over whole `documents` per position bucket.

    Args:
        model: `logits [1, T, V], state = model(tokens [1, T], state)`.
        documents: 1-D token-id tensors (each of at least 2 tokens: a prediction needs one).
        window: tokens per forward call.
        carry_state: pass the state from one window to the next (False: restart each window).
        num_bytes: UTF-8 bytes of the documents' text (bits per byte; default 1 per token).
        edges: bucket edges of predicting positions (default `position_buckets`).
        device: where to run (None: the model's device).
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be a positive integer, got {window!r}")
    documents = [torch.as_tensor(d).long().flatten() for d in documents]
    documents = [d for d in documents if d.numel() >= 2]
    if not documents:
        raise ValueError("no document of at least 2 tokens to evaluate")
    longest = max(d.numel() - 1 for d in documents)
    edges = list(edges) if edges is not None else position_buckets(longest)
    if edges[0] != 0 or any(b <= a for a, b in zip(edges, edges[1:])) or edges[-1] < longest:
        raise ValueError(f"bucket edges must rise from 0 to at least {longest}, got {edges}")
    if device is None:
        device = next(iter(model.parameters()), torch.empty(0)).device
    edge_tensor = torch.tensor(edges[1:-1], device=device)
    nats = torch.zeros(len(edges) - 1, dtype=torch.float64, device=device)
    tokens = torch.zeros(len(edges) - 1, dtype=torch.long, device=device)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=sum(d.numel() - 1 for d in documents), desc="documents", leave=False)
    was_training = model.training
    model.eval()
    start_time = time.perf_counter()
    try:
        for document in documents:
            document = document.to(device)
            inputs, targets = document[:-1], document[1:]
            state = None
            for start in range(0, inputs.numel(), window):
                piece = inputs[start : start + window]
                logits, new_state = model(piece[None], state if carry_state else None)
                state = new_state
                scores = logits[0].to(torch.promote_types(logits.dtype, torch.float32))
                loss = F.cross_entropy(
                    scores, targets[start : start + piece.numel()], reduction="none"
                )
                positions = torch.arange(start, start + piece.numel(), device=device)
                bucket = torch.bucketize(positions, edge_tensor, right=True)
                nats.index_add_(0, bucket, loss.double())
                tokens.index_add_(0, bucket, torch.ones_like(bucket))
                if bar is not None:
                    bar.update(piece.numel())
    finally:
        if bar is not None:
            bar.close()
        model.train(was_training)
    total = int(tokens.sum())
    return LongDocumentResult(
        window=window,
        carry_state=carry_state,
        edges=edges,
        nats=nats.tolist(),
        tokens=tokens.tolist(),
        documents=len(documents),
        num_bytes=float(total if num_bytes is None else num_bytes),
        seconds=time.perf_counter() - start_time,
    )


def plot_bucket_losses(results: Sequence[LongDocumentResult], out, title: str = "") -> None:
    """Loss per position bucket (x: bucket start, log scale) for each result, to `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in results:
        xs = [max(a, 1) for a, t in zip(r.edges, r.tokens) if t]
        ys = [loss for loss in r.bucket_loss() if loss is not None]
        label = f"state {'carried' if r.carry_state else 'reset'} (window {r.window})"
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("position in document (bucket start)")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title(title or "loss by position")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
