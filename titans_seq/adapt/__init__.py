"""Self-adaptation of trained models with singular-value fine-tuning (Transformer²).

- `SVF(model)`: train only a vector z per weight matrix that rescales its singular values;
  one expert (z) per task, saved with `save_expert` and checked against its base on load.
- Inference-time adaptation: `cem_mixture` (few-shot search of expert mixture weights),
  two-pass dispatch: a first pass picks an expert per input (`SVFTaskClassifier`, the
  classification expert; `choose_by_prompt`, the model prompted to name the task;
  `ExpertClassifier`, a logistic regression of the base's features; `choose_by_loss`), then
  `run_with_experts`.
- Objectives: a domain's own loss through the shared loop (`AdaptationTask`), or a
  verifiable reward with a KL penalty (`policy_gradient_loss`, `train_with_reward`).
- Baselines: `add_lora` (peft) and `full_finetuning`.

See docs/adapt.md.
"""

from .baselines import add_lora, count_trainable, full_finetuning, lora_state_dict
from .dispatch import ExpertClassifier, choose_by_loss, deepest_mixer_features, run_with_experts
from .experts import Expert, ExpertMismatch, read_expert, save_expert
from .mixture import MixtureSearch, cem_mixture, loss_score
from .policy_gradient import (
    exact_match_reward,
    policy_gradient_loss,
    sample_completions,
    train_with_reward,
)
from .svf import SVF, SingularValueScale
from .targets import Target, candidate_targets, select_targets
from .task import AdaptationTask, AdaptConfig, adapt_model
from .task_experts import SVFTaskClassifier, choose_by_prompt

__all__ = [
    "SVF",
    "SVFTaskClassifier",
    "AdaptConfig",
    "AdaptationTask",
    "Expert",
    "ExpertClassifier",
    "ExpertMismatch",
    "MixtureSearch",
    "SingularValueScale",
    "Target",
    "adapt_model",
    "add_lora",
    "candidate_targets",
    "cem_mixture",
    "choose_by_loss",
    "choose_by_prompt",
    "count_trainable",
    "deepest_mixer_features",
    "exact_match_reward",
    "full_finetuning",
    "lora_state_dict",
    "loss_score",
    "policy_gradient_loss",
    "read_expert",
    "run_with_experts",
    "sample_completions",
    "save_expert",
    "select_targets",
    "train_with_reward",
]
