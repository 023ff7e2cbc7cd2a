"""DNA sequence classification (`titans_seq.domains.genomics`)."""

from .estimator import DNAClassifier
from .tokenizer import DNATokenizer, reverse_complement, reverse_complement_ids

__all__ = ["DNAClassifier", "DNATokenizer", "reverse_complement", "reverse_complement_ids"]
