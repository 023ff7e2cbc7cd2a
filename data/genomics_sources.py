"""Registry entries of the eight GenomicsBenchmarks datasets (Gresova et al. 2023).

Source: the `genomic-benchmarks` package, https://github.com/ML-Bioinfo-CEITEC/genomic_benchmarks
(BMC Genomic Data 24:25, 2023). Its `loc2seq.download_dataset` fetches a per-dataset zip
archive of the sequences (`<name>/{train,test}/<class>/<id>.txt`) from its "cloud cache":
Zenodo record 16605299 in current versions, Google Drive file ids in earlier ones; both are
registered, Zenodo first. The zips have no published checksum, so their md5 is None (a
download is kept with a warning that prints its md5). Without the archive, the sequences can
be rebuilt from the coordinate tables in the repository (`datasets/<name>/<split>/<class>
.csv.gz`, see `coordinate_urls`) and the Ensembl reference genome named in the dataset's
`metadata.yaml` (see `load_coordinate_dataset`).

Split sizes are the published train/test sizes (their sums are the totals the genomic-
benchmarks README and HyenaDNA's config list). The offline mirror holds only the official
test splits of human_enhancers_cohn and human_nontata_promoters, as CSV `seq,label`, with
label 0 = negative and 1 = positive (the sorted class order; the label-1 sequences of both
files are the GC- and CpG-rich ones, as enhancers and promoters are): they are registered as
`<name>.test`.
"""

from __future__ import annotations

from functools import partial

from .genomics import load_benchmark_archive, read_sequence_table
from .registry import DatasetEntry, register_dataset

REPOSITORY = "https://github.com/ML-Bioinfo-CEITEC/genomic_benchmarks"
COORDINATES = "https://raw.githubusercontent.com/ML-Bioinfo-CEITEC/genomic_benchmarks/main/datasets"
ZENODO = "https://zenodo.org/records/16605299/files"
GDRIVE = "https://drive.google.com/uc?export=download&id="
PAPER = (
    "Gresova et al., Genomic benchmarks: a collection of datasets for genomic sequence "
    "classification, BMC Genomic Data 24:25 (2023), doi:10.1186/s12863-023-01123-8"
)
VERSION = 0

_ENSEMBL = "http://ftp.ensembl.org/pub"
_GRCH38_97 = f"{_ENSEMBL}/release-97/fasta/homo_sapiens/dna/Homo_sapiens.GRCh38.dna.toplevel.fa.gz"
_GRCH38_100 = (
    "ftp://ftp.ensembl.org/pub/release-100/fasta/homo_sapiens/dna/"
    "Homo_sapiens.GRCh38.dna.toplevel.fa.gz"
)

# name: (classes, train size, test size, median length, Google Drive id, reference FASTA(s))
# The references are those of the dataset's metadata.yaml; None where it was not checked.
BENCHMARKS: dict[str, tuple] = {
    "demo_coding_vs_intergenomic_seqs": (
        ("coding_seqs", "intergenomic_seqs"), 75000, 25000, 200,
        "1cpXg0ULuTGF7h1_HTYvc6p8M-ee43t-v",
        {
            "coding_seqs": f"{_ENSEMBL}/release-104/fasta/homo_sapiens/cdna/"
            "Homo_sapiens.GRCh38.cdna.all.fa.gz",
            "intergenomic_seqs": f"{_ENSEMBL}/release-104/fasta/homo_sapiens/dna/"
            "Homo_sapiens.GRCh38.dna.toplevel.fa.gz",
        },
    ),
    "demo_human_or_worm": (
        ("human", "worm"), 75000, 25000, 200,
        "1JW0-eTB-rJXvFcglqBo3pFZi1kyIWC3X",
        {
            "human": _GRCH38_97,
            "worm": f"{_ENSEMBL}/release-104/fasta/caenorhabditis_elegans/dna/"
            "Caenorhabditis_elegans.WBcel235.dna.toplevel.fa.gz",
        },
    ),
    "dummy_mouse_enhancers_ensembl": (
        ("negative", "positive"), 968, 242, 2381,
        "1dz7dwvyM1TVUsCyuxxxn1ZMMFV381sl2",
        "ftp://ftp.ensembl.org/pub/release-100/fasta/mus_musculus/dna/"
        "Mus_musculus.GRCm38.dna.toplevel.fa.gz",
    ),
    "human_enhancers_cohn": (
        ("negative", "positive"), 20843, 6948, 500,
        "176563cDPQ5Y094WyoSBF02QjoVQhWuCh",
        _GRCH38_97,
    ),
    "human_enhancers_ensembl": (
        ("negative", "positive"), 123872, 30970, 269,
        "1gZBEV_RGxJE8EON5OObdrp5Tp8JL0Fxb",
        None,
    ),
    "human_ensembl_regulatory": (
        ("enhancer", "ocr", "promoter"), 231348, 57713, 401,
        "1GefcGAM-tklnmzfzZ9RC91tGDmOzrAXU",
        _GRCH38_100,
    ),
    "human_nontata_promoters": (
        ("negative", "positive"), 27097, 9034, 251,
        "1VdUg0Zu8yfLS6QesBXwGz1PIQrTW3Ze4",
        None,
    ),
    "human_ocr_ensembl": (
        ("negative", "positive"), 139804, 34952, 315,
        "1y_LInRF2aRXysigpwv_oU3Q67VVxfk18",
        _GRCH38_100,
    ),
}  # fmt: skip

# the official test splits in the offline mirror: md5 of the uncompressed CSV, data rows
MIRRORED_TEST_SPLITS = {
    "human_enhancers_cohn": ("c8c0f3d5308973a01127edd50c879718", 6948),
    "human_nontata_promoters": ("1bbffc23bb667ef2c5dbab30efacc7fe", 9034),
}


def coordinate_urls(name: str, split: str) -> dict[str, str]:
    """{class: URL} of the benchmark's coordinate tables for `split` ("train" or "test")."""
    if name not in BENCHMARKS:
        raise KeyError(f"unknown GenomicsBenchmarks dataset {name!r}; known: {sorted(BENCHMARKS)}")
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    classes = BENCHMARKS[name][0]
    return {c: f"{COORDINATES}/{name}/{split}/{c}.csv.gz" for c in classes}


for _name, (_classes, _train, _test, _median, _drive, _reference) in BENCHMARKS.items():
    register_dataset(
        DatasetEntry(
            name=_name,
            file=f"genomics/{_name}_v{VERSION}.zip",
            urls=(f"{ZENODO}/{_name}_v{VERSION}.zip?download=1", f"{GDRIVE}{_drive}"),
            md5=None,
            loader=load_benchmark_archive,
            protocol="genomic_benchmarks",
            info={
                "domain": "genomics",
                "classes": _classes,
                "num_classes": len(_classes),
                "train": _train,
                "test": _test,
                "median_length": _median,
                "version": VERSION,
                "layout": f"{_name}/{{train,test}}/<class>/<id>.txt",
                "coordinates": f"{COORDINATES}/{_name}/{{split}}/<class>.csv.gz",
                "reference": _reference,
                "repository": REPOSITORY,
                "reference_paper": PAPER,
            },
        )
    )

for _name, (_md5, _rows) in MIRRORED_TEST_SPLITS.items():
    _classes = BENCHMARKS[_name][0]
    register_dataset(
        DatasetEntry(
            name=f"{_name}.test",
            file=f"genomics/{_name}.test.csv.gz",
            # no public copy of this CSV export exists to download; the same split is in
            # the `<name>` archive (test/) and on Hugging Face as parquet
            urls=(),
            md5=_md5,
            loader=partial(read_sequence_table, classes=_classes),
            protocol="genomic_resplit",
            info={
                "domain": "genomics",
                "benchmark": _name,
                "split": "test",
                "rows": _rows,
                "columns": ("seq", "label"),
                "classes": _classes,
                "num_classes": len(_classes),
                "label_encoding": {i: c for i, c in enumerate(_classes)},
                "also_at": f"https://huggingface.co/datasets/katarinagresova/"
                f"Genomic_Benchmarks_{_name}",
                "reference_paper": PAPER,
            },
        )
    )
