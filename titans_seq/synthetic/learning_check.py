"""The recall learning check: a recipe small enough to train on one CPU thread in seconds.

4 key-value pairs, 16 filler tokens, 4 queries (T = 32): every answer lies at least 17
tokens before its query, beyond an attention window or MAC segment of 8. A 2-block
`TokenModel` (D = 32, one head) trained through the shared loop on 32 fresh sequences per
step learns it with any Titans memory; sliding-window attention alone stays at chance.
`tests/test_recall_learning.py` and `benchmarks/studies/hybrid_variants.py` train from it.
"""

from __future__ import annotations

LEARNING_CHECK_TASK = dict(vocab_size=32, num_pairs=4, gap=16, num_filler_tokens=4)
LEARNING_CHECK_WINDOW = 8  # < gap + 1: no answer is ever inside a query's window


def learning_check_recipe(
    mixer: str,
    mixer_options: dict,
    out_dir,
    steps: int = 300,
    seed: int = 0,
    name: str | None = None,
) -> dict:
    """The raw recipe (for `titans_seq.training.from_dict`) of one learning check run:
    `mixer` with `mixer_options`, `steps` steps of 32 sequences, each seen once; `seed`
    sets the initialisation and batch order (the data stay the same)."""
    return {
        "name": name or f"recall_{mixer}",
        "task": "associative_recall",
        "model": {
            "dim": 32,
            "depth": 2,
            "heads": 1,
            "mixer": mixer,
            "mixer_options": dict(mixer_options),
        },
        "data": {**LEARNING_CHECK_TASK, "num_train": 32 * steps, "num_val": 256, "seed": 1234},
        "optim": {
            "lr": 1.5e-2,
            "weight_decay": 0.01,
            "betas": [0.9, 0.98],
            "warmup_steps": steps // 10,
            "min_lr_ratio": 0.1,
        },
        "train": {
            "max_steps": steps,
            "batch_size": 32,
            "seed": seed,
            "precision": "fp32",
            "device": "cpu",
            "log_every": 50,
            "checkpoint_every": steps,
            "out_dir": str(out_dir),
            "progress": False,
            "tensorboard": False,
            "plot": False,
        },
        "eval": {"every": steps, "batch_size": 256, "metric": "accuracy", "mode": "max"},
    }
