"""What a domain implements to be trained by the shared loop: the `Task` interface.

A task turns a validated `RunConfig` into a model, a training and a validation dataset, a
loss and evaluation metrics. The engine owns everything else (optimizer, schedule, precision,
distribution, checkpoints, logs), so a new domain is one small class.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from ..schema import RunConfig

Batch = Any  # a tensor or a (nested) dict/tuple of tensors


class Task:
    """Base class of trainable tasks; subclass it and decorate with `register_task`.

    Class attributes:
        model_config: dataclass validating the recipe's `model:` section (None: free-form).
        data_config: dataclass validating the recipe's `data:` section (None: free-form).
        metrics: the names `evaluate_batch` + `finalize_metrics` report, so that a recipe's
            `eval.metric` is checked when it is loaded; empty: not declared (checked at the
            first evaluation instead).

    Methods to implement: `build_model`, `build_datasets`, `loss`. Override `evaluate_batch`
    to report metrics beyond the loss (and `finalize_metrics` for non-linear ones),
    `count_tokens` to get a tokens/s throughput, `flops_per_token` to get the MFU, and
    `on_train_end` to export the result.
    """

    name: str = ""
    model_config: type | None = None
    data_config: type | None = None
    metrics: tuple[str, ...] = ()
    # whether the task trains with carried state (a recipe's `streams:` section): it then
    # implements `stream_batch`, `segment_loss` and `default_segment_length`
    supports_streams: bool = False

    def build_model(self, cfg: RunConfig) -> nn.Module:
        """A freshly initialised model (the engine seeds the RNGs before calling this)."""
        raise NotImplementedError

    def build_datasets(self, cfg: RunConfig) -> tuple[BatchDataset, BatchDataset]:
        """(train, validation) datasets, identical on every process; the engine shards them."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        """(mean loss over the batch, extra scalars to log) for one training micro-batch."""
        raise NotImplementedError

    def evaluate_batch(self, model: nn.Module, batch: Batch) -> dict[str, tuple[float, float]]:
        """Metric name -> (sum, count) over one validation batch; the engine reduces
        sum/count over batches and processes, so every metric is an exact global mean.
        The default reports the loss, weighted by the number of examples."""
        loss, _ = self.loss(model, batch)
        n = batch_size_of(batch)
        return {"loss": (float(loss) * n, float(n))}

    def count_tokens(self, batch: Batch) -> int | None:
        """Tokens in a batch, for the tokens/s throughput; None reports examples/s only."""
        return None

    def flops_per_token(self, model: nn.Module, cfg: RunConfig) -> float | None:
        """Training FLOPs (forward + backward) per counted token of the bare `model`, for
        the model-FLOPs-utilization (MFU) log; None (the default) logs no MFU."""
        return None

    def finalize_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Metrics derived from the reduced global means (e.g. perplexity = exp(loss)),
        which no (sum, count) pair can express; the default returns `metrics` unchanged."""
        return metrics

    def default_segment_length(self, cfg: RunConfig) -> int:
        """Tokens per segment when the recipe's `streams.segment_length` is null."""
        raise NotImplementedError

    def segment_length(self, cfg: RunConfig) -> int:
        """Tokens per segment of a run with `streams:`: the recipe's, else the task's."""
        return cfg.streams.segment_length or self.default_segment_length(cfg)

    def stream_batch(self, dataset: Any, indices: Sequence[int], length: int) -> Batch:
        """Training streams of `length` tokens for the examples `indices`: {"inputs": int64
        [B, length], "targets": int64 [B, length]}, each target the token that follows
        its input, -100 where nothing is scored (past a document's end, outside an
        answer). The engine cuts them into segments (`titans_seq.training.streams`)."""
        raise NotImplementedError

    def segment_loss(
        self, model: nn.Module, segment: Batch, state: Any
    ) -> tuple[torch.Tensor, Any]:
        """(summed loss over the segment's scored targets, state after the segment) for one
        segment {"inputs": [B, S], "targets": [B, S]} read from `state` (None: fresh)."""
        raise NotImplementedError

    def on_train_end(self, cfg: RunConfig, run_dir: Path) -> None:
        """Called once on the main process when a run ends, after its last checkpoint and
        `best_model.safetensors` are written (e.g. to export the best model in the domain's
        own format). The default does nothing."""


class BatchDataset:
    """Map-style dataset that assembles whole batches: `len(ds)`, `ds.get_batch(indices)`.

    Gathering a batch with one indexing operation is much faster than collating examples
    one by one, which matters for the small synthetic tasks that run on CPU in the tests.
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def get_batch(self, indices: Sequence[int]) -> Batch:
        raise NotImplementedError

    def example_lengths(self) -> torch.Tensor | None:
        """Per-example lengths [N] of a dataset whose batches are padded to their longest
        example, or None (the default: fixed-size examples). With lengths, the engine draws
        training batches of similar lengths and evaluates in length order, so that little
        of each batch is padding."""
        return None


def example_lengths(dataset: Any) -> torch.Tensor | None:
    """`dataset.example_lengths()` where the dataset has it, else None."""
    method = getattr(dataset, "example_lengths", None)
    return method() if callable(method) else None


class TensorDataset(BatchDataset):
    """Examples stored as tensors that share their first dimension (a dict or a tuple)."""

    def __init__(self, tensors: dict[str, torch.Tensor] | tuple[torch.Tensor, ...]):
        items = tensors.values() if isinstance(tensors, dict) else tensors
        lengths = {t.shape[0] for t in items}
        if len(lengths) != 1:
            raise ValueError(f"TensorDataset tensors disagree on their length: {sorted(lengths)}")
        self.tensors = tensors
        self.length = lengths.pop()

    def __len__(self) -> int:
        return self.length

    def get_batch(self, indices: Sequence[int]) -> Batch:
        index = torch.as_tensor(list(indices), dtype=torch.long)
        if isinstance(self.tensors, dict):
            return {k: t[index] for k, t in self.tensors.items()}
        return tuple(t[index] for t in self.tensors)


def fetch_batch(dataset: Any, indices: Sequence[int]) -> Batch:
    """A batch from a `BatchDataset`, or from any `torch.utils.data.Dataset` (collated)."""
    if hasattr(dataset, "get_batch"):
        return dataset.get_batch(indices)
    from torch.utils.data import default_collate

    return default_collate([dataset[i] for i in indices])


def batch_size_of(batch: Batch) -> int:
    """Number of examples in a batch: the first dimension of its first tensor."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0]
    values = batch.values() if isinstance(batch, dict) else batch
    for value in values:
        if isinstance(value, (torch.Tensor, dict, list, tuple)):
            return batch_size_of(value)
    raise TypeError(f"cannot find a tensor in the batch to count its examples: {type(batch)}")
