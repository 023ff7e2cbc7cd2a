"""The `dna_pretraining` task: causal next-base prediction on unlabeled DNA, for the shared loop.

    titans-seq train genomics/pretrain_lmm                   # then, from its run folder:
    titans-seq train genomics/finetune_lmm model.pretrained=runs/genomics_pretrain_lmm

Data (`data:`): a FASTA/FASTQ file (`fasta:`, labels ignored) or the sequences of a
registered benchmark's training part (`dataset:`, `split:`, `resplit:`, `seed:` as in the
classification recipes, so pretraining never sees the validation or test sequences of the
fine-tuning run). Examples are fixed-length windows of `seq_len` bases (random crops in
training, consecutive windows in validation; see `CropBatches`). Metrics: loss (nats per
base), bits_per_base, accuracy of the next base; padding is never counted.

The run folder is a pretrained folder: this task writes `dna_pretrained.json` there when
it builds the model, and the loop writes the best validation weights to
`best_model.safetensors` (what `model.pretrained` loads).
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from titans_seq.mixers.options import check_layer_options
from titans_seq.training.config import ConfigError
from titans_seq.training.tasks import Task, register_task

from .pretraining import (
    CropBatches,
    DNALanguageModel,
    next_base_loss,
    read_pretrained,
    save_pretrained,
    write_pretrained_config,
)
from .recipe_data import BenchmarkSourceConfig, benchmark_parts
from .tokenizer import PAD_ID

BEST_WEIGHTS = "best_model.safetensors"  # the training loop's best-validation weights


@dataclasses.dataclass
class DNAPretrainModelConfig:
    dim: int = 64
    depth: int = 2
    heads: int = 4
    mixer: str = "lmm"
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    dropout: float = 0.1

    def __post_init__(self) -> None:
        # typos and wrong types fail when the recipe is loaded (--print-config), not at build
        check_layer_options(self.mixer, self.mixer_options, "model.mixer_options")


@dataclasses.dataclass
class DNAPretrainDataConfig(BenchmarkSourceConfig):
    # window length: examples are seq_len-base crops (shorter sequences are padded)
    seq_len: int = 512
    # unlabeled sequences from a FASTA/FASTQ file (plain or .gz) ...
    fasta: str | None = None
    # ... held-out share for validation: whole sequences when the file has >= 20, else the
    # last `val_fraction` of every sequence
    val_fraction: float = 0.05
    # ... or the training part of a registered benchmark (labels ignored): the inherited
    # keys dataset, split, resplit, seed, max_train, max_val, strict


def build_lm(cfg: DNAPretrainModelConfig) -> DNALanguageModel:
    return DNALanguageModel(
        dim=cfg.dim,
        depth=cfg.depth,
        mixer=cfg.mixer,
        heads=cfg.heads,
        mixer_options=cfg.mixer_options or None,
        dropout=cfg.dropout,
    )


def fasta_train_val(
    sequences: list[str], val_fraction: float, seed: int
) -> tuple[list[str], list[str]]:
    """Split unlabeled sequences for pretraining (see DNAPretrainDataConfig.val_fraction)."""
    if not 0 < val_fraction < 1:
        raise ConfigError(f"data.val_fraction must be in (0, 1), got {val_fraction}")
    if len(sequences) >= 20:
        order = np.random.default_rng(seed).permutation(len(sequences))
        n_val = max(1, round(val_fraction * len(sequences)))
        val = set(order[:n_val].tolist())
        return (
            [s for i, s in enumerate(sequences) if i not in val],
            [s for i, s in enumerate(sequences) if i in val],
        )
    cuts = [len(s) - max(2, round(val_fraction * len(s))) for s in sequences]
    return (
        [s[:c] for s, c in zip(sequences, cuts) if c >= 2],
        [s[c:] for s, c in zip(sequences, cuts)],
    )


def pretraining_sequences(data: DNAPretrainDataConfig) -> tuple[list[str], list[str]]:
    """(train, validation) unlabeled sequences named by a recipe's data section."""
    if (data.fasta is None) == (data.dataset is None):
        raise ConfigError(
            "data: give exactly one source of unlabeled DNA, `fasta:` (a FASTA/FASTQ path) or "
            "`dataset:` (a registered GenomicsBenchmarks name)"
        )
    if data.fasta is not None:
        from titans_seq.data.sequences import load_fasta

        name = Path(data.fasta).name.lower()
        fmt = "fastq" if ".fq" in name or ".fastq" in name else None
        sequences = load_fasta(data.fasta, label_key=None, format=fmt).sequences
        train, val = fasta_train_val(list(sequences), data.val_fraction, data.seed)
    else:
        parts = benchmark_parts(data.dataset, data.split, data.resplit, data.seed)
        train, val = parts["train"].sequences, parts["val"].sequences
    seed = data.seed
    return sample(list(train), data.max_train, seed), sample(list(val), data.max_val, seed)


def sample(sequences: list[str], limit: int | None, seed: int) -> list[str]:
    """At most `limit` of the sequences, drawn with a seeded RNG (order kept)."""
    if limit is None or limit >= len(sequences):
        return sequences
    if limit <= 0:
        raise ConfigError(f"a subsample size must be positive, got {limit}")
    keep = np.sort(np.random.default_rng(seed).choice(len(sequences), size=limit, replace=False))
    return [sequences[i] for i in keep]


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


@register_task("dna_pretraining")
class DNAPretrainingTask(Task):
    """Next-base cross-entropy of a causal embedding -> Backbone -> linear model."""

    metrics = ("loss", "bits_per_base", "accuracy")
    model_config = DNAPretrainModelConfig
    data_config = DNAPretrainDataConfig

    def __init__(self, sequences: tuple[list[str], list[str]] | None = None):
        # in-memory (train, validation) sequences, used by `pretrain`; recipes leave it None
        self.sequences = sequences

    def build_model(self, cfg):
        if is_main_process():  # the run folder becomes a pretrained folder
            write_pretrained_config(
                cfg.run_dir(), cfg.model, BEST_WEIGHTS, {"seq_len": cfg.data.seq_len}
            )
        return build_lm(cfg.model)

    def build_datasets(self, cfg):
        train, val = self.sequences or pretraining_sequences(cfg.data)
        seq_len, strict = cfg.data.seq_len, cfg.data.strict
        return (
            CropBatches.from_strings(list(train), seq_len, random_crop=True, strict=strict),
            CropBatches.from_strings(list(val), seq_len, random_crop=False, strict=strict),
        )

    def loss(self, model, batch):
        ids, _ = batch
        loss, _ = next_base_loss(model(ids), ids)
        return loss, {}

    def evaluate_batch(self, model, batch):
        ids, _ = batch
        logits = model(ids)
        loss, count = next_base_loss(logits, ids, reduction="sum")
        valid = ids[:, 1:] != PAD_ID
        correct = ((logits[:, :-1].argmax(-1) == ids[:, 1:]) & valid).sum()
        n = float(count)
        return {
            "loss": (float(loss), n),
            "bits_per_base": (float(loss) / math.log(2), n),
            "accuracy": (float(correct), n),
        }

    def count_tokens(self, batch):
        return int(batch[1].sum())


def pretrain(
    sequences: list[str],
    out_dir: str | Path,
    *,
    validation: list[str] | None = None,
    model: dict[str, Any] | None = None,
    seq_len: int = 512,
    max_steps: int = 1000,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    eval_every: int | None = None,
    seed: int = 0,
    device: str = "auto",
    verbose: bool = False,
) -> Path:
    """Pretrain a backbone on unlabeled `sequences` with the shared loop; returns `out_dir`,
    a pretrained folder for `DNAClassifier(pretrained=...)` or `model.pretrained` (the best
    validation weights; an existing pretrained folder there is overwritten).

    validation: held-out sequences (default: `fasta_train_val`'s 5% split of `sequences`).
    model: DNAPretrainModelConfig keys (dim, depth, heads, mixer, mixer_options, dropout).
    """
    from titans_seq.training.config import from_dict
    from titans_seq.training.loop import train

    sequences = list(sequences)
    if validation is None:
        sequences, validation = fasta_train_val(sequences, 0.05, seed)
    out_dir = Path(out_dir)
    eval_every = eval_every or max(1, max_steps // 5)
    # the loop's checkpoints (optimizer state etc.) are not needed afterwards: they go to a
    # temporary folder, and only the pretrained folder's two files are kept
    with tempfile.TemporaryDirectory(prefix="titans_dna_pretrain_") as run_dir:
        cfg = from_dict(
            {
                "task": "dna_pretraining",
                "name": "dna_pretraining",
                "model": dict(model or {}),
                "data": {"seq_len": seq_len, "seed": seed},
                "optim": {"lr": learning_rate, "warmup_steps": min(100, max_steps // 10)},
                "train": {
                    "max_steps": max_steps,
                    "batch_size": batch_size,
                    "seed": seed,
                    "device": device,
                    "out_dir": run_dir,
                    "progress": verbose,
                    "tensorboard": False,
                    "plot": False,
                    "checkpoint_every": max_steps,
                    "keep_checkpoints": 1,
                    "log_every": max(1, eval_every // 2),
                },
                "eval": {"every": eval_every, "metric": "loss", "mode": "min"},
            }
        )
        train(cfg, task=DNAPretrainingTask((sequences, validation)))
        _, weights = read_pretrained(run_dir)
        net = build_lm(cfg.model)
        net.load_state_dict(weights)
        save_pretrained(out_dir, net, cfg.model)
    return out_dir
