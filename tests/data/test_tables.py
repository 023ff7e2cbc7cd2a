"""CSV tables as users write them: delimiters, decimal commas, timestamp column names."""

import gzip

import numpy as np
import pandas as pd
import pytest

from titans_seq.data import DataError, load_timeseries
from titans_seq.data.tables import find_date_column, read_csv_table, sniff_delimiter


def _frame(n=50):
    t = np.arange(n)
    return pd.DataFrame(
        {
            "when": pd.date_range("2024-01-01", periods=n, freq="h").astype(str),
            "load": np.sin(t / 3) * 10.25,
            "temp": np.cos(t / 5) + 0.5,
        }
    )


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"])
def test_the_delimiter_is_read_from_the_header(tmp_path, sep):
    frame = _frame()
    path = tmp_path / "x.csv"
    frame.to_csv(path, sep=sep, index=False)
    assert sniff_delimiter(path.read_text().splitlines()[0]) == sep
    series = load_timeseries(path)
    assert series.columns.tolist() == ["load", "temp"]
    np.testing.assert_allclose(series.to_numpy(), frame[["load", "temp"]].to_numpy())
    assert series.index[1] - series.index[0] == pd.Timedelta("1h")


def test_semicolon_files_with_decimal_commas(tmp_path):
    frame = _frame()
    path = tmp_path / "excel_export.csv.gz"
    with gzip.open(path, "wt") as handle:
        frame.to_csv(handle, sep=";", decimal=",", index=False)
    series = load_timeseries(path)
    np.testing.assert_allclose(series.to_numpy(), frame[["load", "temp"]].to_numpy())


def test_numbers_written_with_thousands_separators(tmp_path):
    """ "1.234,5" in a `;` file (decimal comma, dots between thousands) and "1,234.5" quoted
    in a `,` file read as the numbers they are; "1.5" in a `;` file stays 1.5."""
    stamps = pd.date_range("2024-01-01", periods=30, freq="h").strftime("%Y-%m-%d %H:%M")
    european = tmp_path / "eu.csv"
    european.write_text(
        "date;load;rate\n"
        + "".join(f"{d};{i + 1}.{7 * i:03d},5;{i},25\n" for i, d in enumerate(stamps))
    )
    series = load_timeseries(european)
    assert series["load"].iloc[3] == pytest.approx(4021.5)
    assert series["rate"].iloc[3] == pytest.approx(3.25)
    english = tmp_path / "en.csv"
    english.write_text(
        "date,load\n" + "".join(f'{d},"{i + 1},{i:03d}.5"\n' for i, d in enumerate(stamps))
    )
    assert load_timeseries(english)["load"].iloc[2] == pytest.approx(3002.5)
    plain = tmp_path / "plain.csv"
    plain.write_text("date;load\n" + "".join(f"{d};1.5\n" for d in stamps))
    assert load_timeseries(plain)["load"].iloc[0] == 1.5


def test_a_frame_of_grouped_numbers_points_at_the_reader_that_reads_them():
    from titans_seq.data import prepare_frame

    frame = pd.DataFrame({"load": ["1.234,5", "2.345,5", "3.456,5"]})
    with pytest.raises(DataError, match="titans_seq.data.tables.read_csv_table") as caught:
        prepare_frame(frame, date_column=None)
    assert "thousands separators" in str(caught.value)
    from titans_seq.data.tables import read_csv_table  # noqa: F401 (the path named exists)


def test_a_long_table_without_y_is_named(tmp_path):
    path = tmp_path / "long.csv"
    frame = pd.DataFrame({"unique_id": ["a"] * 5 + ["b"] * 5, "ds": list(range(5)) * 2})
    frame.assign(value=np.arange(10.0)).to_csv(path, index=False)
    with pytest.raises(DataError, match=r"lacks \['y'\].*name the column to forecast 'y'"):
        load_timeseries(path)


def test_a_value_that_is_not_a_number_is_the_one_quoted(tmp_path):
    path = tmp_path / "bad.csv"
    stamps = pd.date_range("2024-01-01", periods=6, freq="h")
    pd.DataFrame({"date": stamps, "load": ["1", "2", "3", "oops", "5", "6"]}).to_csv(
        path, index=False
    )
    with pytest.raises(DataError, match=r"'load' \(.*e.g. 'oops'\)") as caught:
        load_timeseries(path)
    assert "date column" not in str(caught.value)  # the dates were found


def test_time_zones_local_time_across_daylight_saving_and_a_mix_with_none():
    from titans_seq.data.tables import parse_timestamps

    utc = pd.date_range("2024-03-30 22:00", periods=6, freq="h", tz="UTC")
    local = utc.tz_convert("Europe/Berlin").strftime("%Y-%m-%d %H:%M:%S%z")  # +0100, +0200
    with pytest.warns(UserWarning, match=r"several UTC offsets \(\+0100, \+0200"):
        parsed = parse_timestamps(pd.Series(local))
    assert (pd.DatetimeIndex(parsed) == utc).all()  # the same instants, hourly
    mixed = pd.Series(["2024-01-01 00:00+02:00", "2024-01-01 01:00+02:00", "2024-01-01 02:00"])
    with pytest.raises(DataError, match="mix values with a time zone .* and without one"):
        parse_timestamps(mixed)


@pytest.mark.parametrize("name", ["date", "ds", "Timestamp", "TIME", "datetime"])
def test_timestamp_columns_are_found_by_name(name):
    frame = _frame().rename(columns={"when": name})[["load", name, "temp"]]
    assert find_date_column(frame) == name


def test_a_first_column_of_dates_is_the_timestamps_and_others_are_not():
    frame = _frame()
    assert find_date_column(frame) == "when"
    assert find_date_column(frame, "stamp") == "when"
    assert find_date_column(frame, None) is None  # no timestamps asked for
    numeric = frame.drop(columns="when")
    assert find_date_column(numeric) == "date"  # absent: rows are equally spaced steps
    words = frame.assign(when=["north", "south"] * 25)
    assert find_date_column(words) == "date"
    # a numeric "time" column (seconds elapsed) is data, not timestamps
    elapsed = frame.drop(columns="when").assign(time=np.arange(50.0))
    assert find_date_column(elapsed) == "date"


def test_data_frames_get_the_same_timestamp_search():
    frame = _frame().rename(columns={"when": "ds"})
    frame["ds"] = pd.to_datetime(frame["ds"])
    series = load_timeseries(frame)
    assert isinstance(series.index, pd.DatetimeIndex)
    assert series.columns.tolist() == ["load", "temp"]
    indexed = frame.set_index("ds")  # a DatetimeIndex is used as it is
    assert load_timeseries(indexed).index.equals(series.index)


def test_long_layout_files_are_refused_with_what_to_do(tmp_path):
    path = tmp_path / "long.csv"
    pd.DataFrame({"unique_id": ["a"] * 5, "ds": range(5), "y": np.arange(5.0)}).to_csv(path)
    with pytest.raises(DataError, match="long layout"):
        load_timeseries(path)


def test_empty_and_damaged_files(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        read_csv_table(empty)
    damaged = tmp_path / "damaged.csv.gz"
    rows = "".join(f"2024-01-01,{v}\n" for v in np.random.default_rng(0).normal(size=500))
    whole = gzip.compress(f"date,y\n{rows}".encode())
    damaged.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(DataError, match="truncated or damaged"):
        read_csv_table(damaged)
    with pytest.raises(FileNotFoundError):
        read_csv_table(tmp_path / "absent.csv")


def test_frames_saved_with_their_pandas_index(tmp_path):
    frame = _frame().drop(columns="when")
    numbered = tmp_path / "numbered.csv"
    frame.iloc[10:].to_csv(numbered)  # a RangeIndex slice: rows 10..49, an unnamed column
    series = load_timeseries(numbered)
    assert series.columns.tolist() == ["load", "temp"] and len(series) == 40
    read_back = pd.read_csv(numbered)  # the same, read by the user into a DataFrame
    assert load_timeseries(read_back).columns.tolist() == ["load", "temp"]
    dated = tmp_path / "dated.csv"
    frame.set_axis(pd.date_range("2024-01-01", periods=50, freq="D")).to_csv(dated)
    series = load_timeseries(dated)
    assert series.columns.tolist() == ["load", "temp"]
    assert series.index[0] == pd.Timestamp("2024-01-01")
    named = tmp_path / "named.csv"  # a column of the user's that counts something is data
    frame.assign(count=np.arange(50)).to_csv(named, index=False)
    assert load_timeseries(named).columns.tolist() == ["load", "temp", "count"]


@pytest.mark.parametrize("layout", ["%d/%m/%Y", "%d.%m.%Y %H:%M"])
def test_day_first_dates(tmp_path, layout):
    days = pd.date_range("2021-01-01", periods=40, freq="D")
    path = tmp_path / "days.csv"
    frame = pd.DataFrame({"date": days.strftime(layout), "sales": np.arange(40.0)})
    frame.to_csv(path, index=False)
    series = load_timeseries(path)
    assert series.index.equals(pd.DatetimeIndex(days, name="date"))
