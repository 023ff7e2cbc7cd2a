"""Singular-value fine-tuning (SVF, Transformer²: Sun, Cetin, Tang 2025).

Every target matrix W = U Σ Vᵀ is replaced by U (Σ ⊙ z) Vᵀ, and only the vectors z are
trained. The parametrization is written as W + U diag(Σ ⊙ (z − 1)) Vᵀ, the same matrix,
so that at z = 1 the model computes exactly what it computed before (not merely up to the
round-off of re-multiplying the factors). The factors come from one SVD in float64.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..training.checkpoint import tensor_digest
from .experts import Expert, ExpertMismatch, as_expert, save_expert
from .targets import Target, match_parameters, select_targets


class SingularValueScale(nn.Module):
    """Parametrization W [..., out, in] -> W + U diag(S ⊙ (z − 1)) Vᵀ with z [..., r].

    U [..., out, r], S [..., r], Vh [..., r, in] are non-persistent buffers: they follow the
    model across devices but are recomputed from the base weights rather than saved.
    """

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        with torch.no_grad():
            u, s, vh = torch.linalg.svd(weight.detach().double(), full_matrices=False)
        self.register_buffer("U", u.to(weight.dtype), persistent=False)
        self.register_buffer("S", s.to(weight.dtype), persistent=False)
        self.register_buffer("Vh", vh.to(weight.dtype), persistent=False)
        self.z = nn.Parameter(torch.ones_like(self.S))
        self.z._no_weight_decay = True  # decay would pull the scales towards 0, not 1
        self.bypass = False

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        if self.bypass:
            return weight
        delta = (self.S * (self.z - 1)).unsqueeze(-2)  # [..., 1, r]
        return weight + (self.U * delta) @ self.Vh


class SVF(nn.Module):
    """A trained model whose target matrices are adapted by singular-value scales only.

    The model is adapted in place (parametrizations on its target tensors) and frozen;
    `svf(*args)` calls it, and `svf.model` is the model itself, usable wherever it was
    (e.g. by a domain's loss or the shared training loop, which then trains exactly the
    parameters left trainable).

    model: any module; its outputs are unchanged while every z is 1.
    targets: None for the default set (every `nn.Linear` in the sequence mixers and MLPs
        and every memory's initial weights W_0), or `fnmatch` patterns over target names
        (see `titans_seq.adapt.targets`).
    also_train: patterns over parameter names trained in full beside z and saved with the
        expert, for what the base model does not have (e.g. a new task's head,
        `["classifier.*"]`). Empty by default: then `parameters()` yields exactly the z
        vectors, Σ min(out, in) numbers (per head for the memory's W_0).
    base_name: a name for the base model written into expert files (e.g. a run folder).
    """

    def __init__(
        self,
        model: nn.Module,
        targets: Sequence[str] | None = None,
        also_train: Sequence[str] = (),
        base_name: str = "",
    ):
        super().__init__()
        if any(parametrize.is_parametrized(m) for m in model.modules()):
            raise ValueError("the model is already parametrized (adapted twice?): pass the base")
        self.model = model
        self.base_name = base_name
        self.targets: list[Target] = select_targets(model, targets)
        extra_names = match_parameters(model, also_train)
        # what the expert replaces (the also_train tensors, e.g. a freshly initialised head)
        # is not part of the base it must match
        self.base_sha256 = tensor_digest(
            {k: v for k, v in model.state_dict().items() if k not in extra_names}
        )
        model.requires_grad_(False)
        self.extra = {name: model.get_parameter(name) for name in extra_names}
        for param in self.extra.values():
            param.requires_grad_(True)
        self._extra_base = {name: p.detach().clone() for name, p in self.extra.items()}
        self.scales: dict[str, SingularValueScale] = {}
        for target in self.targets:
            module = model.get_submodule(target.module_name)
            scale = SingularValueScale(getattr(module, target.attribute))
            scale = scale.to(getattr(module, target.attribute).device)
            parametrize.register_parametrization(module, target.attribute, scale)
            self.scales[target.name] = scale

    # ---------------------------------------------------------------------- the module
    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, nn.Parameter]]:
        """The trained parameters only: every z (named after its target), then `also_train`."""
        dot = f"{prefix}." if prefix else ""
        for name, scale in self.scales.items():
            yield f"{dot}z.{name}", scale.z
        for name, param in self.extra.items():
            yield f"{dot}{name}", param

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # --------------------------------------------------------------------- the experts
    def expert(self, task: str = "") -> Expert:
        """A copy of the current scales (and extra tensors) as an Expert."""
        return Expert(
            z={name: s.z.detach().cpu().clone() for name, s in self.scales.items()},
            base_sha256=self.base_sha256,
            base_name=self.base_name,
            task=task,
            extra={name: p.detach().cpu().clone() for name, p in self.extra.items()},
        )

    def save_expert(self, path: str | Path, task: str = "") -> Path:
        return save_expert(path, self.expert(task))

    def check_expert(self, expert: Expert, what: str = "expert") -> None:
        """Raise ExpertMismatch unless `expert` was trained on this base with these targets."""
        extra_mine = {name: tuple(p.shape) for name, p in self.extra.items()}
        extra_theirs = {name: tuple(t.shape) for name, t in expert.extra.items()}
        if extra_mine != extra_theirs:
            raise ExpertMismatch(
                f"{what} trains other extra parameters ({sorted(extra_theirs)}) than this SVF "
                f"({sorted(extra_mine)}): pass the same `also_train`"
            )
        if expert.base_sha256 != self.base_sha256:
            raise ExpertMismatch(
                f"{what}{' ' + expert.task if expert.task else ''} was trained on another base "
                f"model ({expert.base_name or 'unnamed'}, sha256 {expert.base_sha256[:12]}…) than "
                f"this one ({self.base_name or 'unnamed'}, sha256 {self.base_sha256[:12]}…)"
            )
        mine = {name: tuple(s.z.shape) for name, s in self.scales.items()}
        theirs = {name: tuple(z.shape) for name, z in expert.z.items()}
        if mine != theirs:
            missing = sorted(set(mine) ^ set(theirs)) or sorted(
                n for n in mine if mine[n] != theirs[n]
            )
            raise ExpertMismatch(
                f"{what} adapts other matrices than this SVF (differing: {missing[:4]})"
            )

    @torch.no_grad()
    def load_expert(self, source: Expert | str | Path) -> Expert:
        """Set the scales (and extra tensors) from an expert or its file; returns the expert."""
        expert = as_expert(source)
        self.check_expert(expert)
        for name, scale in self.scales.items():
            scale.z.copy_(expert.z[name])
        for name, param in self.extra.items():
            param.copy_(expert.extra[name])
        return expert

    @torch.no_grad()
    def set_mixture(
        self, experts: Sequence[Expert | str | Path], weights: Sequence[float] | torch.Tensor
    ) -> None:
        """z = Σ_k weights[k] · z_k (extra tensors mixed the same way)."""
        experts = [as_expert(e) for e in experts]
        weights = torch.as_tensor(weights, dtype=torch.float64).flatten()
        if len(experts) == 0 or weights.numel() != len(experts):
            raise ValueError(f"{len(experts)} experts need as many weights, got {weights.numel()}")
        for index, expert in enumerate(experts):
            self.check_expert(expert, what=f"expert {index}")
        for name, scale in self.scales.items():
            mixed = sum(float(w) * e.z[name].double() for w, e in zip(weights, experts))
            scale.z.copy_(mixed)
        for name, param in self.extra.items():
            mixed = sum(float(w) * e.extra[name].double() for w, e in zip(weights, experts))
            param.copy_(mixed)

    @torch.no_grad()
    def reset(self) -> None:
        """Back to the base model: every z = 1 and the extra tensors as they were."""
        for scale in self.scales.values():
            scale.z.fill_(1.0)
        for name, param in self.extra.items():
            param.copy_(self._extra_base[name])

    @contextlib.contextmanager
    def evaluating(self):
        """Within the block the model is in eval mode (no dropout), and no gradients are
        taken; its previous train/eval mode comes back afterwards, also on an error."""
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                yield self
        finally:
            self.model.train(was_training)

    @contextlib.contextmanager
    def disabled(self):
        """Within the block the target matrices are the base's, whatever z holds (e.g. the
        reference policy of a KL penalty). Extra tensors cannot be swapped out safely under
        autograd, so an SVF with `also_train` refuses."""
        if self.extra:
            raise ValueError("disabled() needs an SVF without also_train parameters")
        for scale in self.scales.values():
            scale.bypass = True
        try:
            yield self
        finally:
            for scale in self.scales.values():
                scale.bypass = False

    def merge(self) -> nn.Module:
        """A plain copy of the model with the adapted weights written in (no
        parametrizations, every parameter trainable); the SVF itself is unchanged."""
        with torch.no_grad():
            adapted = {
                t.name: getattr(self.model.get_submodule(t.module_name), t.attribute).clone()
                for t in self.targets
            }
        merged = copy.deepcopy(self.model)
        for module_name in dict.fromkeys(t.module_name for t in self.targets):
            module = merged.get_submodule(module_name)
            # `parametrize.remove_parametrizations` would delete the property from the class
            # that the copy shares with self.model (deepcopy keeps classes), breaking it; so
            # the copy gets its plain class back the way that function does it, by hand
            del module.parametrizations
            module.__class__ = module.__class__.__bases__[0]
        for target in self.targets:
            module = merged.get_submodule(target.module_name)
            module.register_parameter(target.attribute, nn.Parameter(adapted[target.name]))
        return merged.requires_grad_(True)
