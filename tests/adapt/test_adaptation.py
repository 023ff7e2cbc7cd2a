"""Inference-time adaptation (CEM mixtures, two-pass dispatch), the peft LoRA and full
fine-tuning baselines, the shared-loop adaptation task and the policy-gradient objective."""

import pytest
import torch
from torch import nn

from titans_seq.adapt import (
    SVF,
    AdaptationTask,
    AdaptConfig,
    ExpertClassifier,
    add_lora,
    cem_mixture,
    choose_by_loss,
    count_trainable,
    exact_match_reward,
    policy_gradient_loss,
    read_expert,
    run_with_experts,
    sample_completions,
    train_with_reward,
)
from titans_seq.backbone import Backbone


class TinyRegressor(nn.Module):
    """x [B, T, 8] -> [B, 8]: a backbone with a linear head on the last position."""

    def __init__(self, mixer: str = "lmm"):
        super().__init__()
        self.backbone = Backbone(8, 1, mixer=mixer, heads=2)
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        h, _ = self.backbone(x)
        return self.head(h[:, -1])


def experts_for(svf: SVF, seeds=(1, 2, 3)):
    experts = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in svf.parameters():
                p.copy_(1 + 0.5 * torch.randn(p.shape, generator=generator))
        experts.append(svf.expert(task=f"task{seed}"))
    svf.reset()
    return experts


def test_cem_finds_a_mixture_no_worse_than_any_single_expert():
    svf = SVF(TinyRegressor())
    experts = experts_for(svf)
    # the best answer is a mixture that no single expert is: 0.3 z_0 + 0.7 z_2
    goal = {n: 0.3 * experts[0].z[n] + 0.7 * experts[2].z[n] for n in experts[0].z}

    def score(model: SVF) -> float:
        return sum(float(((s.z.detach() - goal[n]) ** 2).sum()) for n, s in model.scales.items())

    search = cem_mixture(svf, experts, score, iterations=12, population=24, seed=0)
    assert search.score <= min(search.single_expert_scores)
    assert search.score < 0.05 * min(search.single_expert_scores)
    torch.testing.assert_close(search.weights, torch.tensor([0.3, 0.0, 0.7]), atol=0.08, rtol=0)
    assert score(svf) == pytest.approx(search.score)  # the SVF is left at the best mixture
    assert len(search.history) == 12


def test_expert_classifier_routes_inputs_and_the_second_pass_uses_each_expert():
    torch.manual_seed(0)
    svf = SVF(TinyRegressor())
    experts = experts_for(svf, seeds=(1, 2))
    forward = lambda model, batch: model(batch)  # noqa: E731

    def task_inputs(k, n=64):
        return torch.randn(n, 12, 8) * 0.3 + (2.0 if k else -2.0)

    classifier = ExpertClassifier(forward).fit(svf, [[task_inputs(0)], [task_inputs(1)]])
    mixed = torch.cat([task_inputs(0, 5), task_inputs(1, 7)])
    choice = classifier.predict(svf, mixed)
    assert choice.tolist() == [0] * 5 + [1] * 7

    output = run_with_experts(svf, experts, choice, mixed, forward)
    for k in (0, 1):
        svf.load_expert(experts[k])
        rows = torch.as_tensor(choice == k)
        torch.testing.assert_close(output[rows], svf(mixed[rows]))
    with pytest.raises(ValueError, match="one expert index per input"):
        run_with_experts(svf, experts, choice[:3], mixed, forward)


def test_choose_by_loss_picks_the_expert_that_explains_each_input_best():
    svf = SVF(TinyRegressor())
    experts = experts_for(svf, seeds=(1, 2))
    x = torch.randn(6, 10, 8)
    targets = []
    for k in (0, 1):
        svf.load_expert(experts[k])
        with torch.no_grad():
            targets.append(svf(x))
    y = torch.cat([targets[0][:3], targets[1][3:]])

    choice = choose_by_loss(svf, experts, x, lambda m, b: ((m(b) - y) ** 2).mean(-1))
    assert choice.tolist() == [0, 0, 0, 1, 1, 1]


def test_lora_through_peft_starts_at_the_base_and_trains_only_adapters():
    pytest.importorskip("peft")
    model = TinyRegressor()
    x = torch.randn(3, 9, 8)
    before = model(x)
    add_lora(model, rank=2)
    torch.testing.assert_close(model(x), before)  # B = 0 at initialisation
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    model(x).sum().backward()
    assert all((p.grad is not None) == p.requires_grad for p in model.parameters())
    assert count_trainable(model) < sum(p.numel() for p in model.parameters()) // 2


def forecasting_run(tmp_path, name: str, steps: int = 12):
    """(config, in-memory forecasting task) of a tiny forecaster on a noisy sine."""
    from titans_seq.domains.forecasting.task import InMemoryForecastTask, WindowTensors
    from titans_seq.training.config import from_dict

    t = torch.arange(400, dtype=torch.float32)
    series = torch.sin(2 * torch.pi * t / 12) + 0.1 * torch.randn(400)
    windows = torch.stack([series[i : i + 16] for i in range(400 - 16)])[..., None]
    data = WindowTensors(windows[:, :12], windows[:, 12:])
    cfg = from_dict(
        {
            "task": "forecasting",
            "name": name,
            "model": {"dim": 8, "depth": 1, "heads": 1, "patch_len": 4, "stride": 4,
                      "mixer_options": {"chunk_size": 4}},
            "data": {"dataset": "<in-memory>", "lookback": 12, "horizon": 4},
            "optim": {"lr": 0.05, "warmup_steps": 1},
            "train": {"max_steps": steps, "batch_size": 32, "out_dir": str(tmp_path / name),
                      "progress": False, "plot": False, "tensorboard": False,
                      "checkpoint_every": steps},
            "eval": {"every": steps // 2, "metric": "loss", "mode": "min", "patience": 0},
        }
    )  # fmt: skip
    return cfg, InMemoryForecastTask(data, data, 1)


@pytest.mark.parametrize("method", ["svf", "lora", "full", "frozen"])
def test_adaptation_task_trains_in_the_shared_loop_and_writes_the_expert(tmp_path, method):
    if method == "lora":
        pytest.importorskip("peft")
    from titans_seq.training.loop import train

    cfg, task = forecasting_run(tmp_path, method)
    torch.manual_seed(0)
    base_state = {k: v.clone() for k, v in task.build_model(cfg).state_dict().items()}

    def base(cfg):
        model = task.build_model(cfg)
        model.load_state_dict(base_state)
        return model

    config = AdaptConfig(
        method=method, task_name="sine", also_train=("head.*",) if method == "frozen" else ()
    )
    adapt = AdaptationTask(task, base, config, base_name="tiny")
    train(cfg, task=adapt, quiet=True)
    trained = {n for n, p in adapt.model.named_parameters() if p.requires_grad}
    changed = {
        name
        for name, value in adapt.model.state_dict().items()
        if name in base_state and not torch.equal(value, base_state[name])
    }
    if method == "svf":
        assert trained and all(n.endswith(".z") for n in trained)
        assert not changed  # the base weights are untouched
        expert = read_expert(cfg.run_dir() / "expert.safetensors")
        assert expert.task == "sine" and expert.base_name == "tiny"
        assert any(not torch.equal(z, torch.ones_like(z)) for z in expert.z.values())
        SVF(base(cfg)).load_expert(expert)  # it belongs to the base
    elif method == "lora":
        assert trained and all("lora_" in n for n in trained)
        assert (cfg.run_dir() / "lora_adapter.safetensors").is_file()
    elif method == "frozen":
        assert changed == {"head.weight", "head.bias"}
    else:
        assert len(changed) > 2


def test_adapt_config_refuses_unknown_methods_and_an_empty_probe():
    with pytest.raises(ValueError, match="method must be one of"):
        AdaptConfig(method="dora")
    from titans_seq.adapt import adapt_model

    with pytest.raises(ValueError, match="also_train"):
        adapt_model(TinyRegressor(), AdaptConfig(method="frozen"))


class CountingLM(nn.Module):
    """The streaming LM protocol on a tiny Backbone: tokens [B, T] -> (logits [B, T, V], state)."""

    def __init__(self, vocab: int = 6):
        super().__init__()
        self.embedding = nn.Embedding(vocab, 16)
        self.backbone = Backbone(16, 1, mixer="lmm", heads=2)
        self.head = nn.Linear(16, vocab)

    def forward(self, tokens, state=None):
        h, state = self.backbone(self.embedding(tokens), state)
        return self.head(h), state


def test_policy_gradient_kl_is_zero_at_the_base_and_the_reward_rises():
    torch.manual_seed(0)
    svf = SVF(CountingLM(), targets=["backbone.*", "head.weight"])
    prompts = torch.randint(0, 6, (4, 5))
    completions = sample_completions(svf, prompts, 3, generator=torch.Generator().manual_seed(0))
    assert completions.shape == (4, 3) and completions.max() < 6
    _, stats = policy_gradient_loss(svf, prompts, completions, torch.ones(4))
    assert stats.kl == pytest.approx(0.0, abs=1e-9)

    answer = torch.full((8, 2), 3)  # reward: the completion starts with "3 3"

    def batch(step):
        return torch.randint(0, 6, (8, 5), generator=torch.Generator().manual_seed(step)), answer

    def reward(completions, answers):
        return (completions[:, :2] == answers).float().mean(1)

    history = train_with_reward(svf, batch, reward, steps=40, samples_per_prompt=2, lr=0.1)
    first = sum(h.reward for h in history[:5]) / 5
    last = sum(h.reward for h in history[-5:]) / 5
    assert last > first + 0.2
    assert history[-1].kl > 0
    assert exact_match_reward(torch.tensor([[3, 3, 1]]), torch.tensor([[3, 3]])).item() == 1.0


def test_the_policy_gradient_baseline_is_the_mean_of_each_prompts_samples():
    """Rows of one prompt form a group: a prompt every sample solves gives no signal, and
    the gradient equals the one from advantages computed by hand per group."""
    torch.manual_seed(0)
    svf = SVF(CountingLM(), targets=["backbone.*", "head.weight"])
    prompts = torch.randint(0, 6, (2, 5)).repeat_interleave(2, dim=0)  # 2 prompts x 2 samples
    completions = torch.randint(0, 6, (4, 3))
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0])  # the first prompt solved by both samples

    def grads(loss):
        svf.zero_grad()
        loss.backward()
        return [p.grad.clone() for p in svf.parameters()]

    loss, _ = policy_gradient_loss(svf, prompts, completions, rewards, 0.0, group_size=2)
    # by hand: advantages (0, 0, 0.5, -0.5), so only the second prompt's rows contribute
    tokens = torch.cat([prompts, completions], dim=1)
    logits, _ = svf(tokens[:, :-1])
    logp = torch.log_softmax(logits[:, 4:].float(), dim=-1)
    chosen = logp.gather(-1, completions.unsqueeze(-1)).squeeze(-1).sum(1)
    by_hand = -(torch.tensor([0.0, 0.0, 0.5, -0.5]) * chosen).mean()
    for a, b in zip(grads(loss), grads(by_hand)):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="does not divide"):
        policy_gradient_loss(svf, prompts, completions, rewards, group_size=3)


@pytest.mark.parametrize("which", ["forecaster", "dna"])
def test_features_are_per_example_for_models_that_run_several_sequences_each(which):
    """The forecaster runs C channel sequences per example ([B*C], example-major), the
    bidirectional DNA classifier two directions ([2B], direction-major): either way an
    example's features must not depend on the other examples of its batch."""
    from titans_seq.adapt import deepest_mixer_features

    torch.manual_seed(0)
    if which == "forecaster":
        from titans_seq.domains.forecasting.model import SimbaForecaster

        model = SimbaForecaster(3, 16, 4, dim=8, depth=1, heads=1, patch_len=4, stride=4).eval()
        batch = torch.randn(4, 16, 3)

        def forward(m, b):
            return m(b)

        def one(i):
            return batch[i : i + 1]
    else:
        from titans_seq.domains.genomics.model import DNAClassifierNet

        model = DNAClassifierNet(2, dim=8, depth=1, heads=1, rc_mode="conjoin").eval()
        ids = torch.randint(1, 5, (4, 20))
        lengths = torch.tensor([20, 20, 20, 20])
        batch = (ids, lengths)

        def forward(m, b):
            return m(*b)

        def one(i):
            return (ids[i : i + 1], lengths[i : i + 1])

    together = deepest_mixer_features(model, batch, forward)
    alone = torch.cat([deepest_mixer_features(model, one(i), forward) for i in range(4)])
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)


def test_passkey_prompts_drive_the_reward_objective_of_a_titans_lm():
    from titans_seq.domains.lm.evals.passkey import PasskeyRetrieval
    from titans_seq.domains.lm.model import TitansLM

    task = PasskeyRetrieval(digits=2, seed=0)
    prompts, answers = task.prompts_and_answers(128, range(3))
    assert prompts.shape == (3, 126) and answers.shape == (3, 2)
    full = task.batch(128, range(3)).inputs
    assert torch.equal(torch.cat([prompts, answers], 1), full)

    torch.manual_seed(0)
    lm = TitansLM(256, dim=16, depth=1, heads=2, mixer="lmm")
    svf = SVF(lm)
    before = {n: p.detach().clone() for n, p in svf.named_parameters()}
    history = train_with_reward(
        svf,
        lambda step: task.prompts_and_answers(128, range(3 * step, 3 * step + 3)),
        exact_match_reward,
        steps=2,
        samples_per_prompt=2,
    )
    assert len(history) == 2 and all(0.0 <= h.reward <= 1.0 for h in history)
    assert any(not torch.equal(p, before[n]) for n, p in svf.named_parameters())
