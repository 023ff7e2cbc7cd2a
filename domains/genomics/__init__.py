"""DNA sequence classification (`titans_seq.domains.genomics`)."""

from .tokenizer import DNATokenizer, reverse_complement, reverse_complement_ids

__all__ = ["DNATokenizer", "reverse_complement", "reverse_complement_ids"]
