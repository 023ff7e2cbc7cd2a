"""Text corpora in the registry: names, canonical sources, checksums against the mirror."""

from __future__ import annotations

import gzip

import pytest

import titans_seq.data as tsd
from titans_seq.data import DataError
from titans_seq.data.text_sources import list_text_datasets, load_text, read_text

EXPECTED = {
    "tinyshakespeare": (1115394, "karpathy/char-rnn/master/data/tinyshakespeare/input.txt"),
    "wikitext2-valid": (1121681, "pytorch/examples/main/word_language_model/data/wikitext-2/"),
    "wikitext2-test": (1256449, "pytorch/examples/main/word_language_model/data/wikitext-2/"),
}


def test_text_corpora_are_registered_with_their_canonical_sources():
    assert set(EXPECTED) <= set(list_text_datasets())
    for name, (size, url_part) in EXPECTED.items():
        entry = tsd.get_dataset(name)
        assert entry.urls[0].startswith("https://raw.githubusercontent.com/")
        assert url_part in entry.urls[0]
        assert entry.info["bytes"] == size
    assert tsd.get_dataset("shakespeare").name == "tinyshakespeare"
    assert tsd.get_dataset("wikitext2-valid").urls[0].endswith("/valid.txt")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mirror_copies_match_the_registered_md5_and_load_as_text(name):
    tsd.dataset_path(name, download=False, verify=True)  # raises on a wrong md5
    text = load_text(name, download=False)
    assert isinstance(text, str)
    assert len(text.encode("utf-8")) == EXPECTED[name][0]


def test_read_text_handles_plain_and_gzip_alike(tmp_path):
    content = "línea uno\r\nline two\n"
    plain = tmp_path / "a.txt"
    plain.write_bytes(content.encode())
    packed = tmp_path / "a.txt.gz"
    packed.write_bytes(gzip.compress(content.encode()))
    assert read_text(plain) == read_text(packed) == content  # newlines kept byte-exact


def test_load_text_rejects_a_non_text_dataset():
    with pytest.raises(ValueError, match="not a text corpus"):
        load_text("ETTh1", download=False)


def test_text_and_time_series_work_without_biopython(tmp_path):
    """Biopython is imported only where FASTA files and genomes are read: without it the
    data layer, the CLI and a text training run's modules import, and a FASTA read says
    which module is missing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['Bio'] = None\n"
        "import titans_seq.data, titans_seq.cli\n"
        "import titans_seq.domains.lm, titans_seq.domains.forecasting\n"
        "from titans_seq.data import load_fasta\n"
        "try:\n"
        "    load_fasta(sys.argv[1])\n"
        "except ImportError as error:\n"
        "    print('needs', error.name)\n"
    )
    fasta = tmp_path / "x.fa"
    fasta.write_text(">a\nACGT\n")
    out = subprocess.run(
        [sys.executable, "-c", code, str(fasta)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "needs Bio"


def test_text_files_as_editors_write_them(tmp_path):
    """A UTF-8 byte-order mark is dropped; text in another encoding is refused by name."""
    bom = tmp_path / "windows.txt"
    bom.write_bytes("\ufeffline one\r\nline two\r\n".encode())
    assert read_text(bom) == "line one\r\nline two\r\n"  # line ends kept as written
    latin = tmp_path / "latin.txt"
    latin.write_bytes("café".encode("latin-1"))
    with pytest.raises(DataError, match=r"latin\.txt: not utf-8 text \(it holds the byte 0xe9\)"):
        read_text(latin)
    assert read_text(latin, encoding="latin-1") == "café"
