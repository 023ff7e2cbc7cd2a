"""The first pass of two-pass inference as Transformer² has it: the model itself names the
task of its input, either adapted by a classification expert or prompted to say it.

* `SVFTaskClassifier`: the classification expert, an SVF expert z_c trained like the task
  experts (the same singular-value scales, nothing else of the model) to name the expert
  whose task an input comes from, read out by a linear head [D -> K] over the adapted
  model's pooled features (the output of its deepest sequence mixer).
* `choose_by_prompt`: prompt-based dispatch for a language model: the base model reads the
  input and an adaptation prompt ("... which task is this? "), and the expert whose label
  it finds likeliest as the continuation runs the second pass.

Both give one expert index per input for `run_with_experts`, as `ExpertClassifier` (a
logistic regression over the base model's features) and `choose_by_loss` do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .dispatch import Forward, mixer_features
from .experts import Expert
from .svf import SVF


class SVFTaskClassifier:
    """Which expert's task does an input come from? An SVF classification expert.

    fit(svf, batches_per_expert) trains z_c and the head from the base (z = 1) with the
    cross-entropy of the expert index, full batches of every expert's examples in a seeded
    order for `epochs` passes (Adam, `lr`); the features are standardised with the base
    model's mean and spread, so the head starts on unit-scale inputs. z_c is kept as an
    `Expert` (`expert_`, saveable like any other) and the SVF is reset to the base
    afterwards; `also_train` tensors (a domain's head) stay as the base has them.

    forward(model, batch): how the model runs on a batch of inputs.
    """

    def __init__(self, forward: Forward, epochs: int = 30, lr: float = 1e-2, seed: int = 0):
        if epochs < 1 or lr <= 0:
            raise ValueError(f"need epochs >= 1 and lr > 0, got {epochs} and {lr}")
        self.forward, self.epochs, self.lr, self.seed = forward, epochs, lr, seed
        self.expert_: Expert | None = None
        self.head_: nn.Linear | None = None

    def _features(self, svf: SVF, batch) -> torch.Tensor:
        """[B, D] standardised features of the model as the SVF holds it (with gradients)."""
        features = mixer_features(svf.model, batch, self.forward).float()
        return (features - self.mean_) / self.scale_

    def fit(self, svf: SVF, batches_per_expert: Sequence[Sequence[Any]]) -> SVFTaskClassifier:
        """batches_per_expert[k]: batches of inputs from expert k's task."""
        if len(batches_per_expert) < 2:
            raise ValueError("a task classifier needs examples of at least 2 experts' tasks")
        labelled = []
        for k, batches in enumerate(batches_per_expert):
            if not batches:
                raise ValueError(f"no examples for expert {k}")
            labelled += [(batch, k) for batch in batches]
        svf.reset()
        was_training = svf.model.training
        svf.model.eval()  # no dropout: the features z_c is trained on are the ones it reads
        try:
            with torch.no_grad():
                base = torch.cat([mixer_features(svf.model, b, self.forward) for b, _ in labelled])
            self.mean_ = base.float().mean(0)
            self.scale_ = base.float().std(0).clamp_min(1e-6) if len(base) > 1 else 1.0
            generator = torch.Generator().manual_seed(self.seed)
            head = nn.Linear(base.shape[1], len(batches_per_expert)).to(base.device)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                head.reset_parameters()
            scales = [s.z for s in svf.scales.values()]
            optimizer = torch.optim.Adam([*scales, *head.parameters()], lr=self.lr)
            for _ in range(self.epochs):
                for index in torch.randperm(len(labelled), generator=generator).tolist():
                    batch, k = labelled[index]
                    logits = head(self._features(svf, batch))
                    target = torch.full((len(logits),), k, device=logits.device)
                    loss = F.cross_entropy(logits, target)
                    if not torch.isfinite(loss):
                        raise FloatingPointError(f"task-classifier loss is {float(loss)}")
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
            self.expert_ = svf.expert(task="task classifier")
            self.head_ = head.requires_grad_(False)
        finally:
            for param in svf.extra.values():  # trained by nobody here; drop their gradients
                param.grad = None
            svf.reset()
            svf.model.train(was_training)
        return self

    def predict_proba(self, svf: SVF, batch) -> np.ndarray:
        """[B, K] probabilities of the experts' tasks. Leaves the SVF at the base."""
        if self.expert_ is None:
            raise RuntimeError("SVFTaskClassifier.predict_proba before fit")
        svf.load_expert(self.expert_)
        try:
            with svf.evaluating():
                return F.softmax(self.head_(self._features(svf, batch)), -1).cpu().numpy()
        finally:
            svf.reset()

    def predict(self, svf: SVF, batch) -> np.ndarray:
        """[B] the index of the most likely expert per input."""
        return self.predict_proba(svf, batch).argmax(axis=1)


@torch.no_grad()
def choose_by_prompt(
    svf: SVF,
    inputs: torch.Tensor,
    adaptation_prompt: torch.Tensor,
    labels: Sequence[torch.Tensor],
    per_token: bool = False,
) -> np.ndarray:
    """[B] per input, the label the base language model finds likeliest after the input and
    the adaptation prompt (Transformer²'s prompt-based strategy).

    inputs [B, T] token ids; adaptation_prompt [P] ids (e.g. the tokens of "\\nWhich task
    is this: passkey or story? Answer: "); labels[k] [L_k] ids, the name of expert k's task.
    The model (`logits [B, T, V], state = model(ids)`) runs at the base (the SVF is reset
    first and left there) on [input ‖ prompt ‖ label] once per label; a label scores the sum
    of its tokens' log-probabilities (per_token: their mean, for labels of different
    lengths).
    """
    if inputs.dim() != 2 or adaptation_prompt.dim() != 1:
        raise ValueError("inputs must be [B, T] and the adaptation prompt [P] token ids")
    if len(labels) < 2 or any(label.dim() != 1 or label.numel() == 0 for label in labels):
        raise ValueError("need at least 2 labels, each a non-empty [L] tensor of token ids")
    B = inputs.shape[0]
    context = torch.cat([inputs, adaptation_prompt.to(inputs).expand(B, -1)], dim=1)
    svf.reset()
    scores = []
    with svf.evaluating():
        for label in labels:
            label = label.to(inputs)
            ids = torch.cat([context, label.expand(B, -1)], dim=1)
            logits, _ = svf(ids[:, :-1])
            logp = F.log_softmax(logits[:, context.shape[1] - 1 :].float(), dim=-1)
            chosen = logp.gather(-1, label.expand(B, -1).unsqueeze(-1)).squeeze(-1)  # [B, L]
            scores.append(chosen.mean(1) if per_token else chosen.sum(1))
    return torch.stack(scores, dim=1).argmax(dim=1).cpu().numpy()


__all__ = ["SVFTaskClassifier", "choose_by_prompt"]
