"""GenomicsBenchmarks data: registry entries, the mirrored test splits, every loader
(folder layout, CSV/TSV, FASTA/FASTQ, coordinates + reference genome), re-splitting and the
bad-input errors."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np
import pytest

import titans_seq.data as tsd
from titans_seq.data import DataError, SequenceDataset
from titans_seq.data.genomics import load_benchmark_archive

MIRROR = tsd.data_dirs()[0] if tsd.data_dirs() else None
needs_mirror = pytest.mark.skipif(
    MIRROR is None or not (MIRROR / "genomics").is_dir(),
    reason="the offline data mirror ($TITANS_SEQ_DATA) with genomics/ is not available",
)
BENCHMARKS = [
    "demo_coding_vs_intergenomic_seqs",
    "demo_human_or_worm",
    "dummy_mouse_enhancers_ensembl",
    "human_enhancers_cohn",
    "human_enhancers_ensembl",
    "human_ensembl_regulatory",
    "human_nontata_promoters",
    "human_ocr_ensembl",
]


def write(path: Path, text: str, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """Empty data dir and cache, downloads forbidden, no ~/.genomic_benchmarks."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    monkeypatch.setenv("TITANS_SEQ_DATA", str(data))
    monkeypatch.setenv("TITANS_SEQ_CACHE", str(cache))
    monkeypatch.setenv("TITANS_SEQ_OFFLINE", "1")
    monkeypatch.setattr("titans_seq.data.genomics.PACKAGE_CACHE", tmp_path / "no_package_cache")
    return data, cache


@pytest.fixture
def mirror_only(tmp_path, monkeypatch):
    """Keep $TITANS_SEQ_DATA (the mirror) but hide the user's cache and extracted copies."""
    monkeypatch.setenv("TITANS_SEQ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr("titans_seq.data.genomics.PACKAGE_CACHE", tmp_path / "no_package_cache")


# ---------------------------------------------------------------- registry


def test_all_eight_benchmarks_are_registered_with_sources_and_split_sizes():
    names = tsd.list_datasets()
    for name in BENCHMARKS:
        assert name in names
        entry = tsd.get_dataset(name)
        assert entry.file == f"genomics/{name}_v0.zip"
        zenodo = f"https://zenodo.org/records/16605299/files/{name}_v0.zip?download=1"
        assert entry.urls[0] == zenodo
        assert entry.urls[1].startswith("https://drive.google.com/uc?export=download&id=")
        assert entry.md5 is None  # no published checksum of the archives
        assert entry.protocol == "genomic_benchmarks" and entry.loader is not None
        info = entry.info
        assert info["num_classes"] == len(info["classes"]) and info["train"] > info["test"]
        assert list(info["classes"]) == sorted(info["classes"])
    regulatory = tsd.get_dataset("human_ensembl_regulatory").info
    assert regulatory["classes"] == ("enhancer", "ocr", "promoter")
    # published totals (train + test): 27791, 36131, 289061, 1210
    sizes = {
        n: tsd.get_dataset(n).info["train"] + tsd.get_dataset(n).info["test"] for n in BENCHMARKS
    }
    assert sizes["human_enhancers_cohn"] == 27791
    assert sizes["human_nontata_promoters"] == 36131
    assert sizes["human_ensembl_regulatory"] == 289061
    assert sizes["dummy_mouse_enhancers_ensembl"] == 1210


def test_mirrored_test_splits_are_registered_with_their_md5():
    cohn = tsd.get_dataset("human_enhancers_cohn.test")
    assert cohn.file == "genomics/human_enhancers_cohn.test.csv.gz"
    assert cohn.md5 == "c8c0f3d5308973a01127edd50c879718"
    assert tsd.get_dataset("human_nontata_promoters.test").md5 == (
        "1bbffc23bb667ef2c5dbab30efacc7fe"
    )
    assert cohn.info["label_encoding"] == {0: "negative", 1: "positive"}


def test_coordinate_urls_point_at_the_per_class_tables():
    urls = tsd.coordinate_urls("human_ensembl_regulatory", "test")
    assert list(urls) == ["enhancer", "ocr", "promoter"]
    assert urls["ocr"] == (
        "https://raw.githubusercontent.com/ML-Bioinfo-CEITEC/genomic_benchmarks/main/"
        "datasets/human_ensembl_regulatory/test/ocr.csv.gz"
    )
    with pytest.raises(KeyError, match="unknown GenomicsBenchmarks"):
        tsd.coordinate_urls("nope", "test")


# ---------------------------------------------------------------- the mirror


@needs_mirror
@pytest.mark.parametrize(
    "name, rows, counts, length",
    [
        ("human_enhancers_cohn", 6948, {"negative": 3474, "positive": 3474}, 500),
        ("human_nontata_promoters", 9034, {"negative": 4119, "positive": 4915}, 251),
    ],
)
def test_mirrored_test_split_loads_through_the_registry(name, rows, counts, length, mirror_only):
    entry = tsd.get_dataset(f"{name}.test")
    path = tsd.dataset_path(entry, download=False, verify=True)  # md5 of the content
    data = entry.load(path)
    assert len(data) == rows == entry.info["rows"]
    assert data.classes == ("negative", "positive")
    assert data.class_counts() == counts
    assert tsd.check_classification(data) == counts
    assert {len(s) for s in data.sequences} == {length}
    # the by-name loader finds the same table (no extracted folder, no archive offline)
    same = tsd.load_genomic_benchmark(name, "test", download=False)
    assert same.sequences == data.sequences and np.array_equal(same.labels, data.labels)
    assert same.source.startswith(f"{name}/test")
    assert tsd.load_genomic_benchmark(f"{name}.test", "test").names == data.names


@needs_mirror
def test_mirror_resplit_is_stratified_and_reproducible(mirror_only):
    data = tsd.load_genomic_benchmark("human_nontata_promoters", "test", download=False)
    train, val, test = tsd.train_val_test_resplit(data, seed=0)
    assert (len(train), len(val), len(test)) == (6323, 904, 1807)
    again = tsd.train_val_test_resplit(data, seed=0)
    assert again[1].names == val.names
    assert "resplit seed=0: val" in val.source


# ---------------------------------------------------------------- folder layout


def make_layout(root: Path, split: str, classes: dict[str, list[str]]) -> Path:
    for cls, seqs in classes.items():  # dict order: deliberately not sorted
        for i, seq in enumerate(seqs):
            write(root / split / cls / f"{i}.txt", seq + "\n")
    return root


def test_folder_layout_sorts_classes_and_files(tmp_path, monkeypatch):
    root = make_layout(
        tmp_path / "bench",
        "train",
        {
            "positive": ["A" * i for i in range(1, 12)],  # files 0..10: 10.txt sorts last
            "negative": ["CG", "GC"],
            "enhancer": ["TTT"],
        },
    )
    real_iterdir = Path.iterdir

    def reverse_iterdir(self):  # the worst file-system order: reversed
        return iter(sorted(real_iterdir(self), reverse=True))

    monkeypatch.setattr(Path, "iterdir", reverse_iterdir)
    data = tsd.load_benchmark_folder(root, "train")
    assert data.classes == ("enhancer", "negative", "positive")
    assert data.names[:4] == ["enhancer/0", "negative/0", "negative/1", "positive/0"]
    assert data.names[-2:] == ["positive/9", "positive/10"]  # numeric, not 1, 10, 2
    assert data.sequences[-1] == "A" * 11 and data.sequences[1] == "CG"  # newline stripped
    assert data.labels.tolist() == [0, 1, 1] + [2] * 11
    assert data.class_counts() == {"enhancer": 1, "negative": 2, "positive": 11}
    assert data[1] == ("CG", 1)


def test_folder_layout_errors_name_the_problem(tmp_path):
    root = make_layout(tmp_path / "b", "train", {"negative": ["ACGT"], "positive": ["AC"]})
    with pytest.raises(DataError, match=r"test does not exist.*found \['train'\]"):
        tsd.load_benchmark_folder(root, "test")
    (root / "train" / "other").mkdir()
    with pytest.raises(DataError, match="class 'other' has no .txt"):
        tsd.load_benchmark_folder(root, "train")
    (root / "train" / "other").rmdir()
    write(root / "train" / "positive" / "1.txt", "\n")
    with pytest.raises(DataError, match="sequence 'positive/1' is empty"):
        tsd.load_benchmark_folder(root, "train")
    write(root / "train" / "positive" / "1.txt", "ACGU")
    with pytest.raises(DataError, match=r"'positive/1': unknown character 'U' at position 3"):
        tsd.load_benchmark_folder(root, "train")


def test_benchmark_archive_is_extracted_once_into_the_cache(tmp_path, isolated):
    _, cache = isolated
    layout = make_layout(tmp_path / "src" / "toy", "test", {"pos": ["ACGT"], "neg": ["GG"]})
    archive = tmp_path / "toy_v0.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        for path in sorted(layout.rglob("*.txt")):
            bundle.write(path, path.relative_to(layout.parent).as_posix())
    data = load_benchmark_archive(archive, "test")
    assert data.classes == ("neg", "pos") and data.sequences == ["GG", "ACGT"]
    assert (cache / "genomics" / "toy" / "test" / "pos" / "0.txt").is_file()
    archive.unlink()
    write(archive, "<html>Google Drive can't scan this file for viruses</html>")
    with pytest.raises(DataError, match="not a zip archive"):
        load_benchmark_archive(archive, "test")


def test_load_by_name_prefers_an_extracted_folder(isolated):
    data_dir, _ = isolated
    root = data_dir / "genomics" / "dummy_mouse_enhancers_ensembl"
    make_layout(root, "train", {"positive": ["ACGTACGT"], "negative": ["TTTT", "GGGG"]})
    data = tsd.load_genomic_benchmark("dummy_mouse_enhancers_ensembl", "train")
    assert data.classes == ("negative", "positive") and len(data) == 3
    # a folder whose classes are not the benchmark's is refused
    make_layout(root, "test", {"positive": ["ACGT"], "weird": ["ACGT"]})
    with pytest.raises(DataError, match=r"differ from the benchmark's \('negative', 'positive'\)"):
        tsd.load_genomic_benchmark("dummy_mouse_enhancers_ensembl", "test")
    with pytest.raises(tsd.DatasetNotFoundError, match="An extracted copy is accepted too"):
        tsd.load_genomic_benchmark("human_ocr_ensembl", "test")


# ---------------------------------------------------------------- CSV / TSV


@pytest.mark.parametrize(
    "name, sep, gz",
    [("t.csv", ",", False), ("t.csv.gz", ",", True), ("t.tsv", "\t", False), ("t.txt", "\t", True),
     ("t.csv", ";", False)],  # a spreadsheet's ';'-separated export
)  # fmt: skip
def test_sequence_tables_csv_tsv_gzip_and_sniffing(tmp_path, name, sep, gz):
    text = sep.join(["seq", "label"]) + "\n"
    text += "".join(f"{s}{sep}{lab}\n" for s, lab in [("ACGT", "b"), ("NA", "a"), ("GGC", "b")])
    data = tsd.read_sequence_table(write(tmp_path / name, text, gz=gz))
    assert data.sequences == ["ACGT", "NA", "GGC"]  # "NA" is a sequence, not a missing value
    assert data.classes == ("a", "b") and data.labels.tolist() == [1, 0, 1]
    assert data.names == ["row 1", "row 2", "row 3"]


def test_sequence_table_label_forms(tmp_path):
    path = write(tmp_path / "n.csv", "id,seq,label\nx,ACGT,10\ny,ACGT,2\nz,AC,2\n")
    data = tsd.read_sequence_table(path, name_column="id")
    assert data.classes == ("2", "10")  # integers sort numerically
    assert data.labels.tolist() == [1, 0, 0] and data.names == ["x", "y", "z"]
    path = write(tmp_path / "i.csv", "seq,label\nACGT,1\nACGT,0\n")
    data = tsd.read_sequence_table(path, classes=("negative", "positive"))
    assert data.label_names == ["positive", "negative"]
    with pytest.raises(DataError, match=r"'row 1' has label '1', which is neither a class"):
        tsd.read_sequence_table(path, classes=("only",))
    unlabeled = tsd.read_sequence_table(path, label_column=None)
    assert unlabeled.labels is None and unlabeled.label_names is None


def test_sequence_table_errors(tmp_path):
    with pytest.raises(DataError, match="the file is empty"):
        tsd.read_sequence_table(write(tmp_path / "e.csv", ""))
    with pytest.raises(DataError, match="header but no rows"):
        tsd.read_sequence_table(write(tmp_path / "h.csv.gz", "seq,label\n", gz=True))
    with pytest.raises(DataError, match=r"missing column\(s\) \['label'\]; found \['seq', 'lab'\]"):
        tsd.read_sequence_table(write(tmp_path / "c.csv", "seq,lab\nACGT,1\n"))
    with pytest.raises(DataError, match=r"b\.csv: sequence 'row 2' is empty"):
        tsd.read_sequence_table(write(tmp_path / "b.csv", "seq,label\nACGT,1\n,0\n"))
    with pytest.raises(DataError, match=r"'row 1': unknown character '-' at position 2"):
        tsd.read_sequence_table(write(tmp_path / "g.csv", "seq,label\nAC-GT,1\n"))
    with pytest.raises(DataError, match="'row 1' has no label"):
        tsd.read_sequence_table(write(tmp_path / "l.csv", "seq,label\nACGT,\n"))


# ---------------------------------------------------------------- FASTA / FASTQ

FASTA = """>s1 label=enhancer src=a
ACGTNNacgt
>s2 label=background
GGCC
TTAA
>s3 label=enhancer
RYKM
"""


@pytest.mark.parametrize("gz", [False, True])
def test_fasta_with_header_labels(tmp_path, gz):
    data = tsd.load_fasta(write(tmp_path / ("x.fa.gz" if gz else "x.fa"), FASTA, gz=gz))
    assert data.names == ["s1", "s2", "s3"]
    assert data.sequences == ["ACGTNNacgt", "GGCCTTAA", "RYKM"]  # case and IUPAC kept
    assert data.classes == ("background", "enhancer") and data.labels.tolist() == [1, 0, 1]


def test_fasta_label_field_and_pattern(tmp_path):
    path = write(tmp_path / "f.fasta", ">a|pos|x\nACGT\n>b|neg|y\nGGGG\n")
    by_field = tsd.load_fasta(path, label_field=1, field_sep="|")
    assert by_field.label_names == ["pos", "neg"]
    by_pattern = tsd.load_fasta(path, label_pattern=r"\|(?P<label>\w+)\|")
    assert by_pattern.label_names == ["pos", "neg"]
    with pytest.raises(DataError, match=r"2 of 2 records have no label \(pattern"):
        tsd.load_fasta(path, label_pattern=r"class=(\w+)")


def test_fasta_per_class_files_and_unlabeled(tmp_path):
    pos = write(tmp_path / "pos.fa.gz", ">p1\nACGT\n>p2\nCCCC\n", gz=True)
    neg = write(tmp_path / "neg.fna", ">n1\nTTTT\n")
    data = tsd.load_fasta_classes({"pos": pos, "neg": neg})
    assert data.classes == ("neg", "pos") and data.names == ["n1", "p1", "p2"]
    assert data.labels.tolist() == [0, 1, 1]
    assert tsd.load_fasta(pos).labels is None  # no header labels: unlabeled


@pytest.mark.parametrize("gz", [False, True])
def test_fastq_reads_unlabeled(tmp_path, gz):
    text = "@r1 lane=1\nACGTN\n+\nIIIII\n@r2\nGG\n+\n##\n"
    data = tsd.load_fastq(write(tmp_path / ("r.fq.gz" if gz else "r.fastq"), text, gz=gz))
    assert data.sequences == ["ACGTN", "GG"] and data.names == ["r1", "r2"]
    assert data.labels is None and data.classes == ()


def test_fasta_fastq_errors(tmp_path):
    with pytest.raises(DataError, match="no fasta records"):
        tsd.load_fasta(write(tmp_path / "e.fa", ""))
    with pytest.raises(DataError, match="not a valid FASTA"):
        tsd.load_fasta(write(tmp_path / "c.fa", "comment\n>a\nACGT\n"))
    with pytest.raises(DataError, match=r"sequence 'b' is empty"):
        tsd.load_fasta(write(tmp_path / "b.fa", ">a\nACGT\n>b\n>c\nAC\n"))
    with pytest.raises(
        DataError, match=r"x\.fa: sequence 'a': unknown character 'Z' at position 4"
    ):
        tsd.load_fasta(write(tmp_path / "x.fa", ">a\nACGTZ\n"))
    with pytest.raises(DataError, match=r"1 of 2 records have no label .*'b'"):
        tsd.load_fasta(write(tmp_path / "p.fa", ">a label=x\nACGT\n>b\nACGT\n"))
    with pytest.raises(DataError, match="not a valid FASTQ"):
        tsd.load_fastq(write(tmp_path / "q.fq", "@r1\nACGT\n+\nIII\n"))
    with pytest.raises(DataError, match="cannot tell FASTA from FASTQ"):
        tsd.load_fasta(write(tmp_path / "seqs.dat", ">a\nACGT\n"))


# ---------------------------------------------------------------- coordinates + genome

#            0         1         2
#            0123456789012345678901234
CHR1 = "AACCGGTTACGTACGTNNGGCCTTAA"
CHR2 = "acgtTTTTGGGGcccc"
GENOME = f">1 Ensembl-style name\n{CHR1[:13]}\n{CHR1[13:]}\n>chr2\n{CHR2}\n"


def coordinate_tables(folder: Path, gz: bool = True) -> Path:
    suffix = ".csv.gz" if gz else ".csv"
    write(
        folder / f"positive{suffix}",
        "id,region,start,end,strand\n0,chr1,0,4,+\n1,chr1,4,9,-\n2,chr2,0,6,+\n",
        gz=gz,
    )
    write(folder / f"negative{suffix}", "id,region,start,end,strand\n0,2,10,16,-\n", gz=gz)
    return folder


@pytest.mark.parametrize("genome_gz", [False, True])
def test_coordinate_loader_cuts_half_open_intervals_and_reverse_complements(tmp_path, genome_gz):
    genome = write(tmp_path / ("g.fa.gz" if genome_gz else "g.fa"), GENOME, gz=genome_gz)
    tables = coordinate_tables(tmp_path / "toy" / "test")
    data = tsd.load_coordinate_dataset(tmp_path / "toy", genome, split="test")
    assert data.classes == ("negative", "positive")
    assert data.names == ["negative/0", "positive/0", "positive/1", "positive/2"]
    assert data.sequences == [
        "ggggCC",  # table "2" -> ">chr2"; chr2[10:16] = "GGcccc", reverse complement
        "AACC",  # table "chr1" -> ">1"; chr1[0:4]: 0-based, the end excluded
        "TAACC",  # chr1[4:9] = "GGTTA" on the minus strand
        "acgtTT",  # chr2[0:6], soft-masked case kept
    ]
    assert data.labels.tolist() == [0, 1, 1, 1]
    # the same folder passed directly, and as a {class: table} mapping
    direct = tsd.load_coordinate_dataset(tables, genome)
    mapped = tsd.load_coordinate_dataset(
        {"positive": tables / "positive.csv.gz", "negative": tables / "negative.csv.gz"}, genome
    )
    assert direct.sequences == data.sequences == mapped.sequences


def test_reverse_complement_by_hand_and_against_the_tokenizer():
    genome = tsd.ReferenceGenome({"c": "AACGTTTGCA"})
    assert genome.fetch("c", 1, 6, "+") == "ACGTT"
    assert genome.fetch("c", 1, 6, "-") == "AACGT"  # ACGTT -> TTGCA reversed -> AACGT
    assert genome.fetch("c", 6, 10, "-") == "TGCA"  # TGCA is its own reverse complement
    assert genome.fetch("c", 0, 3, "-") == "GTT"
    tokenizer = pytest.importorskip("titans_seq.domains.genomics.tokenizer")
    soft = tsd.ReferenceGenome({"c": "acgTNRYkm"})
    assert soft.fetch("c", 0, 9, "-") == tokenizer.reverse_complement("acgTNRYkm")


def test_coordinate_dataset_matches_the_folder_layout_it_would_write(tmp_path):
    genome = {"chr1": CHR1, "chr2": CHR2}
    built = tsd.load_coordinate_dataset(coordinate_tables(tmp_path / "t", gz=False), genome)
    for seq, name in zip(built.sequences, built.names):  # what loc2seq writes
        write(tmp_path / "layout" / "test" / f"{name}.txt", seq)
    read = tsd.load_benchmark_folder(tmp_path / "layout", "test")
    assert (read.names, read.sequences, read.classes) == (
        built.names,
        built.sequences,
        built.classes,
    )
    assert np.array_equal(read.labels, built.labels)


def test_coordinate_single_table_with_labels(tmp_path):
    table = write(
        tmp_path / "all.tsv",
        "id\tregion\tstart\tend\tstrand\tlabel\na\tchr1\t0\t2\t+\t1\nb\tchr1\t2\t4\t-\t0\n",
    )
    data = tsd.load_coordinate_dataset(table, {"chr1": CHR1}, classes=("neg", "pos"))
    assert data.sequences == ["AA", "GG"] and data.label_names == ["pos", "neg"]
    assert data.names == ["a", "b"]


def test_coordinate_errors(tmp_path):
    genome = {"chr1": CHR1}
    header = "id,region,start,end,strand\n"
    cases = [
        (header + "7,chr1,20,40,+\n", r"row id '7'.*outside 'chr1' \(length 26\)"),
        (header + "7,chrX,0,4,+\n", r"region 'chrX' \(row id '7'\) is not in the reference"),
        (header + "7,chr1,0,4,*\n", r"row id '7' has strand '\*'"),
        (header + "7,chr1,5,5,+\n", r"row id '7' has start 5 and end 5"),
        ("id,chrom,start,end,strand\n7,chr1,0,4,+\n", r"missing column\(s\) \['region'\]"),
        (header, "header but no rows"),
        ("", "the coordinate file is empty"),
    ]
    for k, (text, message) in enumerate(cases):
        folder = tmp_path / f"case{k}"
        write(folder / "positive.csv", text)
        with pytest.raises(DataError, match=message):
            tsd.load_coordinate_dataset(folder, genome)
    (tmp_path / "none" / "train").mkdir(parents=True)
    with pytest.raises(DataError, match="no coordinate tables"):
        tsd.load_coordinate_dataset(tmp_path / "none", genome, split="train")
    with pytest.raises(DataError, match="holds no sequences"):
        tsd.ReferenceGenome(write(tmp_path / "empty.fa", ""))
    bad = tsd.ReferenceGenome({"chr1": "ACGTXX"})
    write(tmp_path / "x" / "positive.csv", header + "7,chr1,0,6,+\n")
    with pytest.raises(DataError, match=r"'positive/7': unknown character 'X' at position 4"):
        tsd.load_coordinate_dataset(tmp_path / "x", bad)


# ---------------------------------------------------------------- re-splitting and checks


def toy_dataset(counts: dict[str, int]) -> SequenceDataset:
    labels = np.concatenate([np.full(n, i) for i, n in enumerate(counts.values())])
    names = [f"s{i}" for i in range(len(labels))]
    return SequenceDataset(["ACGT"] * len(labels), labels, tuple(counts), names, "toy")


def test_resplit_is_deterministic_stratified_disjoint_and_complete():
    data = toy_dataset({"a": 500, "b": 300, "c": 7})
    parts = tsd.resplit_indices(data.labels, (0.7, 0.1, 0.2), seed=3)
    again = tsd.resplit_indices(data.labels, (0.7, 0.1, 0.2), seed=3)
    other = tsd.resplit_indices(data.labels, (0.7, 0.1, 0.2), seed=4)
    assert all(np.array_equal(p, q) for p, q in zip(parts, again))
    assert not np.array_equal(parts[0], other[0])
    joined = np.concatenate(parts)
    assert len(joined) == len(data) and len(np.unique(joined)) == len(data)  # disjoint, all
    for part, fraction in zip(parts, (0.7, 0.1, 0.2)):
        assert np.all(np.diff(part) > 0)  # original order kept
        counts = np.bincount(data.labels[part], minlength=3)
        assert np.all(np.abs(counts - fraction * np.array([500, 300, 7])) <= 1)
    train, val, test = tsd.train_val_test_resplit(data, seed=3)
    assert sorted(train.names) == sorted(data.names[i] for i in parts[0])
    assert val.class_counts() == {"a": 50, "b": 30, "c": 1}
    # shuffled within each part: the first items are not all of the first class
    assert len(set(train.labels[:50].tolist())) > 1
    assert test.classes == data.classes


def test_resplit_and_classification_checks_reject_bad_input():
    with pytest.raises(ValueError, match="summing to 1"):
        tsd.resplit_indices(np.zeros(10), (0.7, 0.2, 0.2))
    unlabeled = SequenceDataset(["ACGT"], None, (), ["a"], "u.fq")
    with pytest.raises(DataError, match="u.fq: cannot stratify unlabeled"):
        tsd.train_val_test_resplit(unlabeled)
    with pytest.raises(DataError, match="the val part .* is empty"):
        tsd.train_val_test_resplit(toy_dataset({"a": 1, "b": 1}))
    single = toy_dataset({"a": 5, "b": 0})
    with pytest.raises(DataError, match=r"toy: 1 class\(es\) present .*needs at least 2"):
        tsd.check_classification(single)
    with pytest.raises(DataError, match="unlabeled"):
        tsd.check_classification(unlabeled)
    with pytest.raises(DataError, match="2 sequences but 1 names"):
        SequenceDataset(["A", "C"], [0, 1], ("x", "y"), ["a"])
    with pytest.raises(DataError, match=r"2 sequences but labels of shape \(3,\)"):
        SequenceDataset(["A", "C"], [0, 1, 1], ("x", "y"), ["a", "b"])
    with pytest.raises(DataError, match=r"label indices must lie in \[0, 2\)"):
        SequenceDataset(["A", "C"], [0, 2], ("x", "y"), ["a", "b"])
    with pytest.raises(DataError, match="'a': unknown character 'R' at position 3"):
        tsd.validate_sequences(["ACGR"], ["a"], alphabet="acgtn")


def test_a_genomics_dataset_is_not_loaded_as_a_time_series():
    from titans_seq.data import load_timeseries

    with pytest.raises(DataError, match="genomics dataset"):
        load_timeseries("human_enhancers_cohn.test")
