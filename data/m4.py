"""The M4 competition's hourly and weekly series, and its scoring (sMAPE, MASE, OWA).

    from titans_seq.data.m4 import load_m4, m4_scores
    m4 = load_m4("Hourly")                 # 414 series, horizon 48, season 24
    m4.train.head()                        # long frame: unique_id, ds, y
    scores = m4_scores(m4, forecast)       # forecast: long frame (unique_id, ds, y_hat)

The files are those the competition published (Mcompetitions/M4-methods, Dataset/Train and
Dataset/Test): one row per series, its id, then its values; no dates. The loader gives each
series regular timestamps at the group's frequency starting from the same date (any regular
grid serves: the dates are not part of the data), and the test rows continue each series'
grid.

The scores are the competition's own (Makridakis, Spiliotis, Assimakopoulos, IJF 2020):
sMAPE (percent) and MASE per series, averaged over the group's series, and OWA, the mean of
the two each divided by the Naive2 benchmark's. MASE scales by the in-sample mean absolute
seasonal difference at the group's seasonal period (24 for hourly, 1 for weekly, as the M4
rules set it). Naive2 is the naive forecast of the seasonally adjusted series: classical
multiplicative decomposition where the series passes the competition's seasonality test
(its autocorrelation at lag m beyond the 90% limit), else the plain naive forecast
(`naive2_forecast`; on the hourly group it scores the competition's 18.383 / 2.395).
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import DataError
from .files import dataset_path
from .registry import DatasetEntry, register_dataset

M4_METHODS = "https://raw.githubusercontent.com/Mcompetitions/M4-methods/master/Dataset"
START = pd.Timestamp("2000-01-03")  # a Monday: weekly dates fall on the "W-MON" grid


@dataclasses.dataclass(frozen=True)
class M4Group:
    """One M4 frequency group as the competition defined it."""

    name: str
    horizon: int
    season: int  # MASE's seasonal period and the seasonality test's lag
    freq: str  # pandas frequency of the loader's timestamps
    series: int
    naive2: tuple[float, float]  # the competition's Naive2 sMAPE and MASE, for OWA
    md5: tuple[str, str]  # uncompressed train and test files


GROUPS = {
    g.name: g
    for g in (
        M4Group(
            "Hourly",
            48,
            24,
            "h",
            414,
            (18.383, 2.395),
            ("5838f531d0a29ba6aa70a90f72c82686", "d3f313cdb3417c30297ae4beec188266"),
        ),
        M4Group(
            "Weekly",
            13,
            1,
            "W-MON",
            359,
            (9.161, 2.777),
            ("4ff716c6b4e63815761d4bc6d5eeff1d", "39463ccfd938eb3c89afc9368a7b0ab4"),
        ),
    )
}


def read_m4_file(path: str | Path) -> dict[str, np.ndarray]:
    """One M4 file (plain or gzipped CSV: a header, then `"id","v1","v2",...` per series,
    rows of different lengths padded with empty fields) -> {id: float64 values}."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    series: dict[str, np.ndarray] = {}
    with opener(path, "rt", newline="") as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if not header or header[0] != "V1":
            raise DataError(f"{path}: not an M4 file (its header should start with V1)")
        for number, row in enumerate(rows, start=2):
            if not row:
                continue
            uid, values = row[0], [v for v in row[1:] if v != ""]
            if uid in series:
                raise DataError(f"{path}, line {number}: series {uid} appears twice")
            if not values:
                raise DataError(f"{path}, line {number} ({uid}): no values")
            try:
                series[uid] = np.asarray(values, dtype=np.float64)
            except ValueError:
                raise DataError(f"{path}, line {number} ({uid}): a value is not a number") from None
    if not series:
        raise DataError(f"{path}: no series")
    return series


for _group in GROUPS.values():
    for _split, _md5 in zip(("train", "test"), _group.md5, strict=True):
        _folder = "Train" if _split == "train" else "Test"
        register_dataset(
            DatasetEntry(
                name=f"M4-{_group.name}-{_split}",
                file=f"timeseries/m4/{_group.name}-{_split}.csv.gz",
                urls=(f"{M4_METHODS}/{_folder}/{_group.name}-{_split}.csv",),
                md5=_md5,
                loader=read_m4_file,
                alternate_files=(f"m4/{_group.name}-{_split}.csv", f"{_group.name}-{_split}.csv"),
                info={
                    "series": _group.series,
                    "horizon": _group.horizon,
                    "frequency": _group.name.lower(),
                    "reference": "Makridakis, Spiliotis, Assimakopoulos, IJF 36(1), 2020",
                },
            )
        )


@dataclasses.dataclass(frozen=True)
class M4Data:
    """A loaded group: `train` and `test` long frames (`unique_id`, `ds`, `y`)."""

    group: M4Group
    train: pd.DataFrame
    test: pd.DataFrame

    @property
    def horizon(self) -> int:
        return self.group.horizon

    @property
    def season(self) -> int:
        return self.group.season


def _group(name: str) -> M4Group:
    try:
        return GROUPS[name.capitalize()]
    except KeyError:
        raise DataError(f"unknown M4 group {name!r}; available: {', '.join(GROUPS)}") from None


def long_frame(values: dict[str, np.ndarray], freq: str, starts: dict[str, int]) -> pd.DataFrame:
    """{id: values} -> a long frame, series `id`'s rows at grid steps `starts[id]`, ... ."""
    grid_length = max(starts[uid] + len(v) for uid, v in values.items())
    grid = pd.date_range(START, periods=grid_length, freq=freq)
    return pd.DataFrame(
        {
            "unique_id": np.repeat(list(values), [len(v) for v in values.values()]),
            "ds": np.concatenate(
                [grid[starts[uid] : starts[uid] + len(v)] for uid, v in values.items()]
            ),
            "y": np.concatenate(list(values.values())),
        }
    )


def load_m4(group: str, *, series: int | None = None, download: bool = True) -> M4Data:
    """The M4 `group` ("Hourly" or "Weekly") as long frames; `series` keeps the first n."""
    spec = _group(group)
    train = read_m4_file(dataset_path(f"M4-{spec.name}-train", download=download))
    test = read_m4_file(dataset_path(f"M4-{spec.name}-test", download=download))
    if set(train) != set(test):
        raise DataError(f"M4 {spec.name}: the train and test files hold different series")
    bad = [uid for uid in test if len(test[uid]) != spec.horizon]
    if bad:
        raise DataError(f"M4 {spec.name}: test rows of {bad[:5]} are not {spec.horizon} long")
    ids = list(train)[:series] if series else list(train)
    train = {uid: train[uid] for uid in ids}
    test = {uid: test[uid] for uid in ids}
    zeros = dict.fromkeys(ids, 0)
    ends = {uid: len(v) for uid, v in train.items()}
    return M4Data(spec, long_frame(train, spec.freq, zeros), long_frame(test, spec.freq, ends))


# ----------------------------------------------------------------------------- scoring
def smape(forecast: np.ndarray, actual: np.ndarray) -> float:
    """M4's symmetric MAPE in percent: mean of 200 |y - f| / (|y| + |f|) over [H]."""
    return float(np.mean(200.0 * np.abs(actual - forecast) / (np.abs(actual) + np.abs(forecast))))


def mase(forecast: np.ndarray, actual: np.ndarray, insample: np.ndarray, season: int) -> float:
    """Mean absolute error over [H] scaled by the in-sample seasonal naive's (period
    `season`), as M4 computes it."""
    scale = np.mean(np.abs(insample[season:] - insample[:-season]))
    return float(np.mean(np.abs(actual - forecast)) / scale)


def _acf(x: np.ndarray, lag: int) -> float:
    centred = x - x.mean()
    return float(np.sum(centred[lag:] * centred[:-lag]) / np.sum(centred**2))


def is_seasonal(insample: np.ndarray, season: int) -> bool:
    """M4's seasonality test: |acf(m)| above 1.645 sqrt((1 + 2 sum_{k<m} acf(k)^2) / n)."""
    if season <= 1 or len(insample) < 3 * season:
        return False
    spread = 1.0 + 2.0 * sum(_acf(insample, k) ** 2 for k in range(1, season))
    return abs(_acf(insample, season)) > 1.645 * np.sqrt(spread / len(insample))


def seasonal_indices(insample: np.ndarray, season: int) -> np.ndarray:
    """[season] multiplicative indices (mean 1) of classical decomposition, phase 0 at the
    series' first value: each value over its centred moving average, averaged by phase."""
    n = len(insample)
    average = pd.Series(insample).rolling(season, center=True).mean()
    if season % 2 == 0:  # a 2 x m average, centred between the m-average's halves
        average = average.rolling(2).mean().shift(-1)
    ratios = insample / average.to_numpy()
    ratios = np.concatenate([ratios, np.full(-n % season, np.nan)]).reshape(-1, season)
    indices = np.nanmean(ratios, axis=0)
    return indices / indices.mean()


def naive2_forecast(insample: np.ndarray, horizon: int, season: int) -> np.ndarray:
    """[horizon] Naive2: the last seasonally adjusted value, seasonality put back."""
    if not is_seasonal(insample, season):
        return np.full(horizon, insample[-1])
    indices = seasonal_indices(insample, season)
    n = len(insample)
    last = insample[-1] / indices[(n - 1) % season]
    return last * indices[(n + np.arange(horizon)) % season]


@dataclasses.dataclass(frozen=True)
class M4Scores:
    smape: float
    mase: float
    owa: float

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def score_arrays(
    forecasts: dict[str, np.ndarray], m4: M4Data, naive2: tuple[float, float] | None = None
) -> M4Scores:
    """sMAPE, MASE and OWA of `forecasts` ({id: [H]}) over every series of `m4`."""
    missing = [uid for uid in m4.test["unique_id"].unique() if uid not in forecasts]
    if missing:
        raise DataError(
            f"M4 {m4.group.name}: no forecast for {len(missing)} series, e.g. {missing[:5]}"
        )
    insample = {uid: g.to_numpy() for uid, g in m4.train.groupby("unique_id", sort=False)["y"]}
    actual = {uid: g.to_numpy() for uid, g in m4.test.groupby("unique_id", sort=False)["y"]}
    smapes, mases = [], []
    for uid, y in actual.items():
        f = np.asarray(forecasts[uid], dtype=np.float64).reshape(-1)
        if f.shape != y.shape or not np.isfinite(f).all():
            raise DataError(
                f"M4 {m4.group.name}, {uid}: the forecast is not {len(y)} finite values"
            )
        smapes.append(smape(f, y))
        mases.append(mase(f, y, insample[uid], m4.season))
    s, m = float(np.mean(smapes)), float(np.mean(mases))
    n2_smape, n2_mase = naive2 or m4.group.naive2
    return M4Scores(s, m, 0.5 * (s / n2_smape + m / n2_mase))


def m4_scores(m4: M4Data, forecast: pd.DataFrame, column: str | None = None) -> M4Scores:
    """Score a long forecast frame (`unique_id`, `ds` and one forecast column, `column` or
    the only column besides those) against the test rows, matched on (`unique_id`, `ds`)."""
    if column is None:
        rest = [c for c in forecast.columns if c not in ("unique_id", "ds")]
        if len(rest) != 1:
            raise DataError(f"m4_scores: name the forecast column (column=...) among {rest}")
        column = rest[0]
    keys = ["unique_id", "ds"]
    merged = m4.test.merge(forecast[[*keys, column]], on=keys, how="left")
    if merged[column].isna().any():
        lost = merged.loc[merged[column].isna(), "unique_id"].unique()
        raise DataError(
            f"m4_scores: no forecast for the test rows of {len(lost)} series, e.g. {list(lost[:5])}"
        )
    forecasts = {uid: g.to_numpy() for uid, g in merged.groupby("unique_id", sort=False)[column]}
    return score_arrays(forecasts, m4)
