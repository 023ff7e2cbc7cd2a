"""Calendar features from timestamps: known in advance, so they serve as future covariates.

The encoding is Time-Series-Library's `timefeatures` (from GluonTS): each feature is the
position within its cycle scaled to [-0.5, 0.5], e.g. hour of day = hour / 23 - 0.5.
`calendar="auto"` picks the features that vary at the series' frequency, as that library
does (hourly data: hour of day, day of week, day of month, day of year), and of those only
the ones whose cycle the training data repeats at least `MIN_CYCLES` times: a feature seen
over less than a few cycles (day of year in one year of data) can only be memorised, not
learned, and makes the forecast of a later year worse.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from titans_seq.errors import ConfigError

FEATURES = {
    "minute": lambda t: t.minute / 59.0 - 0.5,
    "hour": lambda t: t.hour / 23.0 - 0.5,
    "dayofweek": lambda t: t.dayofweek / 6.0 - 0.5,
    "dayofmonth": lambda t: (t.day - 1) / 30.0 - 0.5,
    "dayofyear": lambda t: (t.dayofyear - 1) / 365.0 - 0.5,
    "month": lambda t: (t.month - 1) / 11.0 - 0.5,
    "weekofyear": lambda t: (t.isocalendar().week.to_numpy() - 1) / 52.0 - 0.5,
}

# the features that vary within a cycle at each frequency (Time-Series-Library's choice)
MIN_CYCLES = 4
# each feature's cycle, in days
CYCLE_DAYS = {
    "minute": 1 / 24,
    "hour": 1.0,
    "dayofweek": 7.0,
    "dayofmonth": 30.4,
    "dayofyear": 365.25,
    "month": 365.25,
    "weekofyear": 365.25,
}

# (steps shorter than this many seconds, features)
_DAY = 86400.0
_BY_RESOLUTION = [
    (3600.0, ["minute", "hour", "dayofweek", "dayofmonth", "dayofyear"]),
    (_DAY, ["hour", "dayofweek", "dayofmonth", "dayofyear"]),
    (7 * _DAY, ["dayofweek", "dayofmonth", "dayofyear"]),
    (28 * _DAY, ["dayofmonth", "weekofyear"]),
    (365 * _DAY, ["month"]),
]


def calendar_names(calendar, freq: str | None, span_days: float | None = None) -> list[str]:
    """The feature names a forecaster's `calendar` parameter means for a series of `freq`
    whose training rows span `span_days` days (None: no limit by cycles).

    calendar: None (no features), "auto" (by frequency and span), or a list of names from
    FEATURES (taken as they are).
    """
    if calendar is None:
        return []
    if isinstance(calendar, str):
        if calendar != "auto":
            raise ConfigError(
                f"calendar must be None, 'auto' or a list of {sorted(FEATURES)}, got {calendar!r}"
            )
        names = _auto(freq)
        if span_days is not None:
            names = [n for n in names if span_days >= MIN_CYCLES * CYCLE_DAYS[n]]
        return names
    names = [str(name) for name in calendar]
    unknown = [n for n in names if n not in FEATURES]
    if unknown or len(set(names)) != len(names):
        raise ConfigError(
            f"calendar features must be distinct names from {sorted(FEATURES)}, got {names}"
        )
    return names


def _auto(freq: str | None) -> list[str]:
    if freq is None:
        raise ConfigError(
            "calendar='auto' needs timestamps with a regular frequency; name the features "
            f"instead ({sorted(FEATURES)}) or pass calendar=None"
        )
    seconds = _nominal_seconds(pd.tseries.frequencies.to_offset(freq))
    for shorter_than, names in _BY_RESOLUTION:
        if seconds < shorter_than:
            return list(names)
    return []  # yearly or coarser: nothing cycles


def _nominal_seconds(offset) -> float:
    """An offset's nominal length (a month 30.4 days, a business day one day)."""
    name = type(offset).__name__
    n = getattr(offset, "n", 1)
    if "Month" in name:
        return n * 30.4 * 86400
    if "Quarter" in name:
        return n * 91.3 * 86400
    if "Year" in name:
        return n * 365.25 * 86400
    if "Week" in name:
        return n * 7 * 86400
    if "Business" in name or name in ("Day", "CustomBusinessDay"):
        return n * _DAY
    return pd.Timedelta(offset).total_seconds()


def calendar_features(index, names: list[str]) -> np.ndarray:
    """[T, len(names)] float32 features of the timestamps in `index` (a DatetimeIndex)."""
    if not names:
        return np.zeros((len(index), 0), dtype=np.float32)
    if not isinstance(index, pd.DatetimeIndex):
        raise ConfigError("calendar features need timestamps (a DatetimeIndex or a date column)")
    return np.stack([np.asarray(FEATURES[n](index), dtype=np.float32) for n in names], axis=1)
