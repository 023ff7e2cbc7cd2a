"""The `associative_recall` task: multi-query associative recall with a long gap.

Model: token embedding -> `titans_seq.Backbone` (any registered mixer) -> linear head
(`titans_seq.synthetic.TokenModel`). Data: a fixed training set and a fixed validation set drawn
from `titans_seq.synthetic.AssociativeRecall` with their own seeds (so every process, every trial
and every resumed run sees the same examples). Metrics: cross-entropy on the asked positions
(`loss`) and recall accuracy (`accuracy`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ...mixers.options import check_layer_options
from .base import BatchDataset, Task
from .registry import register_task


@dataclasses.dataclass
class RecallModelConfig:
    dim: int = 64
    depth: int = 2
    heads: int = 4
    # a registered mixer name, a pattern such as "lmm*3,attention", or one name per layer;
    # checked when the model is built, so recipes validate before every mixer is registered
    mixer: str | list[str] = "lmm"
    # options for every layer's mixer, or keyed by mixer name ({"swa": {"window": 64}})
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    mlp_ratio: float = 4.0

    def __post_init__(self) -> None:
        # typos and wrong types fail when the recipe is loaded (--print-config), not at build
        check_layer_options(self.mixer, self.mixer_options, "model.mixer_options")


@dataclasses.dataclass
class RecallDataConfig:
    vocab_size: int = 64
    num_pairs: int = 8
    gap: int = 256
    num_queries: int | None = None
    num_filler_tokens: int = 8
    num_train: int = 20000
    num_val: int = 1024
    # the data seed is independent of train.seed, so seeds vary the run, not the data
    seed: int = 1234


class RecallDataset(BatchDataset):
    """Pre-sampled sequences, stored compactly (int16 when the vocabulary allows it)."""

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        small = inputs.max() < 2**15 and inputs.min() >= -(2**15)
        dtype = torch.int16 if small else torch.int32
        self.inputs, self.targets = inputs.to(dtype), targets.to(dtype)

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def get_batch(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        index = torch.as_tensor(list(indices), dtype=torch.long)
        return {"inputs": self.inputs[index].long(), "targets": self.targets[index].long()}


@register_task("associative_recall")
class AssociativeRecallTask(Task):
    metrics = ("loss", "accuracy")
    model_config = RecallModelConfig
    data_config = RecallDataConfig

    def _generator(self, cfg):
        from titans_seq.synthetic.associative_recall import AssociativeRecall

        d = cfg.data
        return AssociativeRecall(
            vocab_size=d.vocab_size,
            num_pairs=d.num_pairs,
            gap=d.gap,
            num_queries=d.num_queries,
            num_filler_tokens=d.num_filler_tokens,
        )

    def build_model(self, cfg):
        from titans_seq.synthetic.token_model import TokenModel

        m = cfg.model
        return TokenModel(
            cfg.data.vocab_size,
            dim=m.dim,
            depth=m.depth,
            mixer=m.mixer,
            mixer_options=m.mixer_options or None,
            heads=m.heads,
            mlp_ratio=m.mlp_ratio,
        )

    def build_datasets(self, cfg):
        sampler = self._generator(cfg)
        train = sampler.sample(cfg.data.num_train, seed=cfg.data.seed)
        val = sampler.sample(cfg.data.num_val, seed=cfg.data.seed + 1)
        return RecallDataset(*train), RecallDataset(*val)

    def loss(self, model, batch):
        from titans_seq.synthetic.associative_recall import IGNORE_INDEX

        logits, _ = model(batch["inputs"])
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), batch["targets"].flatten(), ignore_index=IGNORE_INDEX
        )
        return loss, {}

    def evaluate_batch(self, model, batch):
        from titans_seq.synthetic.associative_recall import IGNORE_INDEX

        logits, _ = model(batch["inputs"])
        targets = batch["targets"]
        asked = targets != IGNORE_INDEX
        n = float(asked.sum())
        loss_sum = F.cross_entropy(
            logits.flatten(0, 1).float(),
            targets.flatten(),
            ignore_index=IGNORE_INDEX,
            reduction="sum",
        )
        correct = ((logits.argmax(-1) == targets) & asked).sum()
        return {"loss": (float(loss_sum), n), "accuracy": (float(correct), n)}

    def count_tokens(self, batch):
        return batch["inputs"].numel()
