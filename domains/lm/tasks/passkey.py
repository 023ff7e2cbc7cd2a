"""The `lm_passkey` task: train a byte-level `TitansLM` on passkey retrieval at one length.

Model: `TitansLM` (vocabulary 256, ids = UTF-8 bytes) from the same model section as the
`lm` task (a size preset and/or explicit dimensions, any mixer pattern and mixer options).

Data: examples of exactly `data.train_length` tokens from
`titans_seq.domains.lm.evals.passkey.PasskeyRetrieval`, made on the fly from (seed, length, index):
the training set is `num_train` virtual examples with `data.seed`, the validation set
`num_val` examples with `data.seed + 1` (needle depths uniform), so every process, trial and
resumed run sees the same examples and nothing is held in memory.

Loss: cross-entropy on the answer digits only. Metrics: `loss` (per digit), `accuracy`
(examples with all digits right; under teacher forcing this equals greedy decoding, see
`passkey.py`) and `digit_accuracy`.

With a `streams:` section, each example is `segments x segment_length` tokens (null
segment_length: `data.train_length`), read segment by segment with the state carried.

Evaluate a trained run at longer lengths with `titans-seq passkey --model RUN_DIR`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from titans_seq.training.tasks.base import BatchDataset, Task
from titans_seq.training.tasks.registry import register_task

from ..evals.needles import VOCAB_SIZE
from ..evals.passkey import PasskeyRetrieval
from .lm import LMModelConfig, build_lm
from .streaming import segment_nats


@dataclasses.dataclass
class PasskeyDataConfig:
    # training sequence length in tokens (bytes), prompt + answer
    train_length: int = 1024
    # passkey digits
    digits: int = 5
    # size of the (virtual, generated on the fly) training set: an epoch's worth of indices
    num_train: int = 1_000_000
    num_val: int = 256
    # the data seed is independent of train.seed, so seeds vary the run, not the data
    seed: int = 1234


class PasskeyDataset(BatchDataset):
    """`size` passkey examples of one length, generated on demand (never stored)."""

    def __init__(self, generator: PasskeyRetrieval, length: int, size: int):
        generator.check_length(length)
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"a passkey dataset needs a positive number of examples, got {size}")
        self.generator, self.length, self.size = generator, length, size

    def __len__(self) -> int:
        return self.size

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        batch = self.generator.batch(self.length, indices)
        return {"inputs": batch.inputs, "targets": batch.targets, "digits": self.generator.digits}


def _answer_logits(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits [B, D, V] float32 at the answer positions, their targets [B, D]).

    The D scored positions are always the last D + 1 ... 2 of the sequence (see passkey.py),
    so they are sliced rather than masked: no host sync, no gather.
    """
    logits, _ = model(batch["inputs"])
    digits = batch["digits"]
    return logits[:, -digits - 1 : -1].float(), batch["targets"][:, -digits - 1 : -1]


@register_task("lm_passkey")
class PasskeyTask(Task):
    # the `lm` task's model section (preset or dimensions, mixer, mixer_options, ...)
    metrics = ("loss", "accuracy", "digit_accuracy")
    model_config = LMModelConfig
    data_config = PasskeyDataConfig
    supports_streams = True

    def build_model(self, cfg):
        return build_lm(cfg.model, VOCAB_SIZE)

    def build_datasets(self, cfg):
        d = cfg.data
        train = PasskeyDataset(PasskeyRetrieval(d.digits, d.seed), d.train_length, d.num_train)
        val = PasskeyDataset(PasskeyRetrieval(d.digits, d.seed + 1), d.train_length, d.num_val)
        return train, val

    def loss(self, model, batch):
        logits, targets = _answer_logits(model, batch)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), {}

    def evaluate_batch(self, model, batch):
        logits, targets = _answer_logits(model, batch)
        n, digits = targets.shape
        loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
        right = logits.argmax(dim=-1) == targets
        return {
            "loss": (float(loss_sum.detach()), float(n * digits)),
            "accuracy": (float(right.all(dim=1).sum()), float(n)),
            "digit_accuracy": (float(right.sum()), float(n * digits)),
        }

    def count_tokens(self, batch):
        return batch["inputs"].numel()

    def default_segment_length(self, cfg):
        return cfg.data.train_length

    def stream_batch(self, dataset, indices, length):
        # a passkey example of the stream's length, scored on its answer digits
        batch = dataset.generator.batch(length, indices)
        return {"inputs": batch.inputs, "targets": batch.targets}

    def segment_loss(self, model, segment, state):
        return segment_nats(model, segment, state)
