"""The built-in `associative_recall` task behind the synthetic recipes."""

from __future__ import annotations

import torch

from titans_seq.mixers import list_mixers
from titans_seq.synthetic import IGNORE_INDEX, recall_accuracy
from titans_seq.training import get_task, load_config
from titans_seq.training.recipe_files import list_recipes


def _small(**extra):
    overrides = {"data.num_train": 64, "data.num_val": 16, **extra}
    return load_config("synthetic/tiny", overrides)


def test_datasets_are_fixed_by_the_data_seed_and_batches_are_int64():
    task = get_task("associative_recall")
    train_a, val_a = task.build_datasets(_small())
    train_b, _ = task.build_datasets(_small(**{"train.seed": 5}))  # run seed: same data
    train_c, _ = task.build_datasets(_small(**{"data.seed": 99}))
    assert (len(train_a), len(val_a)) == (64, 16)
    batch = train_a.get_batch([3, 1, 4])
    assert batch["inputs"].dtype == batch["targets"].dtype == torch.long
    assert torch.equal(batch["inputs"], train_b.get_batch([3, 1, 4])["inputs"])
    assert not torch.equal(batch["inputs"], train_c.get_batch([3, 1, 4])["inputs"])
    assert (batch["targets"] != IGNORE_INDEX).sum(1).tolist() == [4, 4, 4]  # 4 queries each
    assert task.count_tokens(batch) == batch["inputs"].numel()


def test_evaluate_batch_sums_match_the_reference_accuracy():
    cfg = _small()
    task = get_task("associative_recall")
    torch.manual_seed(0)
    model = task.build_model(cfg).eval()
    _, val = task.build_datasets(cfg)
    batch = val.get_batch(range(16))
    with torch.no_grad():
        metrics = task.evaluate_batch(model, batch)
        logits, _ = model(batch["inputs"])
        loss, _ = task.loss(model, batch)
    correct, asked = metrics["accuracy"]
    assert asked == 16 * 4
    assert correct / asked == recall_accuracy(logits, batch["targets"])
    total, count = metrics["loss"]
    torch.testing.assert_close(torch.tensor(total / count), loss, rtol=1e-5, atol=1e-6)


def test_shipped_recipes_build_their_models_when_their_mixers_exist():
    """Mixer options in the recipes are checked by building the models (for every recipe
    whose mixers are registered; the others validate as configs in test_training_config)."""
    registered = set(list_mixers())
    built = 0
    for name in list_recipes():
        cfg = load_config(name)
        if cfg.task != "associative_recall" or cfg.model.mixer not in registered:
            continue
        model = get_task(cfg.task).build_model(cfg)
        assert sum(p.numel() for p in model.parameters()) > 0
        built += 1
    assert built >= 2  # at least the LMM recipes (tiny, associative_recall_lmm)
