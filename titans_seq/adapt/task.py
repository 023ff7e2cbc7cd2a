"""Adaptation through the shared training loop: a task that wraps a domain's task, builds
the trained base model and adapts it (SVF, LoRA or full fine-tuning) before training.

Checkpoints, exact resume, early stopping, divergence checks and logs are the loop's; only
the trainable parameters differ. At the end an SVF run writes its expert
(`expert.safetensors`) and a LoRA run its adapter (`lora_adapter.safetensors`) beside the
run's best weights.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from torch import nn

from ..training.checkpoint import load_weights, save_weights
from ..training.tasks.base import Task
from .baselines import add_lora, full_finetuning, lora_state_dict, unfreeze
from .svf import SVF

METHODS = ("svf", "lora", "full", "frozen")
EXPERT_FILE = "expert.safetensors"
LORA_FILE = "lora_adapter.safetensors"


@dataclasses.dataclass(frozen=True)
class AdaptConfig:
    """How a trained model is adapted.

    method: "svf" (singular-value scales), "lora" (peft LoRA), "full" (every weight) or
        "frozen" (only `also_train`, e.g. a linear probe of a new head).
    targets: patterns over target matrices (None: every linear layer of the mixers and MLPs,
        and for SVF the memory's W_0); also_train: patterns over parameters trained in full
        beside (a new head). lora_rank / lora_alpha: LoRA's r and α.
    """

    method: str = "svf"
    targets: tuple[str, ...] | None = None
    also_train: tuple[str, ...] = ()
    lora_rank: int = 8
    lora_alpha: float = 16.0
    task_name: str = ""  # written into the expert file

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.lora_rank < 1:
            raise ValueError(f"lora_rank must be >= 1, got {self.lora_rank}")


def adapt_model(model: nn.Module, config: AdaptConfig, base_name: str = "") -> SVF | nn.Module:
    """Adapt `model` in place as `config` says; returns the SVF (method "svf") or the model."""
    targets = None if config.targets is None else list(config.targets)
    if config.method == "svf":
        return SVF(model, targets, list(config.also_train), base_name=base_name)
    if config.method == "lora":
        return add_lora(
            model, targets, config.lora_rank, config.lora_alpha, also_train=config.also_train
        )
    if config.method == "frozen":
        if not config.also_train:
            raise ValueError('method "frozen" trains only `also_train`, which is empty')
        model.requires_grad_(False)
    else:
        full_finetuning(model)
    unfreeze(model, config.also_train)
    return model


class AdaptationTask(Task):
    """`task` with its model replaced by the adapted base model.

    base(cfg) -> the trained base model (weights loaded), built for the run's config.
    """

    def __init__(
        self,
        task: Task,
        base: Callable[[object], nn.Module],
        config: AdaptConfig,
        base_name: str = "",
    ):
        self.task, self.base, self.config, self.base_name = task, base, config, base_name
        self.name = task.name
        self.model_config, self.data_config = task.model_config, task.data_config
        self.svf: SVF | None = None
        self.model: nn.Module | None = None

    def build_model(self, cfg) -> nn.Module:
        model = self.base(cfg)
        adapted = adapt_model(model, self.config, self.base_name)
        self.svf = adapted if isinstance(adapted, SVF) else None
        self.model = model
        return model

    def build_datasets(self, cfg):
        return self.task.build_datasets(cfg)

    def loss(self, model, batch):
        return self.task.loss(model, batch)

    def evaluate_batch(self, model, batch):
        return self.task.evaluate_batch(model, batch)

    def finalize_metrics(self, metrics):
        return self.task.finalize_metrics(metrics)

    def count_tokens(self, batch):
        return self.task.count_tokens(batch)

    def on_train_end(self, cfg, run_dir: Path) -> None:
        """Export the adaptation of the best weights: the SVF expert or the LoRA adapter."""
        from ..training.loop import BEST_WEIGHTS

        best = Path(run_dir) / BEST_WEIGHTS
        if self.model is None or not best.is_file():
            return
        self.model.load_state_dict(load_weights(best))
        if self.svf is not None:
            self.svf.save_expert(Path(run_dir) / EXPERT_FILE, task=self.config.task_name)
        elif self.config.method == "lora":
            save_weights(Path(run_dir) / LORA_FILE, lora_state_dict(self.model))
