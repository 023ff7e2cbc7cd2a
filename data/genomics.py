"""GenomicsBenchmarks (Gresova et al. 2023) and other labeled DNA sequence data.

Loaders, all returning a `SequenceDataset` (sequences, int labels, sorted class names):

- `load_benchmark_folder(folder, split)`: the benchmark's own layout
  `<folder>/{train,test}/<class>/<id>.txt`, one sequence per file (what
  `genomic_benchmarks.loc2seq.download_dataset` writes to `~/.genomic_benchmarks/<name>`);
- `read_sequence_table(path)`: CSV/TSV with columns `seq,label` (plain or gzipped);
- `load_genomic_benchmark(name, split)`: a benchmark by name, from an extracted folder,
  the mirrored test-split CSV, or the published archive (downloaded and extracted);
- `train_val_test_resplit(dataset)`: a stratified, seeded 70/10/20 re-split. Only the
  official *test* splits are mirrored for offline machines, so experiments there re-split
  them and must say so.

FASTA/FASTQ reading lives in `sequences.py`, building a dataset from coordinate tables and
a reference genome in `coordinates.py`, the registry entries in `genomics_sources.py`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DataError, DatasetNotFoundError
from .files import cache_dir, data_dirs, dataset_path, find_local
from .registry import get_dataset, is_registered
from .sequence_dataset import SequenceDataset, encode_labels, validate_sequences
from .sequences import open_text
from .tables import sniff_delimiter

SPLITS = ("train", "test")
# where the genomic-benchmarks package itself stores extracted datasets
PACKAGE_CACHE = Path("~/.genomic_benchmarks")


# --------------------------------------------------------------------------- folder layout


def _natural_key(path: Path) -> tuple:
    # the benchmark names files by row id (0.txt, 1.txt, ..., 10.txt): numeric ids sort as
    # numbers so the order matches the coordinate tables; anything else sorts by name
    stem = path.stem
    return (0, int(stem), path.name) if stem.isdigit() else (1, 0, path.name)


def load_benchmark_folder(
    folder: str | Path, split: str = "train", *, alphabet: str = "iupac"
) -> SequenceDataset:
    """Read `<folder>/<split>/<class>/*.txt` (one sequence per file).

    Class folders are taken in sorted order (never file-system order, which differs between
    machines and would silently permute the label indices), and files in sorted order within
    a class (numeric stems numerically). Names are `<class>/<file stem>`; surrounding
    whitespace (a trailing newline) is stripped from each file.
    """
    split_dir = Path(folder) / split
    if not split_dir.is_dir():
        present = sorted(p.name for p in Path(folder).iterdir()) if Path(folder).is_dir() else []
        raise DataError(
            f"{split_dir} does not exist; expected <folder>/{split}/<class>/*.txt"
            + (f" (found {present})" if present else "")
        )
    class_dirs = sorted(
        (p for p in split_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.name,
    )
    if not class_dirs:
        raise DataError(f"{split_dir}: no class folders found")
    sequences, names, labels = [], [], []
    for index, class_dir in enumerate(class_dirs):
        files = sorted(
            (p for p in class_dir.iterdir() if p.suffix == ".txt" and p.is_file()),
            key=_natural_key,
        )
        if not files:
            raise DataError(f"{class_dir}: class {class_dir.name!r} has no .txt sequence files")
        for path in files:
            sequences.append(path.read_text(encoding="utf-8").strip())
            names.append(f"{class_dir.name}/{path.stem}")
        labels += [index] * len(files)
    validate_sequences(sequences, names, source=str(split_dir), alphabet=alphabet)
    classes = tuple(p.name for p in class_dirs)
    return SequenceDataset(sequences, labels, classes, names, str(split_dir))


# --------------------------------------------------------------------------- CSV / TSV


def _delimiter(path: Path, first_line: str) -> str:
    """Tab for .tsv/.tab files; else the header's (`;`-separated .csv files included), ","
    for a one-column header."""
    name = path.name.lower().removesuffix(".gz")
    if name.endswith((".tsv", ".tab")):
        return "\t"
    return sniff_delimiter(first_line)


def read_sequence_table(
    path: str | Path,
    *,
    seq_column: str = "seq",
    label_column: str | None = "label",
    name_column: str | None = None,
    sep: str | None = None,
    classes: Sequence[str] | None = None,
    alphabet: str = "iupac",
) -> SequenceDataset:
    """Read a CSV/TSV table of sequences (plain or gzipped), e.g. columns `seq,label`.

    Args:
        seq_column, label_column: column names; `label_column=None` reads unlabeled data.
        name_column: a column of sequence names; default "row <n>" (1-based data row).
        sep: the delimiter; default tab for .tsv/.tab, else sniffed from the header.
        classes: class names when the labels are integer indices (the GenomicsBenchmarks
            exports store 0/1 for negative/positive); default: the sorted distinct labels.
        alphabet: see `validate_sequences`.

    Every value is read as text (no NA guessing: "NA" is a valid 2-mer).
    """
    path = Path(path)
    with open_text(path) as handle:
        first_line = handle.readline()
        if not first_line.strip():
            raise DataError(f"{path}: the file is empty")
        handle.seek(0)
        delimiter = sep or _delimiter(path, first_line)
        frame = pd.read_csv(handle, sep=delimiter, dtype=str, keep_default_na=False)
    wanted = [c for c in (seq_column, label_column, name_column) if c is not None]
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise DataError(
            f"{path}: missing column(s) {missing}; found {list(frame.columns)} "
            f"(delimiter {delimiter!r})"
        )
    if frame.empty:
        raise DataError(f"{path}: the table has a header but no rows")
    sequences = frame[seq_column].str.strip().tolist()
    if name_column is not None:
        names = frame[name_column].tolist()
    else:
        names = [f"row {i + 1}" for i in range(len(frame))]
    validate_sequences(sequences, names, source=str(path), alphabet=alphabet)
    if label_column is None:
        return SequenceDataset(sequences, None, (), names, str(path))
    indices, found = encode_labels(
        frame[label_column].tolist(), names, classes=classes, source=str(path)
    )
    return SequenceDataset(sequences, indices, found, names, str(path))


# --------------------------------------------------------------------------- archives


def extract_benchmark_archive(archive: str | Path, dest: str | Path | None = None) -> Path:
    """Unpack a published benchmark archive (`<name>_v0.zip`) and return its dataset folder.

    The archive holds `<name>/{train,test}/<class>/<id>.txt`. It is extracted once, into
    `dest` (default: `<cache>/genomics/`), through a temporary folder renamed into place, so
    an interrupted extraction never leaves a half-filled dataset folder behind.
    """
    archive = Path(archive)
    if not zipfile.is_zipfile(archive):
        raise DataError(
            f"{archive} is not a zip archive (a download that returned an HTML page, e.g. a "
            "Google Drive confirmation?); delete it and fetch the archive by hand"
        )
    dest = Path(dest) if dest is not None else cache_dir() / "genomics"
    with zipfile.ZipFile(archive) as bundle:
        members = [m for m in bundle.namelist() if not m.startswith("__MACOSX/")]
        tops = {m.split("/", 1)[0] for m in members if m.strip("/")}
        name = archive.name.split("_v")[0] if len(tops) != 1 else next(iter(tops))
        target = dest / name
        if (target / "train").is_dir() or (target / "test").is_dir():
            return target
        dest.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
        try:
            # ZipFile.extract drops absolute paths and ".." components, so nothing escapes
            for member in members:
                bundle.extract(member, staging)
            unpacked = staging / name if len(tops) == 1 else staging
            try:
                os.replace(unpacked, target)
            except OSError:
                # another process finished first (target now complete), or a stale folder
                # without train/test blocks the rename: report it rather than delete it
                if not ((target / "train").is_dir() or (target / "test").is_dir()):
                    raise DataError(
                        f"cannot extract {archive} into {target}: the folder exists but holds "
                        "no train/ or test/ split; remove it and retry"
                    ) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def load_benchmark_archive(
    archive: str | Path, split: str = "train", *, alphabet: str = "iupac"
) -> SequenceDataset:
    """Registry loader of a benchmark archive: extract (once) and read `split`."""
    return load_benchmark_folder(extract_benchmark_archive(archive), split, alphabet=alphabet)


def _folder_candidates(name: str) -> list[Path]:
    roots = [*data_dirs(), cache_dir()]
    candidates = [r / sub / name for r in roots for sub in ("genomics", "")]
    return [*candidates, PACKAGE_CACHE.expanduser() / name]


def find_benchmark_folder(name: str, split: str | None = None) -> Path | None:
    """An already extracted `<name>` folder: data dirs, the cache, ~/.genomic_benchmarks.

    In each data folder `genomics/<name>` and `<name>` are tried; a folder counts only if
    it holds the `split` subfolder (either split when None).
    """
    for folder in _folder_candidates(name):
        splits = (split,) if split else SPLITS
        if any((folder / s).is_dir() for s in splits):
            return folder
    return None


def load_genomic_benchmark(
    name: str,
    split: str = "train",
    *,
    download: bool = True,
    alphabet: str = "iupac",
) -> SequenceDataset:
    """A GenomicsBenchmarks dataset split by name, e.g. `("human_enhancers_cohn", "test")`.

    Looked up in this order:
      1. an extracted folder `<name>/<split>/<class>/*.txt` (see `find_benchmark_folder`);
      2. the registered table `<name>.<split>` (the offline mirror holds the two test splits
         `human_enhancers_cohn.test` and `human_nontata_promoters.test`);
      3. the published archive `<name>` (data folders, cache, else downloaded), extracted
         into the cache.
    Class names and their order are the benchmark's (sorted), whichever source is used.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    entry = get_dataset(name)  # KeyError listing the registered names
    if "benchmark" in entry.info:  # a split table such as "human_enhancers_cohn.test"
        entry = get_dataset(entry.info["benchmark"])
    name = entry.name
    folder = find_benchmark_folder(name, split)
    if folder is not None:
        dataset = load_benchmark_folder(folder, split, alphabet=alphabet)
    elif is_registered(f"{name}.{split}") and find_local(get_dataset(f"{name}.{split}")):
        table = get_dataset(f"{name}.{split}")
        dataset = table.load(dataset_path(table, download=False), alphabet=alphabet)
    else:
        try:
            archive = dataset_path(entry, download=download)
        except DatasetNotFoundError as error:
            places = ", ".join(str(p) for p in _folder_candidates(name))
            raise DatasetNotFoundError(
                f"{error}\nAn extracted copy is accepted too: {split}/<class>/*.txt inside "
                f"any of {places}."
            ) from None
        dataset = load_benchmark_archive(archive, split, alphabet=alphabet)
    expected = entry.info.get("classes")
    if expected and dataset.classes != tuple(expected):
        raise DataError(
            f"{name} {split}: classes {dataset.classes} differ from the benchmark's "
            f"{tuple(expected)} ({dataset.source})"
        )
    dataset.source = f"{name}/{split} ({dataset.source})"
    return dataset


# --------------------------------------------------------------------------- re-splitting


def resplit_indices(
    labels: np.ndarray,
    fractions: Sequence[float] = (0.7, 0.1, 0.2),
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stratified, seeded (train, val, test) index arrays; each sorted ascending.

    Within every class (taken in index order) the members are permuted with
    `np.random.default_rng(seed)` and cut at `round(cumsum(fractions) * n_class)`, so every
    split keeps the class proportions up to one item per class, the three parts are
    disjoint and cover every item, and the same seed always gives the same split.
    """
    fractions = np.asarray(fractions, dtype=np.float64)
    if fractions.shape != (3,) or (fractions < 0).any() or abs(fractions.sum() - 1) > 1e-6:
        raise ValueError(
            f"fractions must be three non-negative numbers summing to 1, got {fractions}"
        )
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    parts: list[list[np.ndarray]] = [[], [], []]
    for cls in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == cls))
        cuts = np.round(np.cumsum(fractions) * len(members)).astype(int)
        cuts[-1] = len(members)
        for k, chunk in enumerate(np.split(members, cuts[:-1])):
            parts[k].append(chunk)
    return tuple(np.sort(np.concatenate(p)).astype(np.int64) for p in parts)


def train_val_test_resplit(
    dataset: SequenceDataset,
    fractions: Sequence[float] = (0.7, 0.1, 0.2),
    seed: int = 0,
) -> tuple[SequenceDataset, SequenceDataset, SequenceDataset]:
    """Stratified, deterministic train/val/test re-split of a labeled dataset.

    Used where only an official test split is available (the offline mirror): the three
    parts come from that one split, so scores are not comparable with the published
    train-on-train / test-on-test numbers. Each part is in a seeded shuffled order (the
    source files list one class after the other, so the first items of a part sorted by
    index would all be one class).

    Raises:
        DataError: unlabeled data, or a part with a positive fraction that ends up empty.
    """
    if dataset.labels is None:
        raise DataError(f"{dataset.source}: cannot stratify unlabeled sequences")
    parts = resplit_indices(dataset.labels, fractions, seed)
    out = []
    for split, fraction, indices in zip(("train", "val", "test"), fractions, parts):
        if fraction > 0 and len(indices) == 0:
            raise DataError(
                f"{dataset.source}: the {split} part ({fraction:.0%}) of {len(dataset)} "
                "sequences is empty; the dataset is too small for these fractions"
            )
        tag = f"{dataset.source} [resplit seed={seed}: {split}]"
        order = np.random.default_rng([seed, len(out)]).permutation(indices)
        out.append(dataset.subset(order, source=tag))
    return tuple(out)
