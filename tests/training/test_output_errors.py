"""Where the disk or the file system says no: one line naming the path, nothing half
written left behind, and output folders made when missing."""

from __future__ import annotations

import errno
import gzip

import pytest
from training_helpers import tiny_raw, write_recipe

import titans_seq.training.checkpoint as checkpoint
from titans_seq.cli import main
from titans_seq.data import DataError, load_timeseries
from titans_seq.data.sequences import load_fasta
from titans_seq.training import from_dict, train


def _disk_full_for_checkpoints(monkeypatch):
    """The disk fills up when the first checkpoint is written (the run's config went in)."""
    real = checkpoint.write_bytes_durably

    def write(path, data):
        if ".step_" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(checkpoint, "write_bytes_durably", write)


def test_a_full_disk_stops_the_run_with_no_half_checkpoint_left(tmp_path, monkeypatch):
    _disk_full_for_checkpoints(monkeypatch)
    run_dir = tmp_path / "run"
    with pytest.raises(OSError, match=r"cannot write .*step_00000010.*No space left"):
        train(from_dict(tiny_raw(run_dir, train={"max_steps": 10})))
    leftovers = [p.name for p in run_dir.rglob("*") if ".tmp" in p.name]
    assert leftovers == []


def test_the_command_line_reports_a_full_disk_in_one_line(tmp_path, monkeypatch, capsys):
    _disk_full_for_checkpoints(monkeypatch)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_raw(tmp_path / "run"))
    assert main(["train", str(recipe)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("titans-seq train: error:") and "No space left" in err[-1]
    assert not any(line.startswith("Traceback") for line in err)


def test_prepare_output_file_makes_the_folder_and_refuses_a_folder(tmp_path):
    out = checkpoint.prepare_output_file(tmp_path / "a" / "b" / "f.csv")
    assert out.parent.is_dir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        checkpoint.prepare_output_file(tmp_path / "a")
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="cannot create its folder"):
        checkpoint.prepare_output_file(tmp_path / "file" / "f.csv")


def test_forecast_quantiles_that_are_not_numbers_are_an_argument_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["forecast", "--data", "ETTh1", "--quantiles", "0.1,abc"])
    assert exit_info.value.code == 2
    assert "comma-separated numbers between 0 and 1" in capsys.readouterr().err


def test_truncated_gzip_files_are_data_errors_naming_the_file(tmp_path):
    fasta = gzip.compress(b"".join(b">s%d\nACGTACGTAGCTAGCTAGCATCGAT\n" % i for i in range(3000)))
    (tmp_path / "cut.fa.gz").write_bytes(fasta[: len(fasta) // 2])
    with pytest.raises(DataError, match=r"cut.fa.gz: the gzip data is truncated"):
        load_fasta(tmp_path / "cut.fa.gz")
    table = gzip.compress(
        b"date,a\n" + b"".join(b"2020-01-01 %02d:00:00,%d\n" % (i % 24, i) for i in range(3000))
    )
    (tmp_path / "cut.csv.gz").write_bytes(table[: len(table) // 2])
    with pytest.raises(DataError, match=r"cut.csv.gz: the gzip data is truncated"):
        load_timeseries(tmp_path / "cut.csv.gz")
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="empty.csv: the file is empty"):
        load_timeseries(tmp_path / "empty.csv")
