"""FASTA / FASTQ reading (Biopython `SeqIO`) into `SequenceDataset`s.

Files may be plain or gzipped (detected from the magic bytes, whatever the name says).
Labels come from the FASTA header (a `label=<class>` token by default, a header field or a
regular expression), or from the file itself when each class has its own file. FASTQ reads
are loaded unlabeled (or with header labels, as FASTA). Every sequence is checked: an empty
record or an unknown character raises `DataError` naming the file, the record and the
position.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from .checksums import is_gzipped
from .errors import DataError
from .sequence_dataset import SequenceDataset, encode_labels, validate_sequences

FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".fas", ".ffn", ".seq")
FASTQ_SUFFIXES = (".fq", ".fastq")


def open_text(path: str | Path) -> io.TextIOBase:
    """Open a plain or gzipped text file (gzip detected from the content, not the name)."""
    if is_gzipped(path):
        return gzip.open(path, "rt", encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def guess_format(path: str | Path) -> str:
    """Return "fasta" or "fastq" from the file name (a trailing ".gz" is ignored)."""
    name = Path(path).name.lower()
    if name.endswith(".gz"):
        name = name[: -len(".gz")]
    suffix = Path(name).suffix
    if suffix in FASTQ_SUFFIXES:
        return "fastq"
    if suffix in FASTA_SUFFIXES:
        return "fasta"
    raise DataError(
        f"{path}: cannot tell FASTA from FASTQ by the name (expected one of "
        f"{', '.join(FASTA_SUFFIXES + FASTQ_SUFFIXES)}, optionally + '.gz'); pass format="
    )


def iter_records(path: str | Path, format: str | None = None) -> Iterator[tuple[str, str, str]]:
    """Yield (id, description, sequence) for every record of a FASTA or FASTQ file.

    Parser errors (text before the first '>', truncated FASTQ qualities) become a
    `DataError` naming the file.
    """
    format = format or guess_format(path)
    if format not in ("fasta", "fastq"):
        raise ValueError(f"format must be 'fasta' or 'fastq', got {format!r}")
    from Bio import SeqIO  # imported here: text and time-series users never need Biopython

    with open_text(path) as handle:
        try:
            for record in SeqIO.parse(handle, format):
                yield record.id, record.description, str(record.seq)
        except (ValueError, UnicodeDecodeError) as error:
            raise DataError(f"{path}: not a valid {format.upper()} file: {error}") from None
        except (EOFError, gzip.BadGzipFile, zlib.error) as error:
            raise DataError(f"{path}: the gzip data is truncated or damaged ({error})") from None


def _header_label(
    description: str,
    *,
    label_key: str | None,
    label_field: int | None,
    field_sep: str | None,
    label_pattern: re.Pattern | None,
) -> str | None:
    """The label in a FASTA header, or None when the header carries none."""
    if label_pattern is not None:
        match = label_pattern.search(description)
        if match is None:
            return None
        return match.group("label") if "label" in match.groupdict() else match.group(1)
    if label_field is not None:
        fields = description.split(field_sep)
        return fields[label_field].strip() if -len(fields) <= label_field < len(fields) else None
    if label_key is not None:
        prefix = label_key + "="
        for token in description.split():
            if token.startswith(prefix) and len(token) > len(prefix):
                return token[len(prefix) :]
    return None


def load_fasta(
    path: str | Path,
    *,
    label_key: str | None = "label",
    label_field: int | None = None,
    field_sep: str | None = None,
    label_pattern: str | None = None,
    classes: tuple[str, ...] | None = None,
    format: str | None = None,
    alphabet: str = "iupac",
) -> SequenceDataset:
    """Read a FASTA (or FASTQ) file; labels, if any, come from the headers.

    The label of a record is taken from, in order of precedence:
      - `label_pattern`: a regular expression searched in the header (id + description);
        its group "label" (or its first group) is the label;
      - `label_field`: the header split on `field_sep` (whitespace by default); field 0 is
        the record id, e.g. `label_field=1, field_sep="|"` for ">seq7|enhancer";
      - `label_key` (default "label"): a whitespace-separated token `label=<class>`.
    With `label_field` or `label_pattern`, every record must carry a label. With only the
    default `label_key`, a file in which no record has a label is read unlabeled, and one in
    which only some do is an error.

    Args:
        classes: the class names, when labels are integer indices into them.
        format: "fasta" or "fastq"; by default from the file name.
        alphabet: see `validate_sequences`.

    Raises:
        DataError: an empty file, an empty record, an unknown character, a missing label.
    """
    pattern = re.compile(label_pattern) if label_pattern is not None else None
    names, sequences, raw_labels = [], [], []
    for record_id, description, sequence in iter_records(path, format):
        names.append(record_id)
        sequences.append(sequence)
        raw_labels.append(
            _header_label(
                description,
                label_key=label_key,
                label_field=label_field,
                field_sep=field_sep,
                label_pattern=pattern,
            )
        )
    source = str(path)
    if not sequences:
        raise DataError(f"{source}: no {format or guess_format(path)} records found")
    validate_sequences(sequences, names, source=source, alphabet=alphabet)
    missing = [name for name, label in zip(names, raw_labels) if label is None]
    explicit = label_field is not None or pattern is not None
    if len(missing) == len(names) and not explicit:
        return SequenceDataset(sequences, None, (), names, source)
    if missing:
        how = (
            f"pattern {label_pattern!r}"
            if pattern is not None
            else f"field {label_field}"
            if label_field is not None
            else f"a '{label_key}=' token"
        )
        raise DataError(
            f"{source}: {len(missing)} of {len(names)} records have no label ({how}), "
            f"e.g. {missing[0]!r}"
        )
    indices, found = encode_labels(raw_labels, names, classes=classes, source=source)
    return SequenceDataset(sequences, indices, found, names, source)


def load_fastq(path: str | Path, *, alphabet: str = "iupac") -> SequenceDataset:
    """Read a FASTQ file (plain or gzipped) as unlabeled sequences; qualities are dropped."""
    return load_fasta(path, label_key=None, format="fastq", alphabet=alphabet)


def load_fasta_classes(
    files: Mapping[str, str | Path],
    *,
    format: str | None = None,
    alphabet: str = "iupac",
) -> SequenceDataset:
    """One FASTA (or FASTQ) file per class: `{"enhancer": "enh.fa", "background": ...}`.

    Classes are sorted by name (the mapping's order is ignored) so that the class indices
    are reproducible; records keep their file order within a class.
    """
    if not files:
        raise DataError("load_fasta_classes: no class files given")
    sequences, names, labels = [], [], []
    classes = tuple(sorted(files))
    for index, name in enumerate(classes):
        part = load_fasta(files[name], label_key=None, format=format, alphabet=alphabet)
        sequences += part.sequences
        names += part.names
        labels += [index] * len(part)
    source = ", ".join(f"{c}={files[c]}" for c in classes)
    return SequenceDataset(sequences, labels, classes, names, source)
