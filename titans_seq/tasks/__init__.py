"""Synthetic tasks for probing long-range memory, and a minimal token model to train on them.

    from titans_seq.tasks import AssociativeRecall, train_associative_recall

Exports are resolved lazily so that `python -m titans_seq.tasks.associative_recall` does not
import its own module twice (runpy warns when a package pre-imports the module it runs).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "IGNORE_INDEX": "associative_recall",
    "AssociativeRecall": "associative_recall",
    "RecallBatch": "associative_recall",
    "RecallTrainingResult": "associative_recall",
    "recall_accuracy": "associative_recall",
    "train_associative_recall": "associative_recall",
    "TokenModel": "token_model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
