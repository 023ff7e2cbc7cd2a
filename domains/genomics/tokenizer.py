"""Character tokenizer for DNA: A, C, G, T, N (+ padding), with explicit IUPAC handling.

Token ids: 0 = padding, 1..5 = A, C, G, T, N. Lowercase letters (soft-masked repeats in
genome FASTA files) are upper-cased by default; `keep_mask=True` also returns a boolean
mask of the soft-masked positions. IUPAC ambiguity codes (R, Y, S, W, K, M, B, D, H, V)
become N, or raise in `strict` mode. Any other character raises a ValueError naming the
sequence and the position, because silently mapping it would corrupt the input.
"""

from __future__ import annotations

import numpy as np
import torch

PAD_ID = 0
BASES = "ACGTN"
VOCAB_SIZE = len(BASES) + 1
IUPAC_AMBIGUOUS = "RYSWKMBDHV"
# complement of every IUPAC code (ambiguity codes complement to the code of the complement set)
_COMPLEMENT = str.maketrans("ACGTNRYSWKMBDHVacgtnryswkmbdhv", "TGCANYRSWMKVHDBtgcanyrswmkvhdb")
# id -> id of the complementary base (padding stays padding, N stays N)
COMPLEMENT_IDS = torch.tensor([PAD_ID, 4, 3, 2, 1, 5])


def reverse_complement(sequence: str) -> str:
    """Reverse complement over the full IUPAC alphabet; case is preserved ('acgT' -> 'Acgt')."""
    unknown = set(sequence) - set("ACGTNRYSWKMBDHVacgtnryswkmbdhv")
    if unknown:
        raise ValueError(f"cannot reverse-complement characters {sorted(unknown)}")
    return sequence.translate(_COMPLEMENT)[::-1]


def reverse_complement_ids(ids: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Reverse complement of padded id batches [B, T] (right padding stays on the right)."""
    comp = COMPLEMENT_IDS.to(ids.device)[ids]
    if lengths is None:
        return comp.flip(-1)
    T = ids.shape[-1]
    positions = torch.arange(T, device=ids.device)
    source = (lengths.unsqueeze(-1) - 1 - positions).clamp_min(0)  # [B, T]
    flipped = comp.gather(-1, source)
    return torch.where(positions < lengths.unsqueeze(-1), flipped, torch.full_like(ids, PAD_ID))


class DNATokenizer:
    """Maps DNA strings to ids 1..5 (A, C, G, T, N), 0 being padding."""

    def __init__(self, strict: bool = False, keep_mask: bool = False):
        self.strict = strict
        self.keep_mask = keep_mask
        table = np.full(256, -1, dtype=np.int64)
        for i, base in enumerate(BASES, start=1):
            table[ord(base)] = table[ord(base.lower())] = i
        if not strict:
            for code in IUPAC_AMBIGUOUS:
                table[ord(code)] = table[ord(code.lower())] = BASES.index("N") + 1
        self._table = table

    def encode(self, sequence: str, name: str = "sequence"):
        """str -> LongTensor [T] (and a bool mask [T] of lowercase positions if keep_mask)."""
        if not isinstance(sequence, str):
            raise TypeError(f"{name}: expected a str, got {type(sequence).__name__}")
        if len(sequence) == 0:
            raise ValueError(f"{name} is empty")
        # one byte per character, so byte positions are character positions; characters
        # outside latin-1 become '?' and are reported below like any other unknown character
        raw = np.frombuffer(sequence.encode("latin-1", errors="replace"), dtype=np.uint8)
        ids = self._table[raw]
        bad = np.flatnonzero(ids < 0)
        if bad.size:
            pos = int(bad[0])
            char = sequence[pos]
            kind = (
                "IUPAC ambiguity code (strict mode)"
                if char.upper() in IUPAC_AMBIGUOUS
                else "character"
            )
            raise ValueError(
                f"{name}: unknown {kind} {char!r} at position {pos}; allowed: A, C, G, T, N"
                + ("" if self.strict else f" and IUPAC codes {IUPAC_AMBIGUOUS}")
                + " (either case)"
            )
        ids = torch.from_numpy(ids)
        if self.keep_mask:
            return ids, torch.from_numpy((raw >= ord("a")) & (raw <= ord("z")))
        return ids

    def batch(self, sequences, names=None, max_len: int | None = None):
        """Encode and right-pad: returns (ids [B, T], lengths [B]); T = longest (<= max_len)."""
        names = names or [f"sequence {i}" for i in range(len(sequences))]
        encoded = [self.encode(s, n) for s, n in zip(sequences, names)]
        if self.keep_mask:
            encoded = [e[0] for e in encoded]
        if max_len is not None:
            encoded = [e[:max_len] for e in encoded]
        lengths = torch.tensor([len(e) for e in encoded])
        ids = torch.full((len(encoded), int(lengths.max())), PAD_ID, dtype=torch.long)
        for i, e in enumerate(encoded):
            ids[i, : len(e)] = e
        return ids, lengths

    def decode(self, ids) -> str:
        return "".join(BASES[i - 1] for i in torch.as_tensor(ids).tolist() if i != PAD_ID)
