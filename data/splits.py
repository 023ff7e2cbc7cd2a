"""Train/val/test borders of the long-horizon forecasting benchmarks (Informer/Autoformer/TSLib).

Borders are row ranges [start, end) into the full series. Validation and test start
`lookback` rows *before* their first target row: a window's input may reach back into
the previous split, exactly as the reference code does, so every row of a split is
forecast and no target row is shared between splits.

- "ett_hour"  (ETTh1/ETTh2): 12/4/4 months of 30 days; only the first 20 months are used.
      train [0, 8640)   val [8640 - L, 11520)   test [11520 - L, 14400)
- "ett_15min" (ETTm1/ETTm2): the same borders x4 (four rows per hour).
      train [0, 34560)  val [34560 - L, 46080)  test [46080 - L, 57600)
- "custom"    (ECL, Traffic, Weather, any user CSV): 70/10/20 of N rows,
      num_train = int(0.7 N), num_test = int(0.2 N), num_val = N - num_train - num_test;
      train [0, num_train)  val [num_train - L, num_train + num_val)  test [N - num_test - L, N)

The scaler is fit on the train rows, borders.slice("train") (no lookback overlap there).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import DataError

HOURS_PER_MONTH = 30 * 24  # the benchmark's "month" is 30 days
PROTOCOLS = ("ett_hour", "ett_15min", "custom")
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitBorders:
    """Row ranges [start, end) of the three splits (val/test include the lookback overlap)."""

    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]

    def __getitem__(self, split: str) -> tuple[int, int]:
        if split not in SPLITS:
            raise KeyError(f"split must be one of {SPLITS}, got {split!r}")
        return getattr(self, split)

    def slice(self, split: str) -> slice:
        start, end = self[split]
        return slice(start, end)


def ett_borders(n_rows: int, lookback: int, rows_per_hour: int = 1) -> SplitBorders:
    """ETT borders: 12/4/4 months (of 30 days) at `rows_per_hour` rows per hour."""
    month = HOURS_PER_MONTH * rows_per_hour
    train_end, val_end, test_end = 12 * month, 16 * month, 20 * month
    if n_rows < test_end:
        raise DataError(
            f"the ETT protocol uses the first 20 months ({test_end} rows at {rows_per_hour} "
            f"row(s) per hour) but the series has only {n_rows} rows; use protocol='custom'"
        )
    _check_lookback(lookback, train_end, "train")
    return SplitBorders(
        train=(0, train_end),
        val=(train_end - lookback, val_end),
        test=(val_end - lookback, test_end),
    )


def custom_borders(
    n_rows: int, lookback: int, train_ratio: float = 0.7, test_ratio: float = 0.2
) -> SplitBorders:
    """70/10/20 borders of Autoformer's `Dataset_Custom` (int() truncation as there)."""
    if not (0 < train_ratio < 1 and 0 < test_ratio < 1 and train_ratio + test_ratio < 1):
        raise ValueError(f"bad ratios: train {train_ratio}, test {test_ratio}")
    num_train = int(n_rows * train_ratio)
    num_test = int(n_rows * test_ratio)
    num_val = n_rows - num_train - num_test
    _check_lookback(lookback, num_train, "train")
    return SplitBorders(
        train=(0, num_train),
        val=(num_train - lookback, num_train + num_val),
        test=(n_rows - num_test - lookback, n_rows),
    )


def split_borders(protocol: str, n_rows: int, lookback: int) -> SplitBorders:
    """Borders of the named protocol ("ett_hour", "ett_15min" or "custom")."""
    if lookback < 1:
        raise ValueError(f"lookback must be >= 1, got {lookback}")
    if protocol == "ett_hour":
        return ett_borders(n_rows, lookback, rows_per_hour=1)
    if protocol == "ett_15min":
        return ett_borders(n_rows, lookback, rows_per_hour=4)
    if protocol == "custom":
        return custom_borders(n_rows, lookback)
    raise ValueError(f"unknown split protocol {protocol!r}; choose one of {PROTOCOLS}")


def _check_lookback(lookback: int, train_rows: int, split: str) -> None:
    # val starts `lookback` rows before the end of train; it cannot start before row 0
    if lookback > train_rows:
        raise DataError(
            f"lookback {lookback} is longer than the {split} split ({train_rows} rows); "
            "the validation windows would start before the first row"
        )
