"""Synthetic data for probing long-range memory, and the small token model trained on it.

    from titans_seq.synthetic import AssociativeRecall, TokenModel

The `associative_recall` task (`titans_seq.training.tasks.associative_recall`) trains on it
through the shared training loop.
"""

from .associative_recall import IGNORE_INDEX, AssociativeRecall, RecallBatch, recall_accuracy
from .token_model import TokenModel

__all__ = ["IGNORE_INDEX", "AssociativeRecall", "RecallBatch", "TokenModel", "recall_accuracy"]
