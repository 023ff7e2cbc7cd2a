"""The forecaster's input, read as a list of series with their covariates.

Two layouts, as the forecasting libraries use them:

* a **wide** frame (DatetimeIndex or a `date` column, a column per variable) or an array
  [T, C]: one series; every column not named as a covariate is a target;
* a **long** frame in neuralforecast's convention: `unique_id`, `ds`, `y` and covariate
  columns, one row per series and time step: many univariate series (different lengths,
  start dates and frequencies) for one global model. Static features come in a separate
  frame with a `unique_id` column and one row per series.

Every series is checked as `titans_seq.data.prepare_frame` checks a file (parseable,
unique, increasing timestamps on a regular grid, numeric, NaN/inf per the `missing`
policy); a column that no list names is refused rather than ignored.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd

from titans_seq.data import DataError, prepare_frame
from titans_seq.data.frames import DuplicateTimestampsError, infer_frequency, regular_grid
from titans_seq.data.tables import parse_timestamps
from titans_seq.errors import ConfigError

from .regular_panel import split_regular

ID, TIME, TARGET = "unique_id", "ds", "y"
_SHOW = 5


@dataclasses.dataclass(frozen=True)
class ExogLists:
    """Covariate column names: historical (known up to now), future (known over the
    horizon too) and static (one value per series)."""

    hist: tuple[str, ...] = ()
    futr: tuple[str, ...] = ()
    static: tuple[str, ...] = ()

    @classmethod
    def of(cls, hist, futr, static) -> ExogLists:
        lists = {}
        for name, value in (("hist_exog_list", hist), ("futr_exog_list", futr),
                            ("stat_exog_list", static)):  # fmt: skip
            if value is None:
                lists[name] = ()
                continue
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{name} must be a list of column names, got {value!r}")
            if len(set(value)) != len(value):
                raise ConfigError(f"{name} names a column twice: {list(value)}")
            reserved = [v for v in value if v in (ID, TIME, TARGET, "date")]
            if reserved:
                raise ConfigError(f"{name} may not name {reserved} (id, time or target)")
            lists[name] = tuple(value)
        both = set(lists["hist_exog_list"]) & set(lists["futr_exog_list"])
        both |= set(lists["stat_exog_list"]) & (
            set(lists["hist_exog_list"]) | set(lists["futr_exog_list"])
        )
        if both:
            raise ConfigError(f"a column is in two covariate lists: {sorted(both)}")
        return cls(lists["hist_exog_list"], lists["futr_exog_list"], lists["stat_exog_list"])

    @property
    def temporal(self) -> tuple[str, ...]:
        return self.hist + self.futr


@dataclasses.dataclass
class Series:
    """One series as arrays: target [T, C], hist [T, Kh], futr [T, Kf] (float64),
    static [Ks], its timestamps (or a RangeIndex) and frequency."""

    uid: str
    index: pd.Index
    target: np.ndarray
    hist: np.ndarray
    futr: np.ndarray
    static: np.ndarray
    freq: str | None

    def __len__(self) -> int:
        return len(self.index)

    @classmethod
    def of(cls, uid: str, index: pd.Index, target, hist=None, futr=None, static=None, freq=None):
        """A series from arrays; absent covariates become empty [T, 0] / [0] arrays, and the
        frequency of timestamps is inferred when not given."""
        empty = np.zeros((len(index), 0))
        return cls(
            uid=uid,
            index=index,
            target=np.asarray(target, dtype=np.float64),
            hist=empty if hist is None else np.asarray(hist, dtype=np.float64),
            futr=empty if futr is None else np.asarray(futr, dtype=np.float64),
            static=np.zeros(0) if static is None else np.asarray(static, dtype=np.float64),
            freq=freq if freq is not None else _frequency(index),
        )


def is_long_frame(data) -> bool:
    """True for a DataFrame in the long layout (`unique_id`, `ds` and `y` columns)."""
    return isinstance(data, pd.DataFrame) and {ID, TIME, TARGET} <= set(map(str, data.columns))


def checked_frame(data, missing: str, what: str) -> pd.DataFrame:
    """`prepare_frame`, plus: timestamps must lie on a regular grid without absent steps
    (unless `missing` fills them). Messages start with `what`."""
    try:
        frame = prepare_frame(data, missing=missing)
    except DuplicateTimestampsError as error:
        raise DataError(
            f"{what}: {error.found}; keep one row per time step: aggregate them (e.g. "
            "frame.groupby(level=0).mean()) or drop them (frame[~frame.index.duplicated()])"
        ) from None
    except DataError as error:
        raise DataError(f"{what}: {error}") from None
    if isinstance(frame.index, pd.DatetimeIndex) and len(frame) > 2:
        found = regular_grid(frame.index)  # the index itself when it is regular
        if found is not None and len(found[0]) > len(frame):
            grid, freq = found
            absent = grid[~grid.isin(frame.index)]
            raise DataError(
                f"{what}: {len(absent)} time step(s) are missing from the series' "
                f"{freq} grid (the first at {absent[0]}); pass missing='ffill' or "
                "'interpolate' to insert and fill them, or resample the series first"
            )
        if found is None:
            steps = frame.index.to_series().diff().dropna().value_counts()
            raise DataError(
                f"{what}: the timestamps have no regular frequency (steps seen: "
                f"{', '.join(str(s) for s in steps.index[:3])}); resample the series first"
            )
    return frame


def check_named_columns(names, columns, what: str) -> None:
    """DataError unless every covariate column in `names` is among `columns` (compared as
    strings): `what` says which input lacks them, e.g. "fit: X"."""
    given = [str(c) for c in columns]
    absent = [str(n) for n in names if str(n) not in given]
    if absent:
        shown = given[:10] + (["..."] if len(given) > 10 else [])
        raise DataError(f"{what} lacks the covariate column(s) {absent}; its columns: {shown}")


def _frequency(index: pd.Index) -> str | None:
    return infer_frequency(index) if isinstance(index, pd.DatetimeIndex) else None


def wide_series(data, lists: ExogLists, missing: str, what: str) -> tuple[Series, list[str]]:
    """(the one series of a wide frame or array, its column names). Columns named in the
    covariate lists are covariates, the others targets."""
    if lists.static:
        raise ConfigError(
            "stat_exog_list describes the series of a long frame (unique_id, ds, y); a wide "
            "frame is a single series"
        )
    frame = checked_frame(data, missing, what)
    columns = list(frame.columns)
    check_named_columns(lists.temporal, columns, f"{what}: the data")
    targets = [c for c in columns if c not in lists.temporal]
    if not targets:
        raise DataError(f"{what}: every column is a covariate; nothing is left to forecast")
    series = Series(
        uid="series",
        index=frame.index,
        target=frame[targets].to_numpy(np.float64),
        hist=frame[list(lists.hist)].to_numpy(np.float64),
        futr=frame[list(lists.futr)].to_numpy(np.float64),
        static=np.zeros(0),
        freq=_frequency(frame.index),
    )
    return series, columns


def long_series(
    data: pd.DataFrame,
    lists: ExogLists,
    missing: str,
    what: str,
    static_df: pd.DataFrame | None = None,
    static_required: bool = True,
    futr_required: bool = True,
) -> list[Series]:
    """The series of a long frame, sorted by id (as neuralforecast does), each by time.

    `futr_required=False` reads a history without the future covariates' columns (they then
    come from `futr_df` at predict time only when the caller asks); `static_required=False`
    leaves `static` empty when no static frame is given.
    """
    frame = data.rename(columns=str)
    needed = [TARGET, *lists.hist, *(lists.futr if futr_required else ())]
    absent = [c for c in needed if c not in frame.columns]
    if absent:
        raise DataError(f"{what}: column(s) {absent} are not in the long frame")
    unused = [c for c in frame.columns if c not in (ID, TIME, TARGET, *lists.temporal)]
    if unused:
        raise DataError(
            f"{what}: column(s) {unused[:_SHOW]} are neither {TARGET!r} nor named in "
            "hist_exog_list / futr_exog_list; name them there or drop them (static "
            "features go in static_df, one row per series)"
        )
    if frame[ID].isna().any():
        raise DataError(f"{what}: {int(frame[ID].isna().sum())} row(s) have no unique_id")
    if len(frame) == 0:
        raise DataError(f"{what}: the long frame has no rows")
    futr = [c for c in lists.futr if c in frame.columns]
    statics = static_table(static_df, lists, what) if static_df is not None else None
    value_columns = [TARGET, *lists.hist, *futr]
    regular, others = split_regular(frame[ID].astype(str), frame[TIME], frame[value_columns])
    result = []
    for uid in sorted(regular.keys() | others.keys()):
        if uid in regular:
            index, values, freq = regular[uid].index, regular[uid].values, regular[uid].freq
        else:
            index, values = _checked_series(frame.iloc[others[uid]], uid, value_columns,
                                            missing, what)  # fmt: skip
            freq = _frequency(index)
        if statics is not None:
            if uid not in statics.index:
                raise DataError(f"{what}: static_df has no row for series {uid!r}")
            static = statics.loc[uid].to_numpy(np.float64)
        elif lists.static and static_required:
            raise DataError(
                f"{what}: stat_exog_list names {list(lists.static)}: pass static_df with a "
                "unique_id column and one row per series"
            )
        else:
            static = np.zeros(0)
        hist_end = 1 + len(lists.hist)
        result.append(
            Series(
                uid=uid,
                index=index,
                target=values[:, :1],
                hist=values[:, 1:hist_end],
                futr=values[:, hist_end:],
                static=static,
                freq=freq,
            )  # fmt: skip
        )
    return result


def _checked_series(group: pd.DataFrame, uid: str, columns: list[str], missing: str, what: str):
    """(index [T], values [T, V] float64) of one series' rows of a long frame, checked as a
    file is: sorted by time, gaps filled or refused per `missing`, NaN handled."""
    body, steps = _time_ordered(group.drop(columns=[ID]), uid, missing, what)
    checked = checked_frame(body, missing, f"{what}: series {uid!r}")
    if steps is not None:
        checked.index = pd.Index(steps, name=TIME)
    return checked.index, checked[columns].to_numpy(np.float64)


def _time_ordered(group: pd.DataFrame, uid: str, missing: str, what: str):
    """(a series' rows sorted by `ds`, its integer steps or None). A long frame's rows need
    not be ordered; timestamps become a `date` column, integer steps are returned apart."""
    stamps = group[TIME]
    if pd.api.types.is_integer_dtype(stamps):
        return _integer_steps(group.sort_values(TIME, kind="stable"), uid, missing, what)
    try:
        parsed = parse_timestamps(stamps)
    except DataError as error:
        raise DataError(f"{what}: series {uid!r}: {error}") from None
    if parsed.isna().any():
        bad = stamps[parsed.isna()].iloc[:_SHOW].tolist()
        raise DataError(f"{what}: series {uid!r} has ds values that are not dates: {bad}")
    body = group.assign(**{TIME: parsed}).sort_values(TIME, kind="stable")
    return body.rename(columns={TIME: "date"}), None


def integer_step(steps: np.ndarray) -> int:
    """The regular step of increasing integer time steps: the greatest common divisor of
    their differences (1 for fewer than two steps)."""
    gaps = np.diff(np.asarray(steps, dtype=np.int64))
    return int(np.gcd.reduce(gaps)) if len(gaps) and (gaps > 0).all() else 1


def _integer_steps(body: pd.DataFrame, uid: str, missing: str, what: str):
    """(rows, integer steps) of a series whose `ds` are integers on a regular grid of any
    step (1, 5, 7...): absent steps are inserted as empty rows when `missing` fills gaps,
    else refused."""
    steps = body[TIME].to_numpy(np.int64)
    gaps = np.diff(steps)
    if (gaps == 0).any():
        repeated = steps[1:][gaps == 0][:_SHOW].tolist()
        raise DataError(f"{what}: series {uid!r} repeats the time step(s) {repeated}")
    step = integer_step(steps)
    rows = body.drop(columns=[TIME]).reset_index(drop=True)
    if (gaps == step).all():
        return rows, steps
    grid = np.arange(steps[0], steps[-1] + 1, step)
    absent = grid[~np.isin(grid, steps)]
    if missing == "error":
        raise DataError(
            f"{what}: series {uid!r} misses {len(absent)} of the integer time steps on its "
            f"grid of step {step} (the first at {int(absent[0])}); pass missing='ffill' or "
            "'interpolate' to insert and fill them"
        )
    warnings.warn(
        f"{what}: series {uid!r}: {len(absent)} integer time step(s) missing from its grid of "
        f"step {step} (the first at {int(absent[0])}) were inserted and will be filled",
        UserWarning,
        stacklevel=5,
    )
    rows.index = steps
    return rows.reindex(grid).reset_index(drop=True), grid


def static_table(static_df, lists: ExogLists, what: str) -> pd.DataFrame:
    """static_df indexed by unique_id with the stat_exog_list columns, checked."""
    if not lists.static:
        raise DataError(f"{what}: static_df given, but stat_exog_list names no columns")
    if not isinstance(static_df, pd.DataFrame) or ID not in static_df.columns:
        raise DataError(f"{what}: static_df must be a DataFrame with a {ID!r} column")
    absent = [c for c in lists.static if c not in static_df.columns]
    if absent:
        raise DataError(f"{what}: static_df lacks the column(s) {absent}")
    table = static_df.assign(**{ID: static_df[ID].astype(str)}).set_index(ID)
    if table.index.duplicated().any():
        dup = table.index[table.index.duplicated()].unique()[:_SHOW].tolist()
        raise DataError(f"{what}: static_df has several rows for series {dup}")
    values = table[list(lists.static)]
    bad = [c for c in values.columns if not pd.api.types.is_numeric_dtype(values[c])]
    if bad:
        raise DataError(f"{what}: static column(s) {bad} are not numeric; encode them first")
    if not np.isfinite(values.to_numpy(np.float64)).all():
        raise DataError(f"{what}: static_df has NaN or infinite values")
    return values.astype(np.float64)
