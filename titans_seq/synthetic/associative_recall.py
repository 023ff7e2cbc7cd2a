"""Multi-query associative recall (MQAR) with a long gap: the data generator.

Each sequence is

    k1 v1 k2 v2 … kN vN | f f f … f (gap filler tokens) | q1 a1 q2 a2 … qQ aQ

where the keys k_i are distinct, the values v_i random, the filler tokens random noise, and
each query q_j repeats an earlier key whose value a_j must be produced at the query's
position (targets are IGNORE_INDEX everywhere else; the answers also appear in the input
right after their query, so the sequence reads as ordinary next-token prediction). Queries
ask distinct pairs, so an earlier answer never gives away a later one.

The value a query needs is at least `gap + 1` positions before it, so with a gap longer
than an attention window a single sliding-window layer cannot see it: solving the task
needs memory that reaches beyond the window.

Token ids: keys [0, K), values [K, vocab_size - F), filler [vocab_size - F, vocab_size) with
F = num_filler_tokens and K = (vocab_size - F) // 2.

Training goes through the shared loop: the `associative_recall` task and the
`synthetic/associative_recall_*` recipes (`titans-seq train associative_recall_mag`).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

IGNORE_INDEX = -100


class RecallBatch(NamedTuple):
    """inputs: [B, T] int64 tokens; targets: [B, T] int64, IGNORE_INDEX where nothing is asked."""

    inputs: torch.Tensor
    targets: torch.Tensor


@dataclasses.dataclass(frozen=True)
class AssociativeRecall:
    """Configuration and sampler of the task.

    Args:
        vocab_size: total number of token ids (keys, values and filler).
        num_pairs: N key-value pairs per sequence (distinct keys, so N <= number of keys).
        gap: filler tokens between the last pair and the first query.
        num_queries: Q queries per sequence (distinct pairs, Q <= N); default N.
        num_filler_tokens: F ids reserved for filler noise (>= 1 when gap > 0).
    """

    vocab_size: int = 32
    num_pairs: int = 4
    gap: int = 256
    num_queries: int | None = None
    num_filler_tokens: int = 8

    def __post_init__(self):
        for name in ("vocab_size", "num_pairs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("gap", "num_filler_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
        if self.gap > 0 and self.num_filler_tokens == 0:
            raise ValueError("a gap needs filler tokens: set num_filler_tokens >= 1")
        if self.num_keys < 1 or self.num_values < 1:
            raise ValueError(
                f"vocab_size={self.vocab_size} leaves no room for keys and values after "
                f"{self.num_filler_tokens} filler tokens"
            )
        if self.num_pairs > self.num_keys:
            raise ValueError(
                f"num_pairs={self.num_pairs} distinct keys do not fit in {self.num_keys} key ids; "
                "raise vocab_size or lower num_pairs"
            )
        if self.num_queries is not None:
            q = self.num_queries
            if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= self.num_pairs:
                raise ValueError(f"num_queries must be in 1..num_pairs={self.num_pairs}, got {q!r}")

    # -- layout ---------------------------------------------------------------------------
    @property
    def queries(self) -> int:
        return self.num_pairs if self.num_queries is None else self.num_queries

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - self.num_filler_tokens) // 2

    @property
    def num_values(self) -> int:
        return self.vocab_size - self.num_filler_tokens - self.num_keys

    @property
    def seq_len(self) -> int:
        """T = 2 N + gap + 2 Q."""
        return 2 * self.num_pairs + self.gap + 2 * self.queries

    @property
    def query_positions(self) -> torch.Tensor:
        """[Q] positions where an answer is asked (the query tokens)."""
        first = 2 * self.num_pairs + self.gap
        return torch.arange(first, first + 2 * self.queries, 2)

    @property
    def min_recall_distance(self) -> int:
        """Smallest possible distance from a query back to the value it asks for (gap + 1)."""
        return self.gap + 1

    @property
    def chance_accuracy(self) -> float:
        """Accuracy of guessing a value id uniformly."""
        return 1.0 / self.num_values

    # -- sampling -------------------------------------------------------------------------
    def sample(
        self,
        batch_size: int,
        *,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
    ) -> RecallBatch:
        """A batch of B sequences; deterministic given `seed` or the state of `generator`.

        Pass exactly one of `seed` (a fresh CPU generator) or `generator` (advanced by the
        call, so successive calls give fresh batches).
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        if (seed is None) == (generator is None):
            raise ValueError("pass exactly one of seed=... or generator=...")
        if generator is None:
            generator = torch.Generator().manual_seed(seed)
        b, n, q = batch_size, self.num_pairs, self.queries
        keys = torch.rand(b, self.num_keys, generator=generator).argsort(dim=1)[:, :n]
        values = torch.randint(
            self.num_keys, self.num_keys + self.num_values, (b, n), generator=generator
        )
        filler_start = self.vocab_size - self.num_filler_tokens
        filler = torch.randint(filler_start, self.vocab_size, (b, self.gap), generator=generator)
        asked = torch.rand(b, n, generator=generator).argsort(dim=1)[:, :q]
        query_keys, answers = keys.gather(1, asked), values.gather(1, asked)

        inputs = torch.cat(
            (
                torch.stack((keys, values), dim=2).reshape(b, 2 * n),
                filler,
                torch.stack((query_keys, answers), dim=2).reshape(b, 2 * q),
            ),
            dim=1,
        )
        targets = torch.full_like(inputs, IGNORE_INDEX)
        targets[:, self.query_positions] = answers
        return RecallBatch(inputs.to(device), targets.to(device))


def recall_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> float:
    """Fraction of asked positions (target != IGNORE_INDEX) whose argmax is the answer.

    logits: [B, T, V]; targets: [B, T].
    """
    asked = targets != IGNORE_INDEX
    if not asked.any():
        raise ValueError("recall_accuracy: no position has a target")
    correct = (logits.argmax(dim=-1) == targets) & asked
    return correct.sum().item() / asked.sum().item()
