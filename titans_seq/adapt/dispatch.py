"""Two-pass inference: a first pass decides which expert an input needs, a second pass runs
the model adapted by that expert (Transformer²'s prompt- and classifier-based strategies).

`ExpertClassifier` learns to recognise each expert's task from what the base model makes of
an input (the pooled output of its deepest sequence mixer), with a logistic regression;
`choose_by_loss` lets the model itself judge, picking the expert under which an input is
least surprising (for a language model: the lowest next-token loss on the prompt).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..mixers.base import SequenceMixer
from ..training.tasks.base import batch_size_of
from .experts import Expert, as_expert
from .svf import SVF

Forward = Callable[[nn.Module, Any], Any]  # (model, batch) -> the model's output


def index_batch(batch: Any, index: torch.Tensor) -> Any:
    """The examples `index` of a batch (a tensor or a nested dict/list/tuple of tensors)."""
    if isinstance(batch, torch.Tensor):
        return batch[index.to(batch.device)]
    if isinstance(batch, dict):
        return {k: index_batch(v, index) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(index_batch(v, index) for v in batch)
    return batch


@torch.no_grad()
def deepest_mixer_features(model: nn.Module, batch: Any, forward: Forward) -> torch.Tensor:
    """[B, D]: the output of the model's last sequence mixer, averaged over positions
    (`mixer_features` without gradients)."""
    return mixer_features(model, batch, forward)


def mixer_features(model: nn.Module, batch: Any, forward: Forward) -> torch.Tensor:
    """[B, D]: the output of the model's last sequence mixer, averaged over positions, with
    gradients to whatever the model's weights depend on (an SVF's z).

    A model that runs several sequences per example (the forecaster's channels, a
    bidirectional encoder's two directions: [k·B, T, D]) has them averaged per example.
    """
    mixers = [m for m in model.modules() if isinstance(m, SequenceMixer)]
    if not mixers:
        raise ValueError(f"{type(model).__name__} has no sequence mixer to take features from")
    captured: list[torch.Tensor] = []

    def hook(_module, _inputs, output):
        y = output[0] if isinstance(output, tuple) else output
        captured.append(y.float().mean(dim=1))

    handle = mixers[-1].register_forward_hook(hook)
    try:
        forward(model, batch)
    finally:
        handle.remove()
    if not captured:
        raise ValueError("the forward function did not run the model's last sequence mixer")
    # a model that calls its mixers more than once per input (the DNA classifier's
    # reverse-complement pass) gets the mean of its calls: strand-invariant features
    same = all(c.shape == captured[0].shape for c in captured)
    rows = torch.stack(captured).mean(0) if same else captured[-1]  # [rows, D]
    B = batch_size_of(batch)
    if rows.shape[0] % B:
        raise ValueError(f"the last mixer saw {rows.shape[0]} sequences for {B} examples")
    per_example = rows.shape[0] // B
    # rows are example-major ([B*C]: the forecaster's channels) or view-major ([2B]: a
    # bidirectional encoder's directions, concatenated along the batch)
    if per_example == 1:
        return rows
    if getattr(model, "bidirectional", False):
        return rows.view(per_example, B, -1).mean(0)
    return rows.view(B, per_example, -1).mean(1)


class ExpertClassifier:
    """Which expert's task does an input come from? A logistic regression over the base
    model's features (`deepest_mixer_features` by default), fitted on examples of every
    expert's task.

    forward(model, batch): how the model runs on a batch of inputs (e.g.
        `lambda m, b: m(b[0])` for (x, y) batches).
    """

    def __init__(self, forward: Forward, features=deepest_mixer_features, C: float = 1.0):
        self.forward, self.features, self.C = forward, features, C
        self.classes_: np.ndarray | None = None

    def _features(self, svf: SVF, batch) -> np.ndarray:
        base = svf.disabled() if not svf.extra else contextlib.nullcontext()
        with svf.evaluating(), base:
            return self.features(svf.model, batch, self.forward).cpu().numpy()

    def fit(self, svf: SVF, batches_per_expert: Sequence[Sequence[Any]]) -> ExpertClassifier:
        """batches_per_expert[k]: batches of inputs from expert k's task."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        if len(batches_per_expert) < 2:
            raise ValueError("an expert classifier needs examples of at least 2 experts' tasks")
        xs, ys = [], []
        for k, batches in enumerate(batches_per_expert):
            if not batches:
                raise ValueError(f"no examples for expert {k}")
            for batch in batches:
                feats = self._features(svf, batch)
                xs.append(feats)
                ys.append(np.full(len(feats), k))
        self.model_ = make_pipeline(StandardScaler(), LogisticRegression(C=self.C, max_iter=2000))
        self.model_.fit(np.concatenate(xs), np.concatenate(ys))
        self.classes_ = np.arange(len(batches_per_expert))
        return self

    def predict_proba(self, svf: SVF, batch) -> np.ndarray:
        """[B, K] probabilities of the experts' tasks."""
        if self.classes_ is None:
            raise RuntimeError("ExpertClassifier.predict_proba before fit")
        return self.model_.predict_proba(self._features(svf, batch))

    def predict(self, svf: SVF, batch) -> np.ndarray:
        """[B] the index of the most likely expert per input."""
        return self.predict_proba(svf, batch).argmax(axis=1)


@torch.no_grad()
def choose_by_loss(
    svf: SVF,
    experts: Sequence[Expert | str | Path],
    batch: Any,
    loss_per_example: Callable[[nn.Module, Any], torch.Tensor],
) -> np.ndarray:
    """[B] per input, the expert under which `loss_per_example(model, batch)` ([B], e.g. a
    language model's mean next-token loss on the prompt) is lowest: the model itself
    classifies its input. Leaves the SVF set to the last expert tried."""
    experts = [as_expert(e) for e in experts]
    losses = []
    for expert in experts:
        svf.load_expert(expert)
        losses.append(loss_per_example(svf.model, batch).float().cpu())
    return torch.stack(losses, dim=1).argmin(dim=1).numpy()


@torch.no_grad()
def run_with_experts(
    svf: SVF,
    experts: Sequence[Expert | str | Path],
    choice: np.ndarray | Sequence[int],
    batch: Any,
    forward: Forward,
) -> torch.Tensor:
    """The second pass: every input run by the model adapted with its chosen expert.

    choice: [B] expert index per input. Inputs are grouped by expert (one adapted forward
    per expert used) and the outputs put back in input order; they must be tensors with
    the batch first.
    """
    experts = [as_expert(e) for e in experts]
    choice = torch.as_tensor(np.asarray(choice), dtype=torch.long)
    B = batch_size_of(batch)
    if choice.shape != (B,):
        raise ValueError(f"need one expert index per input ({B}), got shape {tuple(choice.shape)}")
    if choice.numel() and (choice.min() < 0 or choice.max() >= len(experts)):
        raise ValueError(f"expert indices must lie in [0, {len(experts)})")
    output = None
    for k in choice.unique().tolist():
        rows = (choice == k).nonzero().flatten()
        svf.load_expert(experts[k])
        part = forward(svf.model, index_batch(batch, rows))
        if output is None:
            output = part.new_empty((B, *part.shape[1:]))
        output[rows.to(part.device)] = part
    return output
