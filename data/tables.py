"""Read a user's CSV table as written: the delimiter, the decimal mark and the timestamp
column are taken from the file rather than assumed.

Spreadsheets in much of Europe export `;`-separated files with decimal commas, and time
series tools name their timestamp column `date` (Time-Series-Library), `ds`
(neuralforecast), `timestamp` or `time`; a file should not have to be rewritten for any
of these.
"""

from __future__ import annotations

import csv
import gzip
import re
import warnings
import zlib
from pathlib import Path

import pandas as pd

from .checksums import is_gzipped
from .errors import DataError
from .sequences import open_text

DELIMITERS = ",;\t|"
# timestamp column names, in the order they are preferred when a file has several
DATE_COLUMN_NAMES = ("date", "ds", "datetime", "timestamp", "time")
LONG_COLUMNS = ("unique_id", "ds", "y")  # neuralforecast's long layout
# a number written with thousands separators: "1.234,5" (decimal comma), "1,234.5"
THOUSANDS_GROUPS = re.compile(r"^[+-]?\d{1,3}(?:([.,])\d{3})+(?:[.,]\d*)?$")


def sniff_delimiter(header: str) -> str:
    """The delimiter of a CSV header line: one of `DELIMITERS`, "," when the line has
    one column."""
    try:
        return csv.Sniffer().sniff(header, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def read_csv_table(path: str | Path) -> pd.DataFrame:
    """A CSV file (plain or gzip, detected from its bytes) as a DataFrame, its delimiter
    sniffed from the header; `;`-separated files whose values use decimal commas are read
    with `decimal=","` (and `thousands="."` when they group digits, "1.234,5"), numbers
    grouped with commas ("1,234.5", quoted in a comma-separated file) with
    `thousands=","`, and the row numbers `DataFrame.to_csv()` writes for a RangeIndex
    are dropped (a DatetimeIndex it writes is a first column of dates)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such CSV file: {path}")
    try:
        with open_text(path) as handle:
            header = handle.readline()
        if not header.strip():
            raise DataError(f"{path}: the file is empty")
        sep = sniff_delimiter(header)
        compression = "gzip" if is_gzipped(path) else None
        table = pd.read_csv(path, sep=sep, compression=compression)
        marks = _number_marks(table, sep)
        if marks:
            table = pd.read_csv(path, sep=sep, compression=compression, **marks)
        table = without_saved_row_numbers(table)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise DataError(f"{path}: the gzip data is truncated or damaged ({error})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as error:
        raise DataError(f"{path}: not a readable CSV file: {error}") from None
    return table


def without_saved_row_numbers(table: pd.DataFrame) -> pd.DataFrame:
    """`table` without a first column that is a pandas RangeIndex written by `to_csv()` and
    read back: no header (read as "Unnamed: 0") and consecutive integers. It numbers the
    rows; it is not data."""
    if len(table.columns) < 2 or not str(table.columns[0]).startswith("Unnamed: 0"):
        return table
    values = table[table.columns[0]]
    if not pd.api.types.is_integer_dtype(values) or values.empty:
        return table
    if not (values.diff().iloc[1:] == 1).all():
        return table
    return table.drop(columns=table.columns[0])


def _number_marks(table: pd.DataFrame, sep: str) -> dict:
    """`pd.read_csv` options for the way the text columns of `table` write numbers:
    {"decimal": ",", "thousands": "."} for "1.234,5" in a `;`-separated file,
    {"decimal": ","} for "0,5" there, {"thousands": ","} for "1,234.5", {} otherwise. A
    convention is taken only when every value of a column that shows it reads as a number
    under it."""
    if sep == ";" and _grouped(table, group=".", decimal=","):
        return {"decimal": ",", "thousands": "."}
    if sep == ";" and _decimal_commas(table):
        return {"decimal": ","}
    if sep != "," or not _grouped(table, group=",", decimal="."):
        return {}
    return {"thousands": ","}


def _grouped(table: pd.DataFrame, group: str, decimal: str) -> bool:
    """Whether a text column writes numbers with `group` between thousands (and `decimal`
    as the decimal mark), every value reading as a number that way."""
    for column in table.columns:
        values = table[column].dropna()
        if values.empty or pd.api.types.is_numeric_dtype(values):
            continue
        sample = values.astype(str).str.strip().head(200)
        shown = sample.map(lambda v: (m := THOUSANDS_GROUPS.match(v)) and m.group(1) == group)
        if not shown.any():
            continue
        plain = sample.str.replace(group, "", regex=False).str.replace(decimal, ".", regex=False)
        if pd.to_numeric(plain, errors="coerce").notna().all():
            return True
    return False


def _decimal_commas(table: pd.DataFrame) -> bool:
    """Whether some text column holds numbers written with a decimal comma ("0,5")."""
    for column in table.columns:
        values = table[column].dropna()
        if values.empty or pd.api.types.is_numeric_dtype(values):
            continue
        sample = values.astype(str).head(50)
        if not sample.str.contains(",").any():
            continue
        parsed = pd.to_numeric(sample.str.replace(",", ".", regex=False), errors="coerce")
        if parsed.notna().all():
            return True
    return False


def find_date_column(table: pd.DataFrame, wanted: str | None = "date") -> str | None:
    """The timestamp column of a table: `wanted` when present; else the column named like a
    timestamp (`DATE_COLUMN_NAMES`, any case) that holds dates; else the first column when
    it holds dates; else `wanted` (None when `wanted` is None). Dates are datetime values or
    text that parses as dates: a numeric column called "time" (seconds elapsed, say) is data."""
    if wanted is None or wanted in table.columns or table.columns.has_duplicates:
        return wanted  # repeated names are refused by the validation that follows
    by_name = {str(c).lower(): c for c in table.columns}
    named = [by_name[n] for n in DATE_COLUMN_NAMES if n in by_name]
    first = [table.columns[0]] if len(table.columns) > 1 else []
    for column in [*named, *first]:
        if _holds_dates(table[column]):
            return column
    return wanted


def _holds_dates(column: pd.Series) -> bool:
    if pd.api.types.is_datetime64_any_dtype(column):
        return True
    sample = column.dropna().head(20)
    if sample.empty or not sample.map(lambda v: isinstance(v, str)).all():
        return False
    return bool(pd.to_datetime(sample, errors="coerce", format="mixed").notna().all())


def parse_timestamps(values: pd.Series) -> pd.Series:
    """Timestamps from dates or text, NaT where a value is not a date. Day-first text
    ("13/01/2021", "13.01.2021") is read month-first until a day past 12 fails: it is read
    day-first when that parses more of the values. Text with several UTC offsets (local
    time across a daylight-saving change) is read as UTC, with a warning; a DataError for
    values with a time zone mixed with values without one."""
    try:
        parsed = pd.to_datetime(values, errors="coerce")
    except ValueError:  # offsets that differ from value to value: daylight saving time
        zones = pd.Series(values).astype(str).str.extract(r"([+-]\d\d:?\d\d|Z)$")[0]
        shown = sorted(zones.dropna().unique())[:3]
        warnings.warn(
            f"the timestamps carry several UTC offsets ({', '.join(shown)}, as local time "
            "across a daylight-saving change does): they are read as UTC instants",
            UserWarning,
            stacklevel=3,
        )
        parsed = pd.to_datetime(values, errors="coerce", utc=True)
    if parsed.isna().any() and getattr(parsed.dt, "tz", None) is not None:
        _refuse_zones_mixed_with_none(values, parsed)
    if parsed.isna().any() and not pd.api.types.is_datetime64_any_dtype(values):
        day_first = pd.to_datetime(values, errors="coerce", dayfirst=True)
        if day_first.notna().sum() > parsed.notna().sum():
            return day_first
    return parsed


def _refuse_zones_mixed_with_none(values: pd.Series, parsed: pd.Series) -> None:
    """DataError when the values that did not parse beside time-zone-aware ones are dates
    without a time zone: the column mixes the two, and their instants cannot be compared."""
    unparsed = pd.Series(values)[parsed.isna().to_numpy()].dropna()
    if unparsed.empty:
        return
    alone = pd.to_datetime(unparsed.iloc[:1], errors="coerce")
    if alone.notna().all() and getattr(alone.dt, "tz", None) is None:
        aware = pd.Series(values)[parsed.notna().to_numpy()].iloc[0]
        raise DataError(
            f"the timestamps mix values with a time zone ({aware!r}) and without one "
            f"({unparsed.iloc[0]!r}): give them all in one zone"
        )


def is_long_table(table: pd.DataFrame) -> bool:
    """Whether a table is in the long layout: a row per series and step, with `unique_id`,
    `ds` and `y` columns."""
    return all(c in table.columns for c in LONG_COLUMNS)


def check_long_layout(table, what: str) -> None:
    """DataError for a table that has the long layout's `unique_id` column but lacks `ds`
    or `y` (read as a wide table, its series' rows would repeat every timestamp)."""
    if not isinstance(table, pd.DataFrame):
        return
    columns = [str(c) for c in table.columns]
    absent = [c for c in LONG_COLUMNS if c not in columns]
    if LONG_COLUMNS[0] not in columns or not absent:
        return
    shown = columns[:10] + (["..."] if len(columns) > 10 else [])
    roles = {"ds": "the timestamp (or integer step) column 'ds'", "y": "the column to forecast 'y'"}
    raise DataError(
        f"{what}: a table with a 'unique_id' column is read in the long layout (unique_id, "
        f"ds, y: a row per series and step), and it lacks {absent}; its columns are {shown}: "
        f"name {' and '.join(roles[c] for c in absent)}"
    )
