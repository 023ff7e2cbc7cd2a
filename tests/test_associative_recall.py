"""The long-gap multi-query associative recall data and the small token model.

Training on it goes through the shared loop (tests/training/test_training_recall_task.py,
tests/test_recall_learning.py)."""

import pytest
import torch

import titans_seq.mixers.attention  # noqa: F401  (registers "attention" and "swa")
from titans_seq.synthetic import IGNORE_INDEX, AssociativeRecall, TokenModel, recall_accuracy


def test_layout_and_shapes():
    task = AssociativeRecall(vocab_size=40, num_pairs=5, gap=300, num_queries=3)
    inputs, targets = task.sample(4, seed=0)
    assert task.seq_len == 2 * 5 + 300 + 2 * 3
    assert inputs.shape == targets.shape == (4, task.seq_len)
    assert inputs.dtype == targets.dtype == torch.long
    asked = (targets != IGNORE_INDEX).nonzero()[:, 1].view(4, 3)
    assert torch.equal(asked, task.query_positions.expand(4, 3))


def test_answers_are_the_values_of_earlier_keys():
    task = AssociativeRecall(vocab_size=64, num_pairs=8, gap=200)
    inputs, targets = task.sample(16, seed=3)
    n = task.num_pairs
    for row_inputs, row_targets in zip(inputs, targets):
        keys, values = row_inputs[0 : 2 * n : 2], row_inputs[1 : 2 * n : 2]
        assert len(set(keys.tolist())) == n  # distinct keys: the answer is well defined
        lookup = dict(zip(keys.tolist(), values.tolist()))
        asked_keys = []
        for position in task.query_positions.tolist():
            key = row_inputs[position].item()
            assert row_targets[position].item() == lookup[key]
            assert row_inputs[position + 1].item() == lookup[key]  # answer follows the query
            pair_index = keys.tolist().index(key)
            assert position - (2 * pair_index + 1) >= task.min_recall_distance == 201
            asked_keys.append(key)
        assert len(set(asked_keys)) == task.queries  # distinct queries


def test_token_ranges():
    task = AssociativeRecall(vocab_size=30, num_pairs=6, gap=50, num_filler_tokens=5)
    inputs, _ = task.sample(32, seed=1)
    n = task.num_pairs
    keys, values = inputs[:, 0 : 2 * n : 2], inputs[:, 1 : 2 * n : 2]
    filler = inputs[:, 2 * n : 2 * n + task.gap]
    assert (task.num_keys, task.num_values) == (12, 13)
    assert keys.min() >= 0 and keys.max() < 12
    assert values.min() >= 12 and values.max() < 25
    assert filler.min() >= 25 and filler.max() < 30
    assert task.chance_accuracy == pytest.approx(1 / 13)


def test_deterministic_given_seed_or_generator():
    task = AssociativeRecall(vocab_size=32, num_pairs=4, gap=20)
    a, b = task.sample(8, seed=7), task.sample(8, seed=7)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.inputs, task.sample(8, seed=8).inputs)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    first, second = task.sample(8, generator=g1), task.sample(8, generator=g1)
    assert not torch.equal(first.inputs, second.inputs)  # the generator advances
    assert torch.equal(first.inputs, task.sample(8, generator=g2).inputs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(vocab_size=10, num_pairs=5, num_filler_tokens=2), "do not fit in 4 key ids"),
        (dict(num_pairs=0), "num_pairs must be a positive integer"),
        (dict(gap=-1), "gap must be a non-negative integer"),
        (dict(gap=5, num_filler_tokens=0), "needs filler tokens"),
        (dict(num_pairs=4, num_queries=5), "num_queries must be in 1..num_pairs=4"),
        (dict(vocab_size=9, num_filler_tokens=8), "no room for keys and values"),
    ],
)
def test_bad_configuration(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AssociativeRecall(**kwargs)


def test_sample_needs_exactly_one_source_of_randomness():
    task = AssociativeRecall(gap=4)
    with pytest.raises(ValueError, match="exactly one of seed"):
        task.sample(2)
    with pytest.raises(ValueError, match="exactly one of seed"):
        task.sample(2, seed=0, generator=torch.Generator())
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0, seed=0)


def test_recall_accuracy_counts_only_asked_positions():
    targets = torch.full((1, 4), IGNORE_INDEX)
    targets[0, 1], targets[0, 3] = 2, 0
    logits = torch.zeros(1, 4, 3)
    logits[0, :, 2] = 1.0  # always predicts 2
    assert recall_accuracy(logits, targets) == 0.5
    with pytest.raises(ValueError, match="no position has a target"):
        recall_accuracy(logits, torch.full((1, 4), IGNORE_INDEX))


def test_token_model_shapes_and_streaming():
    torch.manual_seed(0)
    model = TokenModel(20, dim=16, depth=2, mixer="swa", mixer_options={"window": 3}, heads=2)
    tokens = torch.randint(0, 20, (2, 9))
    logits, states = model(tokens)
    assert logits.shape == (2, 9, 20) and len(states) == 2
    first, states = model(tokens[:, :4])
    rest, _ = model(tokens[:, 4:], states)
    torch.testing.assert_close(torch.cat((first, rest), 1), logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="int64 tokens"):
        model(tokens.float())
