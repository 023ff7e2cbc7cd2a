"""Multi-query associative recall (MQAR) with a long gap, and a small trainer for it.

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

Demo: `python -m titans_seq.tasks.associative_recall --mixer swa`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..mixers.registry import mixer_class
from .token_model import TokenModel

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


# -- training helper ------------------------------------------------------------------------
@dataclasses.dataclass
class RecallTrainingResult:
    """model: the trained TokenModel; losses: the training loss of every step; accuracy:
    recall accuracy on a held-out batch; chance: the accuracy of uniform guessing."""

    model: TokenModel
    losses: list[float]
    accuracy: float
    chance: float


def train_associative_recall(
    task: AssociativeRecall,
    *,
    mixer: str | Sequence[str] = "swa",
    mixer_options: Mapping | Sequence[Mapping | None] | None = None,
    dim: int = 64,
    depth: int = 2,
    heads: int = 4,
    steps: int = 300,
    batch_size: int = 32,
    lr: float = 3e-3,
    warmup_fraction: float = 0.1,
    eval_batch_size: int = 256,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> RecallTrainingResult:
    """Train embedding -> Backbone -> linear head on fresh batches; report held-out accuracy.

    AdamW with linear warmup and cosine decay (to 10% of lr), gradient clipping at 1.0.
    Deterministic for a given seed (model init, training and evaluation batches).
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TokenModel(
            task.vocab_size,
            dim=dim,
            depth=depth,
            mixer=mixer,
            mixer_options=mixer_options,
            heads=heads,
        ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, int(warmup_fraction * steps))

    def lr_factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress_fraction = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress_fraction))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    train_generator = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    model.train()
    bar = tqdm(range(steps), desc=f"recall[{mixer}]", disable=not progress, leave=False)
    for _ in bar:
        inputs, targets = task.sample(batch_size, generator=train_generator, device=device)
        logits, _ = model(inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE_INDEX)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")

    model.eval()
    eval_inputs, eval_targets = task.sample(eval_batch_size, seed=seed + 1, device=device)
    with torch.no_grad():
        logits, _ = model(eval_inputs)
    accuracy = recall_accuracy(logits, eval_targets)
    return RecallTrainingResult(model, losses, accuracy, task.chance_accuracy)


# -- demo -----------------------------------------------------------------------------------
def _parse_option(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw  # a bare string such as backend=sdpa
    return key, value


def _demo_mixer_options(pattern: str, window: int, extra: dict) -> dict:
    """Per-mixer options: the demo defaults each mixer accepts, then the user's extras.

    Defaults: `window` (below the gap, so a sliding window alone cannot see the answers) and
    `qk_norm=True` (attention learns this task in a few hundred steps with it, and stalls
    without it at this size).
    """
    defaults = {"window": window, "qk_norm": True}
    per_mixer = {}
    for item in pattern.split(","):
        name = item.partition("*")[0].strip()
        accepted = inspect.signature(mixer_class(name).__init__).parameters
        per_mixer[name] = {k: v for k, v in defaults.items() if k in accepted} | extra
    return per_mixer


def main(argv: Sequence[str] | None = None) -> RecallTrainingResult:
    parser = argparse.ArgumentParser(
        prog="python -m titans_seq.tasks.associative_recall",
        description="Train a small model on long-gap multi-query associative recall (CPU).",
    )
    parser.add_argument("--mixer", default="swa", help="mixer name or pattern (default swa)")
    parser.add_argument(
        "--window",
        type=int,
        default=64,
        help="window of the mixers that take one (default 64: shorter than the gap, so a "
        "sliding window alone cannot see the answers)",
    )
    parser.add_argument(
        "--mixer-option",
        type=_parse_option,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra mixer option (repeatable), e.g. --mixer-option num_persistent=4",
    )
    parser.add_argument("--vocab-size", type=int, default=AssociativeRecall.vocab_size)
    parser.add_argument("--pairs", type=int, default=AssociativeRecall.num_pairs)
    parser.add_argument("--gap", type=int, default=AssociativeRecall.gap)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    task = AssociativeRecall(vocab_size=args.vocab_size, num_pairs=args.pairs, gap=args.gap)
    options = _demo_mixer_options(args.mixer, args.window, dict(args.mixer_option))
    print(
        f"task: {task.num_pairs} pairs, gap {task.gap} (answers >= {task.min_recall_distance} "
        f"tokens back), T={task.seq_len}, vocab {task.vocab_size}; mixer {args.mixer} {options}"
    )
    result = train_associative_recall(
        task,
        mixer=args.mixer,
        mixer_options=options,
        dim=args.dim,
        depth=args.depth,
        heads=args.heads,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        seed=args.seed,
        device=args.device,
    )
    print(
        f"final training loss {result.losses[-1]:.3f}; held-out recall accuracy "
        f"{result.accuracy:.3f} (chance {result.chance:.3f})"
    )
    return result


if __name__ == "__main__":
    main()
