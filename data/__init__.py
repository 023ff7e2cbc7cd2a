"""Dataset registry, loaders and split protocols (`titans_seq.data`).

import titans_seq.data as tsd
tsd.list_datasets()                        # ['ETTh1', ..., 'Weather', 'ECL', 'Traffic']
path = tsd.dataset_path("ETTh1")           # $TITANS_SEQ_DATA, cache, else download + md5
train, val, test, scaler = tsd.forecast_splits("ETTh1", lookback=96, horizon=96)
x, y = train[0]                            # x [96, 7], y [96, 7], float32, z-scored
"""

from . import timeseries_sources  # noqa: F401  (registers the benchmark datasets)
from .checksums import content_md5, verify_md5
from .download import download_file
from .errors import ChecksumError, DataError, DatasetNotFoundError
from .files import cache_dir, data_dirs, dataset_path
from .frames import prepare_frame, read_csv_frame
from .metrics import mae, mse
from .registry import DatasetEntry, get_dataset, list_datasets, register_dataset
from .scaler import StandardScaler
from .splits import SplitBorders, custom_borders, ett_borders, split_borders
from .timeseries import ForecastSplits, ForecastWindows, forecast_splits, load_timeseries

__all__ = [
    "ChecksumError",
    "DataError",
    "DatasetEntry",
    "DatasetNotFoundError",
    "ForecastSplits",
    "ForecastWindows",
    "SplitBorders",
    "StandardScaler",
    "cache_dir",
    "content_md5",
    "custom_borders",
    "data_dirs",
    "dataset_path",
    "download_file",
    "ett_borders",
    "forecast_splits",
    "get_dataset",
    "list_datasets",
    "load_timeseries",
    "mae",
    "mse",
    "prepare_frame",
    "read_csv_frame",
    "register_dataset",
    "split_borders",
    "verify_md5",
]
