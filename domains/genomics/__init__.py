"""DNA sequence classification and next-base pretraining (`titans_seq.domains.genomics`)."""

from .baselines import GenomicsCNN, count_parameters
from .estimator import DNAClassifier
from .pretrain_task import pretrain
from .pretraining import (
    DNALanguageModel,
    load_pretrained_backbone,
    next_base_loss,
    save_pretrained,
)
from .tokenizer import DNATokenizer, reverse_complement, reverse_complement_ids

__all__ = [
    "DNAClassifier",
    "DNALanguageModel",
    "DNATokenizer",
    "GenomicsCNN",
    "count_parameters",
    "load_pretrained_backbone",
    "next_base_loss",
    "pretrain",
    "reverse_complement",
    "reverse_complement_ids",
    "save_pretrained",
]
