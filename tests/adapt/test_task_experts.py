"""The first pass of two-pass dispatch as Transformer² has it: an SVF classification expert
and prompt-based dispatch of a language model."""

import numpy as np
import pytest
import torch
from torch import nn

from titans_seq.adapt import (
    SVF,
    SVFTaskClassifier,
    choose_by_prompt,
    read_expert,
    run_with_experts,
    save_expert,
)
from titans_seq.backbone import Backbone


class TinyRegressor(nn.Module):
    """x [B, T, 8] -> [B, 8]: a backbone with a linear head on the last position."""

    def __init__(self):
        super().__init__()
        self.backbone = Backbone(8, 1, mixer="lmm", heads=2)
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        h, _ = self.backbone(x)
        return self.head(h[:, -1])


def task_inputs(k: int, n: int, seed: int) -> torch.Tensor:
    """Unit noise [n, 12, 8], raised by 1 on channels 0-3 (task 0) or 4-7 (task 1)."""
    x = torch.randn(n, 12, 8, generator=torch.Generator().manual_seed(seed))
    x[:, :, 4 * k : 4 * (k + 1)] += 1.0
    return x


def forward(model, batch):
    return model(batch)


def test_the_classification_expert_is_an_svf_expert_that_names_the_task(tmp_path):
    torch.manual_seed(0)
    model = TinyRegressor()
    base_state = {k: v.clone() for k, v in model.state_dict().items()}
    svf = SVF(model)
    train = [[task_inputs(k, 32, seed) for seed in (1, 2)] for k in (0, 1)]
    classifier = SVFTaskClassifier(forward, epochs=15).fit(svf, train)

    trained = classifier.expert_.z
    assert any(not torch.equal(z, torch.ones_like(z)) for z in trained.values())
    assert all(torch.equal(s.z, torch.ones_like(s.z)) for s in svf.scales.values())  # reset

    held_out = torch.cat([task_inputs(0, 50, seed=7), task_inputs(1, 50, seed=8)])
    choice = classifier.predict(svf, held_out)
    assert (choice == np.repeat([0, 1], 50)).mean() >= 0.9
    proba = classifier.predict_proba(svf, held_out)
    assert proba.shape == (100, 2) and np.allclose(proba.sum(1), 1.0)
    assert all(torch.equal(s.z, torch.ones_like(s.z)) for s in svf.scales.values())

    # only z was trained: the base's own tensors are untouched
    with svf.disabled():
        for name, value in svf.model.state_dict().items():
            if name in base_state:
                torch.testing.assert_close(value, base_state[name], rtol=0, atol=0)
    # z_c is an expert like the others: saved, read back, checked against the base
    path = save_expert(tmp_path / "classifier.safetensors", classifier.expert_)
    assert read_expert(path).task == "task classifier"
    classifier.expert_ = read_expert(path)
    assert (classifier.predict(svf, held_out) == choice).all()


def test_the_classification_expert_leaves_a_domain_head_as_the_base_has_it():
    torch.manual_seed(0)
    svf = SVF(TinyRegressor(), also_train=["head.*"])
    head = {n: p.detach().clone() for n, p in svf.extra.items()}
    train = [[task_inputs(k, 16, 3)] for k in (0, 1)]
    classifier = SVFTaskClassifier(forward, epochs=3).fit(svf, train)
    for name, param in svf.extra.items():
        torch.testing.assert_close(param.detach(), head[name], rtol=0, atol=0)
        assert param.grad is None
    assert torch.equal(classifier.expert_.extra["head.weight"], head["head.weight"])
    with pytest.raises(ValueError, match="at least 2"):
        SVFTaskClassifier(forward).fit(svf, train[:1])
    with pytest.raises(RuntimeError, match="before fit"):
        SVFTaskClassifier(forward).predict(svf, train[0][0])


class FirstTokenLM(nn.Module):
    """logits [B, T, 256] that favour, at every position, the first token of the sequence
    (plus a small, trainable-through-SVF contribution of a backbone): the likeliest label
    after any prompt is the one spelled with the input's first byte."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(256, 8)
        self.backbone = Backbone(8, 1, mixer="lmm", heads=2)
        self.out = nn.Linear(8, 256)

    def forward(self, ids, state=None):
        h, _ = self.backbone(self.embed(ids))
        favour = 8.0 * nn.functional.one_hot(ids[:, :1], 256).float()
        return 0.01 * self.out(h) + favour, None


def test_prompt_based_dispatch_picks_the_label_the_base_model_finds_likeliest():
    torch.manual_seed(0)
    svf = SVF(FirstTokenLM())
    inputs = torch.tensor([[ord("a")] * 6, [ord("b")] * 6, [ord("a"), ord("b")] * 3])
    prompt = torch.tensor(list(b" task? "))
    labels = [torch.tensor(list(b"bbb")), torch.tensor(list(b"aa"))]
    assert choose_by_prompt(svf, inputs, prompt, labels).tolist() == [1, 0, 1]

    # the expert loaded before does not take part in the first pass, and is dropped
    for s in svf.scales.values():
        s.z.data.fill_(3.0)
    assert choose_by_prompt(svf, inputs, prompt, labels).tolist() == [1, 0, 1]
    assert all(torch.equal(s.z, torch.ones_like(s.z)) for s in svf.scales.values())

    # sum against mean of the label's log-probabilities: a longer label pays per token
    neutral = torch.tensor([[ord("c")] * 6])
    short, long = torch.tensor(list(b"x")), torch.tensor(list(b"yy"))
    assert choose_by_prompt(svf, neutral, prompt, [long, short]).tolist() == [1]
    experts = [svf.expert("a"), svf.expert("b")]
    choice = choose_by_prompt(svf, inputs, prompt, labels)
    out = run_with_experts(svf, experts, choice, inputs, lambda m, b: m(b)[0])
    assert out.shape == (3, 6, 256)
    with pytest.raises(ValueError, match="at least 2 labels"):
        choose_by_prompt(svf, inputs, prompt, labels[:1])
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        choose_by_prompt(svf, inputs[0], prompt, labels)
