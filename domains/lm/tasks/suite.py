"""The `lm_suite` task: train a byte-level `TitansLM` on a mixture of the long-context suite's
tasks (`evals/suite_examples.py`) at one length.

Every example is exactly `data.train_length` bytes: a suite prompt of train_length minus the
answer's length, then the answer. Example i of the training set draws its task from
`data.tasks` (uniformly, seeded by i) and is made on the fly from (seed, task, length, i);
validation uses `data.seed + 1`. The bAbI tasks (`babilong_qa*`) train on their "train"
split and validate on "valid"; scoring (`titans-seq long-context`) reads "test". Loss:
cross-entropy on the answer bytes only. Metrics: `loss` (per answer byte), `accuracy`
(examples whose answer bytes are all argmax-right under teacher forcing, which is what
greedy decoding then produces) and `byte_accuracy`.

With a `streams:` section, each example is `segments x segment_length` bytes (null
segment_length: `data.train_length`), read segment by segment with the state carried.

Evaluate a trained run over lengths and depths with `titans-seq long-context --model RUN`.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from titans_seq.training.tasks.base import BatchDataset, Task
from titans_seq.training.tasks.registry import register_task

from ..evals.needles import IGNORE_INDEX, VOCAB_SIZE
from ..evals.suite_examples import check_split, check_tasks, suite_example
from .lm import LMModelConfig, build_lm
from .streaming import segment_nats


@dataclasses.dataclass
class SuiteDataConfig:
    # training sequence length in bytes, prompt + answer
    train_length: int = 1024
    # the suite tasks mixed in training (uniformly)
    tasks: list[str] = dataclasses.field(
        default_factory=lambda: ["niah_passkey", "niah_number", "niah_multikey", "babi_qa1"]
    )
    # "noise" or a text source for the haystacks (evaluate on another one to test transfer)
    haystack: str = "noise"
    num_train: int = 1_000_000
    num_val: int = 256
    seed: int = 1234

    def __post_init__(self) -> None:
        check_tasks(self.tasks, self.haystack, "data.tasks")


class SuiteDataset(BatchDataset):
    """`size` suite examples of one total length, generated on demand (never stored); the
    bAbI tasks draw their questions from `split`.

    `get_batch` -> {"inputs": [B, L] int64, "targets": [B, L] (IGNORE_INDEX but at the
    positions that predict an answer byte)}."""

    def __init__(self, data: SuiteDataConfig, seed: int, size: int, split: str = "train"):
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"a suite dataset needs a positive number of examples, got {size}")
        self.data, self.seed, self.size, self.split = data, seed, size, check_split(split)

    def __len__(self) -> int:
        return self.size

    def example(self, index: int, length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens [L], targets [L]) of example `index` at `length` (None: train_length)."""
        d = self.data
        task = random.Random(f"titans-seq suite task:{self.seed}:{index}").choice(d.tasks)
        length = d.train_length if length is None else length
        e = suite_example(task, length, index, None, self.seed, d.haystack, self.split)
        tokens = torch.tensor(list(e.prompt + e.answer.encode()), dtype=torch.long)
        targets = torch.full_like(tokens, IGNORE_INDEX)
        start = len(e.prompt)
        targets[start - 1 : -1] = tokens[start:]
        return tokens, targets

    def get_batch(
        self, indices: Sequence[int], length: int | None = None
    ) -> dict[str, torch.Tensor]:
        pairs = [self.example(int(i), length) for i in indices]
        return {
            "inputs": torch.stack([p[0] for p in pairs]),
            "targets": torch.stack([p[1] for p in pairs]),
        }


def _answer_scores(model, batch):
    logits, _ = model(batch["inputs"])
    targets = batch["targets"]
    scored = targets != IGNORE_INDEX
    return logits.float(), targets, scored


@register_task("lm_suite")
class SuiteTask(Task):
    metrics = ("loss", "accuracy", "byte_accuracy")
    model_config = LMModelConfig
    data_config = SuiteDataConfig
    supports_streams = True

    def build_model(self, cfg):
        return build_lm(cfg.model, VOCAB_SIZE)

    def build_datasets(self, cfg):
        d = cfg.data
        return (
            SuiteDataset(d, d.seed, d.num_train, "train"),
            SuiteDataset(d, d.seed + 1, d.num_val, "valid"),
        )

    def loss(self, model, batch):
        logits, targets, _ = _answer_scores(model, batch)
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten()), {}

    def evaluate_batch(self, model, batch):
        logits, targets, scored = _answer_scores(model, batch)
        loss_sum = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")
        right = (logits.argmax(dim=-1) == targets) | ~scored
        n, answer_bytes = targets.shape[0], int(scored.sum())
        return {
            "loss": (float(loss_sum.detach()), float(answer_bytes)),
            "accuracy": (float(right.all(dim=1).sum()), float(n)),
            "byte_accuracy": (float((right & scored).sum()), float(answer_bytes)),
        }

    def count_tokens(self, batch):
        return batch["inputs"].numel()

    def default_segment_length(self, cfg):
        return cfg.data.train_length

    def stream_batch(self, dataset, indices, length):
        # suite examples of the stream's length: the facts spread over all its segments
        return dataset.get_batch(indices, length)

    def segment_loss(self, model, segment, state):
        return segment_nats(model, segment, state)
