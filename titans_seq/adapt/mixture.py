"""Few-shot adaptation: search the mixture weights α of K experts (z' = Σ_k α_k z_k) with
the cross-entropy method on a handful of labelled examples of a new task (Transformer²'s
third strategy)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .experts import Expert, as_expert
from .svf import SVF


@dataclass
class MixtureSearch:
    """The result of `cem_mixture`: the best weights found and how the search went.

    weights: [K] the mixture with the lowest score seen (the SVF is left set to it).
    score: its score; single_expert_scores: [K] the score of every expert alone (always
        evaluated, so the search never returns worse than the best single expert on the
        examples it sees); history: per iteration, the mean and best score of the population.
    """

    weights: torch.Tensor
    score: float
    single_expert_scores: list[float]
    history: list[dict[str, float]] = field(default_factory=list)


def cem_mixture(
    svf: SVF,
    experts: Sequence[Expert | str | Path],
    score: Callable[[SVF], float],
    iterations: int = 8,
    population: int = 16,
    elite_fraction: float = 0.25,
    init_std: float = 0.5,
    min_std: float = 0.02,
    seed: int = 0,
) -> MixtureSearch:
    """Cross-entropy method over α ∈ R^K, minimising `score(svf)` (e.g. the loss on k
    labelled examples of the new task) after `svf.set_mixture(experts, α)`.

    The search distribution is a diagonal Gaussian, initialised at the uniform mixture with
    `init_std`; every iteration draws `population` candidates (the first one also tries every
    single expert and the uniform mixture), keeps the best `elite_fraction` and refits mean
    and standard deviation to them (floored at `min_std`). Costs iterations × population
    evaluations of `score`, all forward only.
    """
    experts = [as_expert(e) for e in experts]
    K = len(experts)
    if K == 0:
        raise ValueError("cem_mixture needs at least one expert")
    if iterations < 1 or population < 2 or not 0.0 < elite_fraction <= 1.0:
        raise ValueError("need iterations >= 1, population >= 2 and 0 < elite_fraction <= 1")
    generator = torch.Generator().manual_seed(seed)
    num_elite = max(1, round(population * elite_fraction))
    mean = torch.full((K,), 1.0 / K, dtype=torch.float64)
    std = torch.full((K,), float(init_std), dtype=torch.float64)

    def evaluate(alpha: torch.Tensor) -> float:
        svf.set_mixture(experts, alpha)
        value = float(score(svf))
        return value if value == value else float("inf")  # a NaN score never wins

    singles = torch.eye(K, dtype=torch.float64)
    single_scores = [evaluate(row) for row in singles]
    best_alpha, best_score = singles[int(torch.tensor(single_scores).argmin())], min(single_scores)
    history = []
    for iteration in range(iterations):
        draws = mean + std * torch.randn(population, K, generator=generator, dtype=torch.float64)
        if iteration == 0:
            draws[0] = 1.0 / K
        scores = torch.tensor([evaluate(alpha) for alpha in draws], dtype=torch.float64)
        order = scores.argsort()
        if scores[order[0]] < best_score:
            best_score, best_alpha = float(scores[order[0]]), draws[order[0]].clone()
        elite = draws[order[:num_elite]]
        mean = elite.mean(0)
        std = (elite.std(0, unbiased=False) if num_elite > 1 else std * 0.5).clamp_min(min_std)
        finite = scores[torch.isfinite(scores)]
        history.append(
            {
                "iteration": iteration,
                "mean_score": float(finite.mean()) if finite.numel() else float("inf"),
                "best_score": float(scores[order[0]]),
            }
        )
    svf.set_mixture(experts, best_alpha)
    return MixtureSearch(best_alpha.float(), best_score, single_scores, history)


def loss_score(task, batches: Sequence, device: torch.device | str = "cpu") -> Callable:
    """A `score` for `cem_mixture`: the mean of `task.loss(model, batch)` over `batches`
    (no gradients, eval mode), weighted by batch size."""
    from ..training.loop import batch_to_device
    from ..training.tasks.base import batch_size_of

    def score(svf: SVF) -> float:
        total, count = 0.0, 0
        with svf.evaluating():
            for batch in batches:
                loss, _ = task.loss(svf.model, batch_to_device(batch, torch.device(device)))
                n = batch_size_of(batch)
                total, count = total + float(loss) * n, count + n
        return total / max(count, 1)

    return score
