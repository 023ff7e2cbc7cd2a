"""The DNA classification task for the shared training loop.

Two data paths: the `DNAClassifier` estimator hands the task its in-memory tokenized
batches; a recipe (`titans-seq train genomics/...`) names a registered benchmark in its
`data:` section (see `recipe_data.py`). `model.architecture` picks the network: "backbone"
(embedding -> Backbone with any mixer; `mixer: attention` is the Transformer baseline) or
"cnn" (the GenomicsBenchmarks CNN, `baselines.py`); `model.pretrained` starts the backbone
from a `dna_pretraining` run (embedding + backbone weights; the classifier head is fresh).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.nn.functional as F

from titans_seq.checks import check_choice, check_int, check_number
from titans_seq.errors import ConfigError
from titans_seq.mixers.options import check_layer_options
from titans_seq.training.tasks import BatchDataset, Task, register_task

from .baselines import GenomicsCNN
from .model import FLIPPING_MODES, RC_MODES, DNAClassifierNet
from .pretraining import load_pretrained_backbone
from .recipe_data import BenchmarkSourceConfig, benchmark_parts, subsample
from .tokenizer import DNATokenizer, reverse_complement_ids

ARCHITECTURES = ("backbone", "cnn")
MAX_KMER_SIZE = 8


@dataclasses.dataclass
class DNAModelConfig:
    dim: int = 64
    depth: int = 2
    heads: int = 4
    mixer: str = "lmm"
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    bidirectional: bool = True
    # "conjoin": strand-invariant predictions; "augment": random strand flips in training;
    # "posthoc": flips in training, both strands averaged outside it
    rc_mode: str = "conjoin"
    dropout: float = 0.1
    # width of the convolution between the embedding and the backbone (0: none)
    stem_width: int = 0
    # bases per position the backbone reads: the stem's patch (1: every base)
    stem_stride: int = 1
    # k of the k-mer profile read out beside the backbone (0: none)
    kmer_size: int = 0
    num_classes: int = 2
    # "backbone": embedding -> Backbone(mixer) -> pooled linear; "cnn": GenomicsBenchmarks CNN
    architecture: str = "backbone"
    # options of the CNN (GenomicsCNN keyword arguments: embedding_dim, channels, ...)
    cnn_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    # a dna_pretraining run folder (or save_pretrained folder): start embedding + backbone
    # from its weights; the architecture must match (dim, depth, heads, mixer, options)
    pretrained: str | None = None

    def __post_init__(self) -> None:
        # typos, wrong types and impossible sizes fail when the recipe is loaded
        # (--print-config) or the estimator is fitted, not deep inside the model
        check_choice("architecture", self.architecture, ARCHITECTURES)
        check_choice("rc_mode", self.rc_mode, RC_MODES)
        for name in ("dim", "depth", "heads"):
            check_int(name, getattr(self, name), 1)
            setattr(self, name, int(getattr(self, name)))  # NumPy integers as Python ints
        check_int("num_classes", self.num_classes, 2)
        check_number("dropout", self.dropout, low=0.0, high=1.0)
        check_int("stem_width", self.stem_width, 0)
        self.stem_width = int(self.stem_width)
        if self.stem_width % 2 == 0 and self.stem_width:
            raise ConfigError(
                f"stem_width must be odd (centred on each base) or 0, got {self.stem_width}"
            )
        check_int("stem_stride", self.stem_stride, 1)
        self.stem_stride = int(self.stem_stride)
        if self.stem_stride > max(self.stem_width, 1):
            raise ConfigError(
                f"stem_stride must be at most stem_width ({self.stem_width}) so that every "
                f"base is read (a stride above 1 needs a stem), got {self.stem_stride}"
            )
        check_int("kmer_size", self.kmer_size, 0)
        self.kmer_size = int(self.kmer_size)
        if self.kmer_size > MAX_KMER_SIZE:
            raise ConfigError(
                f"kmer_size must be at most {MAX_KMER_SIZE} (4**k weights a class), "
                f"got {self.kmer_size}"
            )
        check_layer_options(self.mixer, self.mixer_options, "model.mixer_options")


@dataclasses.dataclass
class DNADataConfig(BenchmarkSourceConfig):
    """The recipe data source (the estimator passes its data in memory instead)."""

    # longer sequences are truncated to their first max_len bases; the CNN's input length
    max_len: int = 1024

    def __post_init__(self) -> None:
        check_int("max_len", self.max_len, 1)
        self.max_len = int(self.max_len)


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

    def example_lengths(self) -> torch.Tensor:
        return self.lengths


def token_batches(data, max_len: int, strict: bool = False) -> TokenBatches:
    """TokenBatches of a labeled `SequenceDataset`, sequences cut to max_len bases."""
    ids, lengths = DNATokenizer(strict=strict).batch(data.sequences, data.names, max_len=max_len)
    return TokenBatches(ids, lengths, torch.as_tensor(data.labels, dtype=torch.long))


def build_net(cfg: DNAModelConfig, max_len: int = 1024) -> DNAClassifierNet | GenomicsCNN:
    """A freshly initialised classifier network (pretrained weights are loaded separately).

    max_len: the CNN's fixed input length (ignored by the backbone architecture).
    """
    if cfg.architecture not in ARCHITECTURES:
        raise ValueError(
            f"model.architecture must be one of {ARCHITECTURES}, got {cfg.architecture!r}"
        )
    if cfg.architecture == "cnn":
        if cfg.pretrained:
            raise ValueError("model.pretrained: the CNN baseline has no pretrained backbone")
        return GenomicsCNN(cfg.num_classes, max_len, rc_mode=cfg.rc_mode, **(cfg.cnn_options or {}))
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
        stem_width=cfg.stem_width,
        stem_stride=cfg.stem_stride,
        kmer_size=cfg.kmer_size,
    )


@register_task("dna_classification")
class DNAClassificationTask(Task):
    """Cross-entropy on the pooled logits; metrics: loss, accuracy."""

    metrics = ("loss", "accuracy")
    model_config = DNAModelConfig
    data_config = DNADataConfig

    def __init__(self, train: TokenBatches | None = None, val: TokenBatches | None = None):
        self.train, self.val = train, val

    def build_model(self, cfg):
        net = build_net(cfg.model, cfg.data.max_len)
        if cfg.model.pretrained:
            load_pretrained_backbone(net, cfg.model.pretrained, cfg.model)
        return net

    def build_datasets(self, cfg):
        if self.train is not None:  # the estimator's in-memory data
            return self.train, self.val if self.val is not None else self.train
        data = cfg.data
        parts = benchmark_parts(data.dataset, data.split, data.resplit, data.seed)
        if len(parts["train"].classes) != cfg.model.num_classes:
            raise ValueError(
                f"model.num_classes is {cfg.model.num_classes} but {data.dataset} has "
                f"{len(parts['train'].classes)} classes {parts['train'].classes}"
            )
        train = subsample(parts["train"], data.max_train, data.seed)
        val = subsample(parts["val"], data.max_val, data.seed)
        return (
            token_batches(train, data.max_len, data.strict),
            token_batches(val, data.max_len, data.strict),
        )

    def loss(self, model, batch):
        ids, lengths, labels = batch
        # the network's rc_mode (the estimator's or the recipe's) says whether to flip
        rc_mode = getattr(getattr(model, "module", model), "rc_mode", None)
        if rc_mode in FLIPPING_MODES and model.training:
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
