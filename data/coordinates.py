"""Build a sequence dataset from interval (coordinate) files and a reference genome FASTA.

This is how the GenomicsBenchmarks package itself makes its sequences (`loc2seq`): each
benchmark ships `datasets/<name>/{train,test}/<class>.csv.gz` with the columns
`id, region, start, end, strand`, and the sequence of a row is

    genome[region][start:end]                      # 0-based, half-open, as Python slicing
    reverse_complement(...) when strand == "-"

Coordinates are therefore 0-based half-open (BED convention), not the 1-based closed
intervals of GFF/VCF. A single table with a `label` column is accepted as well.

The reference may be an uncompressed FASTA, read lazily through Biopython's
`SeqIO.index` (only the chromosomes used are loaded, one at a time), or a gzipped FASTA
(read into memory, since gzip allows no random access), or a `{name: sequence}` mapping.
Region names are matched exactly first, then with the "chr" prefix added or removed,
because the benchmark tables say "chr1" where the Ensembl FASTA says "1".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from .checksums import is_gzipped
from .errors import DataError
from .sequence_dataset import SequenceDataset, encode_labels, validate_sequences
from .sequences import open_text

COORDINATE_COLUMNS = ("id", "region", "start", "end", "strand")
TABLE_SUFFIXES = (".csv.gz", ".csv", ".tsv.gz", ".tsv")


class ReferenceGenome:
    """Random access to the sequences of a reference FASTA (or a `{name: seq}` mapping).

    `fetch(region, start, end, strand)` returns `seq[start:end]` (0-based, half-open),
    reverse-complemented on the minus strand. With an uncompressed FASTA only one record is
    held in memory at a time, so fetching intervals grouped by region (as
    `load_coordinate_dataset` does) reads each chromosome once.
    """

    def __init__(
        self,
        source: str | Path | Mapping[str, str],
        *,
        rename: Callable[[str], str] | None = None,
    ):
        """
        Args:
            source: a FASTA path (plain: indexed; gzipped: loaded into memory) or a mapping.
            rename: applied to every FASTA record id, e.g. to strip the transcript version
                of Ensembl cDNA ids (`lambda i: i.split(".")[0]`).
        """
        self._rename = rename or (lambda name: name)
        self._cached: tuple[str, str] | None = None
        if isinstance(source, Mapping):
            self.source = "<in-memory reference>"
            self._records = {self._rename(k): str(v) for k, v in source.items()}
            self._index = None
        else:
            self.source = str(source)
            if not Path(source).is_file():
                raise FileNotFoundError(f"reference genome {source} is not an existing file")
            if is_gzipped(source):
                # gzip has no random access: read every record once, into memory
                with open_text(source) as handle:
                    self._records = {
                        self._rename(r.id): str(r.seq) for r in _parse_fasta(handle, source)
                    }
                self._index = None
            else:
                from Bio import SeqIO  # Biopython only where genomes are read

                try:
                    self._index = SeqIO.index(str(source), "fasta", key_function=self._rename)
                except ValueError as error:
                    raise DataError(f"{source}: cannot index the FASTA: {error}") from None
                self._records = None
        if len(self) == 0:
            raise DataError(f"{self.source}: the reference holds no sequences")

    def __len__(self) -> int:
        return len(self._index if self._index is not None else self._records)

    def names(self) -> list[str]:
        return list(self._index.keys() if self._index is not None else self._records)

    def __contains__(self, name: str) -> bool:
        return name in (self._index if self._index is not None else self._records)

    def resolve(self, region: str) -> str | None:
        """The record name that `region` refers to ("chr1" <-> "1"), or None."""
        if region in self:
            return region
        alternative = region[3:] if region.startswith("chr") else "chr" + region
        return alternative if alternative in self else None

    def sequence(self, name: str) -> str:
        """The whole sequence of record `name` (already resolved)."""
        if self._records is not None:
            return self._records[name]
        if self._cached is None or self._cached[0] != name:
            self._cached = (name, str(self._index[name].seq))
        return self._cached[1]

    def fetch(self, region: str, start: int, end: int, strand: str = "+") -> str:
        """`genome[region][start:end]`, reverse-complemented when `strand == "-"`."""
        name = self.resolve(region)
        if name is None:
            raise DataError(f"{self.source}: no sequence named {region!r}")
        chromosome = self.sequence(name)
        if not 0 <= start < end <= len(chromosome):
            raise DataError(
                f"{self.source}: interval {region}:{start}-{end} lies outside {name!r} "
                f"(length {len(chromosome)}); coordinates are 0-based, half-open"
            )
        piece = chromosome[start:end]
        if strand != "-":
            return piece
        from Bio.Seq import reverse_complement

        return reverse_complement(piece)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _parse_fasta(handle, source):
    from Bio import SeqIO

    try:
        yield from SeqIO.parse(handle, "fasta")
    except ValueError as error:
        raise DataError(f"{source}: not a valid FASTA file: {error}") from None


def read_coordinates(path: str | Path, *, label_column: str | None = None) -> pd.DataFrame:
    """Read and check one interval table (CSV or TSV, plain or gzipped).

    Required columns: id, region, start, end, strand (+ `label_column` when given).
    """
    sep = "\t" if ".tsv" in Path(path).name.lower() else ","
    try:
        with open_text(path) as handle:
            frame = pd.read_csv(handle, sep=sep, dtype={"id": str, "region": str})
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: the coordinate file is empty") from None
    required = (*COORDINATE_COLUMNS, *((label_column,) if label_column else ()))
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {list(frame.columns)} "
            f"(expected {', '.join(required)})"
        )
    if frame.empty:
        raise DataError(f"{path}: the coordinate file has a header but no rows")
    for column in ("start", "end"):
        if not pd.api.types.is_integer_dtype(frame[column]):
            raise DataError(f"{path}: column {column!r} must hold integers")
    bad = frame.index[(frame["start"] < 0) | (frame["end"] <= frame["start"])]
    if len(bad):
        row = frame.loc[bad[0]]
        raise DataError(
            f"{path}: row id {row['id']!r} has start {row['start']} and end {row['end']}; "
            "need 0 <= start < end (0-based, half-open)"
        )
    strands = ~frame["strand"].isin(["+", "-"])
    if strands.any():
        row = frame.loc[frame.index[strands][0]]
        raise DataError(f"{path}: row id {row['id']!r} has strand {row['strand']!r}; use + or -")
    return frame


def _class_tables(source, split: str | None) -> dict[str, Path]:
    """{class: table path} from a folder of `<class>.csv.gz` files or a mapping."""
    if isinstance(source, Mapping):
        return {str(c): Path(p) for c, p in source.items()}
    folder = Path(source)
    if split is not None:
        folder = folder / split
    if not folder.is_dir():
        raise DataError(f"{folder} is not a folder of per-class coordinate tables")
    tables: dict[str, Path] = {}
    for path in folder.iterdir():
        name = path.name
        for suffix in TABLE_SUFFIXES:
            if name.lower().endswith(suffix) and path.is_file():
                cls = name[: -len(suffix)]
                if cls in tables:
                    raise DataError(f"{folder}: class {cls!r} has two tables")
                tables[cls] = path
    if not tables:
        raise DataError(f"{folder}: no coordinate tables (<class>.csv.gz, .csv, .tsv) found")
    return tables


def load_coordinate_dataset(
    source: str | Path | Mapping[str, str | Path],
    genome: ReferenceGenome | str | Path | Mapping[str, str],
    *,
    split: str | None = None,
    label_column: str | None = None,
    classes: tuple[str, ...] | None = None,
    alphabet: str = "iupac",
) -> SequenceDataset:
    """Sequences of the intervals in coordinate tables, cut from a reference genome.

    Args:
        source: one of
            - a folder of per-class tables `<class>.csv.gz` (the GenomicsBenchmarks layout:
              `datasets/<name>/test`), or the benchmark folder with `split="test"`;
            - a mapping `{class: table path}`;
            - a single table file with a label column (`label_column`, default "label").
        genome: a `ReferenceGenome`, a FASTA path, or a `{name: sequence}` mapping.
        classes: class names when a single table's labels are integer indices.
        alphabet: see `validate_sequences`.

    Classes are sorted by name, rows keep their table order, and names are `<class>/<id>`,
    exactly as the benchmark's own folder layout names its `<class>/<id>.txt` files.
    """
    owned = not isinstance(genome, ReferenceGenome)
    reference = ReferenceGenome(genome) if owned else genome
    try:
        return _load(source, reference, split, label_column, classes, alphabet)
    finally:
        if owned:
            reference.close()


def _load(source, reference, split, label_column, classes, alphabet) -> SequenceDataset:
    single = not isinstance(source, Mapping) and Path(source).is_file()
    if single:
        label_column = label_column or "label"
        frame = read_coordinates(source, label_column=label_column)
        frames = [(None, Path(source), frame)]
    else:
        tables = _class_tables(source, split)
        frames = [(c, tables[c], read_coordinates(tables[c])) for c in sorted(tables)]

    sequences: list[str] = []
    names: list[str] = []
    raw_labels: list = []
    for cls, path, frame in frames:
        chunk = _fetch_all(reference, frame, path)
        sequences += chunk
        if cls is None:
            names += [str(i) for i in frame["id"]]
            raw_labels += list(frame[label_column])
        else:
            names += [f"{cls}/{i}" for i in frame["id"]]
            raw_labels += [cls] * len(frame)
    where = str(source) if not isinstance(source, Mapping) else "coordinate tables"
    validate_sequences(sequences, names, source=where, alphabet=alphabet)
    if single:
        indices, found = encode_labels(raw_labels, names, classes=classes, source=where)
    else:
        found = tuple(sorted(c for c, _, _ in frames))
        lookup = {c: i for i, c in enumerate(found)}
        indices = np.array([lookup[c] for c in raw_labels], dtype=np.int64)
    return SequenceDataset(sequences, indices, found, names, where)


def _fetch_all(reference: ReferenceGenome, frame: pd.DataFrame, path: Path) -> list[str]:
    """Cut every row of `frame`, visiting regions one at a time (each loaded once)."""
    out: list[str | None] = [None] * len(frame)
    regions = frame["region"].to_numpy()
    starts, ends = frame["start"].to_numpy(), frame["end"].to_numpy()
    strands, ids = frame["strand"].to_numpy(), frame["id"].to_numpy()
    for region in pd.unique(regions):
        rows = np.flatnonzero(regions == region)
        if reference.resolve(region) is None:
            known = reference.names()
            raise DataError(
                f"{path}: region {region!r} (row id {ids[rows[0]]!r}) is not in the reference "
                f"{reference.source} (it has {len(known)} sequences, e.g. {known[:5]})"
            )
        for row in rows:
            try:
                out[row] = reference.fetch(region, int(starts[row]), int(ends[row]), strands[row])
            except DataError as error:
                raise DataError(f"{path}: row id {ids[row]!r}: {error}") from None
    return out
