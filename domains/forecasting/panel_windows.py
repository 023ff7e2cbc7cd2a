"""Series scaled per series and cut into windows that a batch gathers on demand.

A window is (series, start): context rows [start, start + L), target rows
[start + L, start + L + H). A start before the series' first row (a series shorter than
lookback + horizon) left-pads the context with the first row and marks the padding in the
mask. The windows of all series share one concatenated array per input, so a panel of many
series never materialises its [N, L, C] windows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from titans_seq.data import LogStandardScaler, StandardScaler, scaler_from_state
from titans_seq.training.tasks import BatchDataset

from .calendar import calendar_features
from .covariate_tokens import CovariateShape
from .series_input import Series


def _fit_scaler(values: np.ndarray) -> StandardScaler | None:
    return StandardScaler().fit(values) if values.shape[1] else None


def _state(scaler: StandardScaler | None):
    return None if scaler is None else scaler.state_dict()


def _from_state(state) -> StandardScaler | None:
    return None if state is None else StandardScaler.from_state_dict(state)


@dataclasses.dataclass
class SeriesScaler:
    """z-scoring of one series' target, historical and future columns, fit on its training
    rows (a constant column gets scale 1); with `log_target` the target's logarithm (a
    positive series). Static features are scaled across series."""

    target: StandardScaler | LogStandardScaler
    hist: StandardScaler | None
    futr: StandardScaler | None

    @classmethod
    def fit(cls, series: Series, rows: int, log_target: bool = False) -> SeriesScaler:
        target = LogStandardScaler() if log_target else StandardScaler()
        return cls(
            target.fit(series.target[:rows]),
            _fit_scaler(series.hist[:rows]),
            _fit_scaler(series.futr[:rows]),
        )

    def state_dict(self) -> dict:
        return {"target": self.target.state_dict(), "hist": _state(self.hist),
                "futr": _state(self.futr)}  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: dict) -> SeriesScaler:
        return cls(
            scaler_from_state(state["target"]),
            _from_state(state["hist"]),
            _from_state(state["futr"]),
        )


@dataclasses.dataclass
class EncodedSeries:
    """Model-ready float32 arrays of one series: target [T, C], past covariates [T, Kp]
    (historical, future, calendar), future covariates [T, Kf] (future, calendar), static
    [Ks]."""

    target: np.ndarray
    past: np.ndarray
    future: np.ndarray
    static: np.ndarray

    def __len__(self) -> int:
        return len(self.target)


def _scaled(scaler: StandardScaler | None, values: np.ndarray) -> np.ndarray:
    return values if scaler is None else scaler.transform(values)


def encode(
    series: Series,
    scaler: SeriesScaler,
    calendar: list[str],
    static_scaler: StandardScaler | None,
) -> EncodedSeries:
    """The series scaled and with its calendar features."""
    futr = np.concatenate(
        [_scaled(scaler.futr, series.futr), calendar_features(series.index, calendar)], axis=1
    ).astype(np.float32)
    past = np.concatenate([_scaled(scaler.hist, series.hist).astype(np.float32), futr], axis=1)
    static = series.static if static_scaler is None else static_scaler.transform(series.static)
    return EncodedSeries(
        scaler.target.transform(series.target).astype(np.float32),
        past,
        futr,
        np.asarray(static, dtype=np.float32),
    )


@dataclasses.dataclass
class WindowRanges:
    """Windows as one range of starts per series: series i's windows start at first[i],
    first[i] + 1, ..., first[i] + count[i] - 1 ([S] each). Window p of all of them is
    found by a search over the cumulative counts, so that a panel's windows are never
    listed one by one (100,000 series of a few hundred windows each would be a table of
    tens of millions of rows)."""

    first: np.ndarray
    count: np.ndarray

    def __post_init__(self) -> None:
        self.first = np.asarray(self.first, dtype=np.int64)
        self.count = np.asarray(self.count, dtype=np.int64)
        self.ends = np.cumsum(self.count)  # [S]: one past each series' last window

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def pairs(self, positions: np.ndarray) -> np.ndarray:
        """[B, 2] (series, start) of the windows at `positions` [B]."""
        positions = np.asarray(positions, dtype=np.int64)
        which = np.searchsorted(self.ends, positions, side="right")
        start = self.first[which] + positions - (self.ends[which] - self.count[which])
        return np.stack([which, start], axis=1)

    def subset(self, positions: np.ndarray) -> WindowList:
        return WindowList(self.pairs(positions))


@dataclasses.dataclass
class WindowList:
    """Windows listed as [N, 2] (series, start) rows: a forecast's one window per series, or
    a subset of `WindowRanges`."""

    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.rows)

    def pairs(self, positions: np.ndarray) -> np.ndarray:
        return self.rows[np.asarray(positions, dtype=np.int64)]


def window_starts(
    lengths: list[int],
    train_rows: list[int],
    lookback: int,
    horizon: int,
    min_context: int,
    history_rows: int = 0,
) -> tuple[WindowRanges, WindowRanges]:
    """(training windows, validation windows) of a panel, each series' as a range.

    Training windows lie in each series' first `train_rows[i]` rows; a series too short for
    a full window gets left-padded ones with at least `min_context` observed context rows.
    With `history_rows`, training windows of a series long enough start after that many
    rows, so that their history is all observed. Validation windows forecast rows past
    `train_rows[i]` (their context may reach back into the training rows, as in the
    benchmark protocol).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    rows = np.asarray(train_rows, dtype=np.int64)
    first = np.where(rows >= lookback + horizon, 0, min_context - lookback)
    if history_rows:
        first = np.where(rows >= history_rows + lookback + horizon, history_rows, first)
    train = WindowRanges(first, np.maximum(rows - lookback - horizon + 1 - first, 0))
    val_count = np.where(rows < lengths, lengths - rows - horizon + 1, 0)
    return train, WindowRanges(rows - lookback, np.maximum(val_count, 0))


class PanelWindows(BatchDataset):
    """Windows of encoded series. get_batch -> (inputs, y [B, H, C]) where inputs holds
    x [B, L, C] and, as `shape` asks, past [B, L, Kp], future [B, H, Kf], static [B, Ks],
    mask [B, L] (the keyword arguments of `SimbaForecaster.forward`); with
    `history_windows` K > 0 also history [B, K, L, C] (and history_past [B, K, L, Kp]): the
    K lookback windows before each context, rows before the series' start repeating its
    first row."""

    def __init__(
        self,
        series: list[EncodedSeries],
        windows: WindowRanges | WindowList,
        lookback: int,
        horizon: int,
        shape: CovariateShape,
        history_windows: int = 0,
    ):
        self.windows, self.lookback, self.horizon, self.shape = windows, lookback, horizon, shape
        self.history_windows = history_windows
        lengths = np.asarray([len(s) for s in series], dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self.lengths = lengths
        cat = lambda arrays: torch.from_numpy(np.concatenate(arrays))  # noqa: E731
        self.target = cat([s.target for s in series])
        self.past = cat([s.past for s in series])
        self.future = cat([s.future for s in series])
        self.static = torch.from_numpy(np.stack([s.static for s in series]))

    def __len__(self) -> int:
        return len(self.windows)

    def get_batch(self, indices):
        picked = self.windows.pairs(np.asarray(list(indices), dtype=np.int64))
        which, start = picked[:, 0], picked[:, 1]
        rows = start[:, None] + np.arange(self.lookback + self.horizon)  # [B, L + H]
        clipped = np.clip(rows, 0, self.lengths[which][:, None] - 1) + self.offsets[which][:, None]
        context = torch.from_numpy(clipped[:, : self.lookback])
        ahead = torch.from_numpy(clipped[:, self.lookback :])
        inputs = {"x": self.target[context]}
        if self.shape.past:
            inputs["past"] = self.past[context]
        if self.shape.future:
            inputs["future"] = self.future[ahead]
        if self.shape.static:
            inputs["static"] = self.static[torch.from_numpy(which)]
        if self.shape.observed_mask:
            inputs["mask"] = torch.from_numpy(rows[:, : self.lookback] >= 0).float()
        if self.history_windows:
            K, L = self.history_windows, self.lookback
            earlier = start[:, None] - K * L + np.arange(K * L)  # [B, K * L]
            earlier = np.clip(earlier, 0, self.lengths[which][:, None] - 1)
            earlier = torch.from_numpy(earlier + self.offsets[which][:, None])
            inputs["history"] = self.target[earlier].view(len(which), K, L, -1)
            if self.shape.past:
                inputs["history_past"] = self.past[earlier].view(len(which), K, L, -1)
        return inputs, self.target[ahead]
