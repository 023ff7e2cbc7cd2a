"""`SequenceDataset`: DNA sequences with class labels, plus the checks every loader shares.

Every genomics loader returns this one container, so the model code never needs to know
whether the data came from the GenomicsBenchmarks folder layout, a CSV, a FASTA file or a
reference genome. Labels are integer indices into `classes`; class names are sorted
(numerically when every label is an integer), so the mapping never depends on file-system
or file order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import DataError

# the tokenizer's alphabet (domains/genomics/tokenizer.py): A, C, G, T, N and the IUPAC
# ambiguity codes, either case; anything else would be silently corrupted downstream
IUPAC_DNA = "ACGTNRYSWKMBDHV"
_ALPHABETS = {"iupac": IUPAC_DNA, "acgtn": "ACGTN"}
_INVALID = {
    key: re.compile(f"[^{letters}{letters.lower()}]") for key, letters in _ALPHABETS.items()
}


@dataclass
class SequenceDataset:
    """Sequences, their labels and names.

    Attributes:
        sequences: DNA strings, as read (case preserved: lower case marks soft-masked
            repeats in genome FASTA files).
        labels: int64 array of indices into `classes`, one per sequence, or None for
            unlabeled data (FASTQ reads, a FASTA without labels).
        classes: class names; `classes[labels[i]]` is the class of sequence i.
        names: an identifier per sequence (FASTA id, `<class>/<file stem>`, `row <n>`),
            used in error messages and to trace a prediction back to its source.
        source: where the data came from (file, folder, registry name), for messages.
    """

    sequences: list[str]
    labels: np.ndarray | None
    classes: tuple[str, ...]
    names: list[str]
    source: str = field(default="", compare=False)

    def __post_init__(self):
        self.sequences = list(self.sequences)
        self.names = list(self.names)
        self.classes = tuple(str(c) for c in self.classes)
        n = len(self.sequences)
        if len(self.names) != n:
            raise DataError(
                f"{self._where()}{n} sequences but {len(self.names)} names; they must match"
            )
        if self.labels is None:
            return
        labels = np.asarray(self.labels)
        if labels.ndim != 1 or labels.shape[0] != n:
            raise DataError(
                f"{self._where()}{n} sequences but labels of shape {labels.shape}; "
                "one label per sequence is needed"
            )
        if labels.size and not np.issubdtype(labels.dtype, np.integer):
            raise DataError(f"{self._where()}labels must be integer class indices")
        labels = labels.astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= len(self.classes)):
            raise DataError(
                f"{self._where()}label indices must lie in [0, {len(self.classes)}) "
                f"for classes {self.classes}, got {labels.min()}..{labels.max()}"
            )
        self.labels = labels

    def _where(self) -> str:
        return f"{self.source}: " if self.source else ""

    def __len__(self) -> int:
        return len(self.sequences)

    def __getitem__(self, index: int) -> tuple[str, int | None]:
        """(sequence, label index) of item `index` (label None when unlabeled)."""
        label = None if self.labels is None else int(self.labels[index])
        return self.sequences[index], label

    @property
    def labeled(self) -> bool:
        return self.labels is not None

    @property
    def label_names(self) -> list[str] | None:
        """The class name of every sequence (None when unlabeled)."""
        if self.labels is None:
            return None
        return [self.classes[i] for i in self.labels]

    def class_counts(self) -> dict[str, int]:
        """Number of sequences per class, in class order (zero counts included)."""
        if self.labels is None:
            return {}
        counts = np.bincount(self.labels, minlength=len(self.classes))
        return {c: int(k) for c, k in zip(self.classes, counts)}

    def subset(self, indices: Iterable[int], source: str | None = None) -> SequenceDataset:
        """The items at `indices` (in that order), keeping all class names."""
        idx = np.asarray(list(indices), dtype=np.int64)
        return SequenceDataset(
            sequences=[self.sequences[i] for i in idx],
            labels=None if self.labels is None else self.labels[idx],
            classes=self.classes,
            names=[self.names[i] for i in idx],
            source=self.source if source is None else source,
        )

    @classmethod
    def from_raw_labels(
        cls,
        sequences: Sequence[str],
        raw_labels: Sequence | None,
        names: Sequence[str],
        *,
        classes: Sequence[str] | None = None,
        source: str = "",
    ) -> SequenceDataset:
        """Build a dataset from labels as read (class names, integers or digit strings).

        With `classes` given, a raw label may be a class name or an integer index into
        `classes` (the GenomicsBenchmarks CSV exports store 0/1 for negative/positive).
        Without it, the classes are the sorted distinct labels (numerically sorted when all
        are integers), so the label -> index mapping never depends on row order.
        """
        if raw_labels is None:
            return cls(list(sequences), None, (), list(names), source)
        indices, found = encode_labels(raw_labels, names, classes=classes, source=source)
        return cls(list(sequences), indices, found, list(names), source)


def _is_integer_label(value) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, (int, np.integer)):
        return True
    return isinstance(value, str) and value.strip().lstrip("-").isdigit()


def encode_labels(
    raw_labels: Sequence,
    names: Sequence[str],
    *,
    classes: Sequence[str] | None = None,
    source: str = "",
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Map raw labels to (int64 indices, class names); see `SequenceDataset.from_raw_labels`."""
    where = f"{source}: " if source else ""
    raw = list(raw_labels)
    for value, name in zip(raw, names):
        if value is None or (isinstance(value, float) and np.isnan(value)) or value == "":
            raise DataError(f"{where}sequence {name!r} has no label")
    if classes is not None:
        classes = tuple(str(c) for c in classes)
        lookup = {c: i for i, c in enumerate(classes)}
        indices = np.empty(len(raw), dtype=np.int64)
        for k, (value, name) in enumerate(zip(raw, names)):
            text = str(value).strip()
            if text in lookup:
                indices[k] = lookup[text]
            elif _is_integer_label(value) and 0 <= int(text) < len(classes):
                indices[k] = int(text)
            else:
                raise DataError(
                    f"{where}sequence {name!r} has label {value!r}, which is neither a class "
                    f"of {classes} nor an index 0..{len(classes) - 1}"
                )
        return indices, classes
    texts = [str(v).strip() for v in raw]
    distinct = set(texts)
    if all(_is_integer_label(v) for v in raw):
        ordered = sorted(distinct, key=int)
    else:
        ordered = sorted(distinct)
    lookup = {c: i for i, c in enumerate(ordered)}
    return np.array([lookup[t] for t in texts], dtype=np.int64), tuple(ordered)


def validate_sequences(
    sequences: Sequence[str],
    names: Sequence[str],
    *,
    source: str = "",
    alphabet: str = "iupac",
) -> None:
    """Raise `DataError` on the first empty sequence or unknown character.

    Args:
        alphabet: "iupac" (A, C, G, T, N and the IUPAC ambiguity codes, either case: what
            `DNATokenizer` accepts) or "acgtn" (only A, C, G, T, N, as the strict tokenizer).

    The message names the source, the sequence and the 0-based position of the character.
    """
    if alphabet not in _INVALID:
        raise ValueError(f"alphabet must be one of {sorted(_INVALID)}, got {alphabet!r}")
    invalid = _INVALID[alphabet]
    where = f"{source}: " if source else ""
    for sequence, name in zip(sequences, names):
        if not isinstance(sequence, str):
            raise DataError(
                f"{where}sequence {name!r} is a {type(sequence).__name__}, not a string"
            )
        if not sequence:
            raise DataError(f"{where}sequence {name!r} is empty")
        bad = invalid.search(sequence)
        if bad is not None:
            allowed = "A, C, G, T, N" + (
                " and IUPAC codes R, Y, S, W, K, M, B, D, H, V" if alphabet == "iupac" else ""
            )
            raise DataError(
                f"{where}sequence {name!r}: unknown character {bad.group()!r} at position "
                f"{bad.start()} (0-based); allowed: {allowed} (either case)"
            )


def check_classification(dataset: SequenceDataset, min_classes: int = 2) -> dict[str, int]:
    """Raise `DataError` unless `dataset` can train a classifier; returns its class counts.

    A classifier needs labels and at least `min_classes` classes that actually occur: a
    split holding a single class (a wrong folder, a filtered CSV) trains a constant model
    that still reports high accuracy on equally broken test data.
    """
    where = f"{dataset.source}: " if dataset.source else ""
    if dataset.labels is None:
        raise DataError(f"{where}the sequences are unlabeled; a classifier needs labels")
    if len(dataset) == 0:
        raise DataError(f"{where}the dataset is empty")
    counts = dataset.class_counts()
    present = [c for c, k in counts.items() if k > 0]
    if len(present) < min_classes:
        raise DataError(
            f"{where}{len(present)} class(es) present ({counts}); a classifier needs at "
            f"least {min_classes}"
        )
    return counts
