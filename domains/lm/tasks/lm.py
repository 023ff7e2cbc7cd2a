"""The `lm` task: causal language modeling with `TitansLM` on text or prepared token shards.

Model (`model:`): a size `preset` and/or explicit `dim`, `depth`, `heads`, `mlp_ratio`,
`tie_embeddings` (set values override the preset; unset ones take the preset's, else
`TitansLM`'s defaults), any `mixer` (pattern) and `mixer_options`. The vocabulary size comes
from the tokenizer.

Data (`data:`): `train` is a registered corpus, a text file / folder / glob, or a folder
written by `titans-seq prepare-text` (memory-mapped; it carries its own tokenizer); `val` an
optional separate validation source; without one, a prepared folder's "val" split, else the
last `val_fraction` of the training corpus (no overlap). Training draws seeded random
`[seq_len + 1]` crops; validation scores consecutive non-overlapping windows. With a
`streams:` section, training instead reads each document as streams of consecutive
segments with the state carried (`RandomStreams` or `DocumentSpans`,
`titans_seq.training.streams`).

Metrics: `loss` (mean nats per predicted token), `bpb` (bits per UTF-8 byte: total nats /
ln 2 / bytes of the scored text; exact for byte-level tokens, through the split's bytes per
token otherwise), `ppl` (exp of the mean loss). Throughput: tokens/s and, with a known peak,
model-FLOPs utilization from `TitansLM.flops_per_token(seq_len)`.

When the run ends, the best model (by `eval.metric`) is written with its tokenizer to
`<run>/model/`, loadable with `TitansLM.load(<run>/model)` / `load_lm_and_tokenizer`.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

from titans_seq.checks import check_choice, check_int, check_number
from titans_seq.mixers.options import check_layer_options
from titans_seq.training.streams import max_segments
from titans_seq.training.tasks.base import Task
from titans_seq.training.tasks.registry import register_task

from ..presets import PRESETS
from .streaming import segment_nats

EXPORT_DIR = "model"
LN2 = math.log(2.0)


@dataclasses.dataclass
class LMModelConfig:
    # a size preset of `titans_seq.domains.lm.presets.PRESETS` ("tiny", "20m", "125m",
    # "340m"); the dimensions below override it when set
    preset: str | None = None
    dim: int | None = None
    depth: int | None = None
    heads: int | None = None
    # a registered mixer name, a pattern such as "lmm*3,attention", or one name per layer
    mixer: str | list[str] = "lmm"
    # options for every layer's mixer, or keyed by mixer name ({"swa": {"window": 64}})
    mixer_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    mlp_ratio: float | None = None
    tie_embeddings: bool | None = None

    def __post_init__(self) -> None:
        # typos, wrong types and impossible sizes fail when the recipe is loaded
        # (--print-config), not at build
        if self.preset is not None:
            check_choice("preset", self.preset, tuple(PRESETS))
        for name in ("dim", "depth", "heads"):
            if getattr(self, name) is not None:
                check_int(name, getattr(self, name), 1)
        if self.mlp_ratio is not None:
            check_number("mlp_ratio", self.mlp_ratio, low=0.0)
        check_layer_options(self.mixer, self.mixer_options, "model.mixer_options")


@dataclasses.dataclass
class LMDataConfig:
    # registered corpus, text file/folder/glob, or a `titans-seq prepare-text` folder
    train: str = "tinyshakespeare"
    # a separate validation source (same kinds); null: see val_fraction
    val: str | None = None
    # without `val` (and without a prepared "val" split): the END of the training corpus
    val_fraction: float = 0.1
    # "byte", a tokenizer.json, a SentencePiece .model or a saved tokenizer folder; a
    # prepared folder uses the tokenizer it was prepared with
    tokenizer: str = "byte"
    # tokens per training window (the model sees seq_len inputs, predicts seq_len targets)
    seq_len: int = 256
    # seeds the crop offsets (independent of train.seed, which orders them)
    seed: int = 1234
    # a window holding the end of one document and the start of the next runs each as if
    # alone: the model's state (memory, caches) restarts at every document boundary
    pack_documents: bool = True
    # where training streams start (a recipe with `streams:`): "random" anywhere in a
    # document, as training crops do; "aligned" at its start and every stream length after
    # it, so that an epoch predicts every token once
    stream_starts: Literal["random", "aligned"] = "random"

    def __post_init__(self) -> None:
        check_int("seq_len", self.seq_len, 1)
        check_number("val_fraction", self.val_fraction, low=0.0, high=1.0)


def resolve_tokenizer(data: LMDataConfig):
    """The tokenizer of the run: the prepared folder's own, else `data.tokenizer`."""
    from ..data import is_prepared_dir, load_prepared
    from ..tokenizers import load_tokenizer

    if is_prepared_dir(data.train):
        meta, _ = load_prepared(data.train)
        spec = meta["tokenizer"]
        prepared = spec if spec == "byte" else str(Path(data.train) / spec)
        if data.tokenizer not in ("byte", prepared, spec):
            raise ValueError(
                f"data.tokenizer={data.tokenizer!r} conflicts with the prepared folder "
                f"{data.train}, which was tokenized with {spec!r}"
            )
        return load_tokenizer(prepared)
    return load_tokenizer(data.tokenizer)


def build_lm(m: LMModelConfig, vocab_size: int):
    """A `TitansLM` from the model section of a recipe."""
    from ..model import TitansLM

    dims = {
        key: getattr(m, key)
        for key in ("dim", "depth", "heads", "mlp_ratio", "tie_embeddings")
        if getattr(m, key) is not None
    }
    options = dict(m.mixer_options) or None
    if m.preset is not None:
        return TitansLM.from_preset(
            m.preset, mixer=m.mixer, vocab_size=vocab_size, mixer_options=options, **dims
        )
    return TitansLM(vocab_size, mixer=m.mixer, mixer_options=options, **dims)


def _check_data(d: LMDataConfig) -> None:
    if isinstance(d.seq_len, bool) or d.seq_len <= 0:
        raise ValueError(f"data.seq_len must be a positive integer, got {d.seq_len}")
    if not 0.0 < d.val_fraction < 1.0:
        raise ValueError(f"data.val_fraction must be in (0, 1), got {d.val_fraction}")


@register_task("lm")
class LMTask(Task):
    metrics = ("loss", "bpb", "ppl")
    model_config = LMModelConfig
    data_config = LMDataConfig
    supports_streams = True

    def build_model(self, cfg):
        return build_lm(cfg.model, resolve_tokenizer(cfg.data).vocab_size)

    def run_tokenizer(self, cfg):
        """The tokenizer a run of this task trains with (read back with its model)."""
        return resolve_tokenizer(cfg.data)

    def build_datasets(self, cfg):
        from ..data import (
            DocumentSpans,
            RandomCrops,
            RandomStreams,
            SequentialWindows,
            load_splits,
        )

        d = cfg.data
        _check_data(d)
        tokenizer = resolve_tokenizer(d)
        train, val = load_splits(d.train, d.val, d.val_fraction, tokenizer)
        pack = d.pack_documents
        val_windows = SequentialWindows(val, d.seq_len, documents=pack)
        if cfg.streams.enabled:
            # streams as long as the longest the run reads, never crossing a document
            span = self.segment_length(cfg) * max_segments(cfg.streams)
            if d.stream_starts == "aligned":
                return DocumentSpans(train, span, documents=pack), val_windows
            return RandomStreams(train, span, seed=d.seed, documents=pack), val_windows
        return RandomCrops(train, d.seq_len, seed=d.seed, documents=pack), val_windows

    def default_segment_length(self, cfg):
        return cfg.data.seq_len

    def stream_batch(self, dataset, indices, length):
        return dataset.stream_batch(indices, length)

    def segment_loss(self, model, segment, state):
        return segment_nats(model, segment, state)

    def _nats(self, model, batch: dict, reduction: str) -> torch.Tensor:
        """Cross-entropy of tokens[:, 1:] given tokens[:, :-1]; tokens [B, T + 1]."""
        tokens = batch["tokens"]
        logits = window_logits(model, tokens[:, :-1], batch.get("doc_starts"))
        return F.cross_entropy(
            logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction=reduction
        )

    def loss(self, model, batch):
        return self._nats(model, batch, "mean"), {}

    def evaluate_batch(self, model, batch):
        nats = float(self._nats(model, batch, "sum"))
        predicted = float(batch["tokens"][:, 1:].numel())
        return {
            "loss": (nats, predicted),
            "bpb": (nats / LN2, float(batch["bytes"].sum())),
        }

    def finalize_metrics(self, metrics):
        if "loss" in metrics:
            # exp of a huge early loss overflows to inf, which is what it is
            metrics["ppl"] = math.exp(min(metrics["loss"], 700.0))
        return metrics

    def count_tokens(self, batch):
        # predicted tokens: the inputs of a [B, seq_len + 1] window
        return batch["tokens"][:, 1:].numel()

    def flops_per_token(self, model, cfg):
        return float(model.flops_per_token(cfg.data.seq_len))

    def on_train_end(self, cfg, run_dir):
        export_best_model(cfg, run_dir)


def window_logits(model, inputs: torch.Tensor, doc_starts: torch.Tensor | None) -> torch.Tensor:
    """Logits [B, T, V] of input windows [B, T]; where `doc_starts` [B, T] marks documents
    starting inside a window, the windows go through the model packed into one row with
    their document boundaries (`cu_seqlens`), so no state crosses from one to the next."""
    if doc_starts is None or not bool(doc_starts.any()):
        return model(inputs)[0]
    from titans_seq.packing import cu_seqlens_from_starts

    B, T = inputs.shape
    positions = torch.nonzero(doc_starts.flatten(), as_tuple=True)[0].cpu()
    cu_seqlens = cu_seqlens_from_starts(positions, T, rows=B).to(inputs.device)
    logits, _ = model(inputs.reshape(1, B * T), cu_seqlens=cu_seqlens)
    return logits.view(B, T, -1)


def export_best_model(cfg, run_dir: str | Path) -> Path | None:
    """Write the run's best weights (`best_model.safetensors`) as a saved `TitansLM` with
    its tokenizer into `<run_dir>/model/`; returns that folder (None without an evaluation)."""
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS

    run_dir = Path(run_dir)
    best = run_dir / BEST_WEIGHTS
    if not best.is_file():
        return None
    tokenizer = resolve_tokenizer(cfg.data)
    model = build_lm(cfg.model, tokenizer.vocab_size)
    model.load_state_dict(load_weights(best))
    return model.save(run_dir / EXPORT_DIR, tokenizer=tokenizer)
