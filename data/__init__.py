"""Dataset registry, loaders and split protocols (`titans_seq.data`).

import titans_seq.data as tsd
tsd.list_datasets()                        # ['ETTh1', ..., 'Weather', 'ECL', 'Traffic', ...]
path = tsd.dataset_path("ETTh1")           # $TITANS_SEQ_DATA, cache, else download + md5
train, val, test, scaler = tsd.forecast_splits("ETTh1", lookback=96, horizon=96)
x, y = train[0]                            # x [96, 7], y [96, 7], float32, z-scored
"""

from . import timeseries_sources  # noqa: F401  (registers the benchmark datasets)

from . import text_sources  # noqa: F401  # isort: skip  (registered after the benchmarks)
from . import m4  # noqa: F401  # isort: skip  (the M4 groups, after the text corpora)
from . import babi  # noqa: F401  # isort: skip  (bAbI tasks 1-5, after M4)
from .checksums import content_md5, verify_md5
from .coordinates import ReferenceGenome, load_coordinate_dataset, read_coordinates
from .download import download_file
from .errors import ChecksumError, DataError, DatasetNotFoundError
from .files import cache_dir, data_dirs, dataset_path
from .frames import prepare_frame, read_csv_frame
from .genomics import (
    load_benchmark_folder,
    load_genomic_benchmark,
    read_sequence_table,
    resplit_indices,
    train_val_test_resplit,
)
from .genomics_sources import coordinate_urls  # (importing it registers the datasets)
from .metrics import mae, mse
from .registry import DatasetEntry, get_dataset, list_datasets, register_dataset
from .scaler import LogStandardScaler, StandardScaler, scaler_from_state
from .sequence_dataset import SequenceDataset, check_classification, validate_sequences
from .sequences import load_fasta, load_fasta_classes, load_fastq
from .splits import SplitBorders, custom_borders, ett_borders, split_borders
from .timeseries import ForecastSplits, ForecastWindows, forecast_splits, load_timeseries

__all__ = [
    "ChecksumError",
    "DataError",
    "DatasetEntry",
    "DatasetNotFoundError",
    "ForecastSplits",
    "ForecastWindows",
    "ReferenceGenome",
    "SequenceDataset",
    "SplitBorders",
    "LogStandardScaler",
    "StandardScaler",
    "scaler_from_state",
    "cache_dir",
    "check_classification",
    "content_md5",
    "coordinate_urls",
    "custom_borders",
    "data_dirs",
    "dataset_path",
    "download_file",
    "ett_borders",
    "forecast_splits",
    "get_dataset",
    "list_datasets",
    "load_benchmark_folder",
    "load_coordinate_dataset",
    "load_fasta",
    "load_fasta_classes",
    "load_fastq",
    "load_genomic_benchmark",
    "load_timeseries",
    "mae",
    "mse",
    "prepare_frame",
    "read_coordinates",
    "read_csv_frame",
    "read_sequence_table",
    "register_dataset",
    "resplit_indices",
    "split_borders",
    "train_val_test_resplit",
    "validate_sequences",
    "verify_md5",
]
