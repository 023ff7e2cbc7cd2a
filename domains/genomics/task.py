"""The DNA classification task for the shared training loop (in-memory tokenized batches)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from titans_seq.training.tasks import BatchDataset, Task, register_task

from .model import DNAClassifierNet
from .tokenizer import reverse_complement_ids


@dataclasses.dataclass
class DNAModelConfig:
    dim: int = 64
    depth: int = 2
    heads: int = 4
    mixer: str = "lmm"
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    bidirectional: bool = True
    # "conjoin": strand-invariant predictions; "augment": random strand flips in training
    rc_mode: str = "conjoin"
    dropout: float = 0.1
    num_classes: int = 2


@dataclasses.dataclass
class DNADataConfig:
    max_len: int = 1024


class TokenBatches(BatchDataset):
    """Right-padded ids [N, T], lengths [N], labels [N]; batches are cut to their longest."""

    def __init__(self, ids: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor):
        self.ids, self.lengths, self.labels = ids, lengths, labels

    def __len__(self) -> int:
        return self.ids.shape[0]

    def get_batch(self, indices):
        index = torch.as_tensor(list(indices), dtype=torch.long)
        lengths = self.lengths[index]
        # trimming the shared padding keeps short-sequence batches cheap
        return self.ids[index, : int(lengths.max())], lengths, self.labels[index]


def build_net(cfg: DNAModelConfig) -> DNAClassifierNet:
    return DNAClassifierNet(
        cfg.num_classes,
        dim=cfg.dim,
        depth=cfg.depth,
        mixer=cfg.mixer,
        heads=cfg.heads,
        mixer_options=cfg.mixer_options or None,
        bidirectional=cfg.bidirectional,
        rc_mode=cfg.rc_mode,
        dropout=cfg.dropout,
    )


@register_task("dna_classification")
class DNAClassificationTask(Task):
    """Cross-entropy on the pooled logits; metrics: loss, accuracy."""

    model_config = DNAModelConfig
    data_config = DNADataConfig

    def __init__(
        self,
        train: TokenBatches | None = None,
        val: TokenBatches | None = None,
        augment_strands: bool = False,
    ):
        self.train, self.val, self.augment_strands = train, val, augment_strands

    def build_model(self, cfg):
        return build_net(cfg.model)

    def build_datasets(self, cfg):
        if self.train is None:
            raise ValueError(
                "the dna_classification task trains on in-memory data: use "
                "titans_seq.domains.genomics.DNAClassifier"
            )
        return self.train, self.val if self.val is not None else self.train

    def loss(self, model, batch):
        ids, lengths, labels = batch
        if self.augment_strands and model.training:
            flip = torch.rand(ids.shape[0], device=ids.device) < 0.5
            ids = torch.where(flip[:, None], reverse_complement_ids(ids, lengths), ids)
        return F.cross_entropy(model(ids, lengths).float(), labels), {}

    def evaluate_batch(self, model, batch):
        ids, lengths, labels = batch
        logits = model(ids, lengths).float()
        n = float(labels.numel())
        loss = F.cross_entropy(logits, labels, reduction="sum")
        correct = (logits.argmax(-1) == labels).sum()
        return {"loss": (float(loss), n), "accuracy": (float(correct), n)}

    def count_tokens(self, batch):
        return int(batch[1].sum())
