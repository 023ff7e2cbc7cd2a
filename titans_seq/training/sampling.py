"""Which examples each process trains and evaluates on: DistributedSampler-style sharding
that keeps the global batch independent of the number of processes, and resumes exactly."""

from __future__ import annotations

import torch


class ShardedSampler:
    """Global batches from a seeded permutation per epoch; each process takes its slice.

    The global batch of step s is the same set of examples whatever the number of processes
    (rank r takes the r-th contiguous slice), so 1 process with gradient accumulation and N
    processes compute the same update. The position (epoch, offset) is all the state there is:
    it goes into checkpoints, and the permutation of an epoch is recomputed from the seed.
    The incomplete last batch of an epoch is dropped, so every step has the full batch.

    With `lengths` [N] (examples padded to the longest of their batch), batches are drawn
    of similar lengths: the epoch's permutation is cut into windows of `bucket_batches`
    global batches, each window is sorted by length and cut into batches, and the order of
    all batches is shuffled. Every example is still seen once per epoch, in a batch of
    random neighbours of about its length.
    """

    def __init__(
        self,
        num_examples: int,
        global_batch: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        shuffle: bool = True,
        lengths: torch.Tensor | None = None,
        bucket_batches: int = 32,
    ):
        if global_batch % world_size:
            raise ValueError(
                f"train.batch_size ({global_batch}) must be divisible by the number of "
                f"processes ({world_size})"
            )
        if num_examples < global_batch:
            raise ValueError(
                f"the training set has {num_examples} examples, fewer than one global batch "
                f"(train.batch_size={global_batch})"
            )
        self.num_examples = num_examples
        self.global_batch = global_batch
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.shuffle = shuffle
        if lengths is not None and len(lengths) != num_examples:
            raise ValueError(f"{len(lengths)} lengths for {num_examples} examples")
        self.lengths = None if lengths is None else torch.as_tensor(lengths)
        self.bucket_batches = bucket_batches
        self.epoch = 0
        self.offset = 0
        self._perm: tuple[int, torch.Tensor] | None = None

    def _permutation(self) -> torch.Tensor:
        if self._perm is None or self._perm[0] != self.epoch:
            if self.shuffle:
                gen = torch.Generator().manual_seed(self.seed + self.epoch)
                perm = torch.randperm(self.num_examples, generator=gen)
                if self.lengths is not None:
                    perm = self._bucketed(perm, gen)
            else:
                perm = torch.arange(self.num_examples)
            self._perm = (self.epoch, perm)
        return self._perm[1]

    def _bucketed(self, perm: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """`perm` reordered so that each global batch holds examples of similar lengths
        (see the class docstring); the trailing examples that fill no batch stay last."""
        window = self.global_batch * self.bucket_batches
        full = (self.num_examples // self.global_batch) * self.global_batch
        batches = []
        for start in range(0, full, window):
            part = perm[start : min(start + window, full)]
            # stable: equal lengths keep their random order
            part = part[torch.sort(self.lengths[part], stable=True).indices]
            batches.extend(part.split(self.global_batch))
        order = torch.randperm(len(batches), generator=gen)
        return torch.cat([*(batches[i] for i in order.tolist()), perm[full:]])

    def next_global_batch(self) -> list[int]:
        if self.offset + self.global_batch > self.num_examples:
            self.epoch += 1
            self.offset = 0
        batch = self._permutation()[self.offset : self.offset + self.global_batch].tolist()
        self.offset += self.global_batch
        return batch

    def next_local_batch(self) -> list[int]:
        """This process's share of the next global batch."""
        per_rank = self.global_batch // self.world_size
        batch = self.next_global_batch()
        return batch[self.rank * per_rank : (self.rank + 1) * per_rank]

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "offset": self.offset, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])
        self.offset = int(state["offset"])
        self.seed = int(state["seed"])


def eval_batches(
    num_examples: int,
    batch_size: int,
    rank: int,
    world_size: int,
    max_batches: int | None,
    lengths: torch.Tensor | None = None,
) -> list[list[int]]:
    """This process's validation batches: the first `max_batches * batch_size` examples,
    dealt round-robin to the processes so that every process runs the same number of batches
    (a sharded model needs every rank in every forward). Up to world_size - 1 trailing
    examples are left out so that the shares are equal; a single process sees them all.
    With `lengths` [N], those examples are taken in length order, so that each batch holds
    examples of similar lengths (the metrics are sums: the order changes nothing else)."""
    total = num_examples if max_batches is None else min(num_examples, max_batches * batch_size)
    total -= total % world_size
    chosen = torch.arange(total)
    if lengths is not None:
        chosen = chosen[torch.sort(torch.as_tensor(lengths)[:total], stable=True).indices]
    mine = chosen[rank::world_size].tolist()
    local = max(1, -(-batch_size // world_size))
    return [mine[i : i + local] for i in range(0, len(mine), local)]


def split_micro_batches(indices: list[int], parts: int) -> list[list[int]]:
    """Equal contiguous micro-batches for gradient accumulation."""
    if len(indices) % parts:
        raise ValueError(
            f"the per-process batch ({len(indices)}) is not divisible by train.grad_accum ({parts})"
        )
    size = len(indices) // parts
    return [indices[i * size : (i + 1) * size] for i in range(parts)]
