"""Training an SVF expert of a language model from a verifiable reward (Transformer²'s RL
objective): REINFORCE with a group-mean baseline and a KL penalty to the base model.

The model follows the streaming LM protocol `logits [B, T, V], state = model(tokens
[B, T], state)` (TitansLM, or anything shaped like it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .svf import SVF


@torch.no_grad()
def sample_completions(
    model,
    prompts: torch.Tensor,
    num_tokens: int,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """prompts [B, P] -> sampled continuations [B, num_tokens] (the prompt in one call, then
    one token per step with the streaming state)."""
    if num_tokens < 1 or temperature <= 0:
        raise ValueError("need num_tokens >= 1 and temperature > 0")
    logits, state = model(prompts)
    tokens = []
    for step in range(num_tokens):
        probs = F.softmax(logits[:, -1].float() / temperature, dim=-1)
        # sampled on the host so that a CPU generator makes GPU runs reproducible too
        token = torch.multinomial(probs.cpu(), 1, generator=generator).to(prompts.device)
        tokens.append(token)
        if step + 1 < num_tokens:
            logits, state = model(token, state)
    return torch.cat(tokens, dim=1)


def exact_match_reward(completions: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """[B] 1.0 where a completion [B, L] starts with its answer [B, A] (A <= L), else 0.0."""
    if answers.shape[1] > completions.shape[1]:
        raise ValueError("answers are longer than the completions")
    return (completions[:, : answers.shape[1]] == answers).all(dim=1).float()


@dataclass
class PolicyGradientStats:
    reward: float  # mean reward of the samples
    kl: float  # mean per-sequence KL(adapted || base) over the sampled completions
    loss: float


def policy_gradient_loss(
    svf: SVF,
    prompts: torch.Tensor,
    completions: torch.Tensor,
    rewards: torch.Tensor,
    kl_coef: float = 0.1,
    group_size: int | None = None,
) -> tuple[torch.Tensor, PolicyGradientStats]:
    """REINFORCE on sampled completions with a KL penalty to the base model.

    prompts [B, P], completions [B, L] (sampled from the adapted model), rewards [B]. The
    advantage is the reward minus the mean reward of its group: `group_size` consecutive
    rows sample the same prompt (None: the whole batch is one group), so a prompt that is
    easy for every sample teaches nothing and one that is hard for every sample neither.
    The KL is exact over the vocabulary at every completion position, summed over
    positions, and computed against the base (`svf.disabled()`), so it is zero at z = 1.
    loss = −mean(A · Σ_t log π(c_t)) + kl_coef · mean(Σ_t KL_t).
    """
    if prompts.shape[0] != completions.shape[0] or rewards.shape != (prompts.shape[0],):
        raise ValueError("prompts, completions and rewards must have the same batch size")
    group = prompts.shape[0] if group_size is None else group_size
    if group < 1 or prompts.shape[0] % group:
        raise ValueError(f"group_size {group_size} does not divide the batch {prompts.shape[0]}")
    tokens = torch.cat([prompts, completions], dim=1)
    P = prompts.shape[1]
    logits, _ = svf(tokens[:, :-1])
    logp = F.log_softmax(logits[:, P - 1 :].float(), dim=-1)  # [B, L, V]: predicts completions
    with torch.no_grad(), svf.disabled():
        ref_logits, _ = svf(tokens[:, :-1])
        ref_logp = F.log_softmax(ref_logits[:, P - 1 :].float(), dim=-1)
    chosen = logp.gather(-1, completions.unsqueeze(-1)).squeeze(-1).sum(1)  # [B]
    grouped = rewards.float().view(-1, group)
    advantage = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    kl = (logp.exp() * (logp - ref_logp)).sum(-1).sum(1)  # [B]
    loss = -(advantage * chosen).mean() + kl_coef * kl.mean()
    stats = PolicyGradientStats(
        float(rewards.float().mean()), float(kl.detach().mean()), float(loss.detach())
    )
    return loss, stats


def train_with_reward(
    svf: SVF,
    prompts: Callable[[int], tuple[torch.Tensor, torch.Tensor]],
    reward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    steps: int,
    samples_per_prompt: int = 4,
    num_tokens: int | None = None,
    lr: float = 2e-3,
    kl_coef: float = 0.1,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[PolicyGradientStats]:
    """Train the SVF's z by policy gradient for `steps` updates; returns the per-step stats.

    prompts(step) -> (prompt ids [B, P], answers [B, A]); every prompt is sampled
    `samples_per_prompt` times, and the samples of one prompt form the group of the
    baseline; reward(completions, answers) -> [B·samples]. A non-finite
    loss stops the run with an error instead of corrupting z.
    """
    generator = torch.Generator(device="cpu").manual_seed(seed)
    optimizer = torch.optim.Adam(svf.parameters(), lr=lr)
    history = []
    for step in range(steps):
        prompt, answers = prompts(step)
        prompt = prompt.repeat_interleave(samples_per_prompt, dim=0)
        answers = answers.repeat_interleave(samples_per_prompt, dim=0)
        svf.model.eval()
        completions = sample_completions(
            svf, prompt, num_tokens or answers.shape[1], temperature, generator
        )
        loss, stats = policy_gradient_loss(
            svf, prompt, completions, reward(completions, answers), kl_coef, samples_per_prompt
        )
        if not torch.isfinite(loss):
            raise FloatingPointError(f"policy-gradient loss is {float(loss)} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        history.append(stats)
    return history
