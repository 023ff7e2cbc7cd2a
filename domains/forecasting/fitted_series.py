"""What a fitted forecaster keeps of each training series: its scaling and its last rows
(so that `predict()` continues the series without being given them again), as JSON."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from titans_seq.data import DataError

from .panel_windows import SeriesScaler
from .series_input import Series


@dataclasses.dataclass
class FittedSeries:
    tail: Series  # the last `lookback` rows, original units
    scaler: SeriesScaler

    @classmethod
    def of(cls, series: Series, scaler: SeriesScaler, lookback: int) -> FittedSeries:
        keep = slice(max(0, len(series) - lookback), None)
        tail = dataclasses.replace(
            series,
            index=series.index[keep],
            target=series.target[keep],
            hist=series.hist[keep],
            futr=series.futr[keep],
        )
        return cls(tail, scaler)

    def to_json(self) -> dict:
        t = self.tail
        return {
            "uid": t.uid,
            "index": [str(v) for v in t.index],
            "index_is_datetime": isinstance(t.index, pd.DatetimeIndex),
            "freq": t.freq,
            "target": t.target.tolist(),
            "hist": t.hist.tolist(),
            "futr": t.futr.tolist(),
            "static": t.static.tolist(),
            "scaler": self.scaler.state_dict(),
        }

    @classmethod
    def from_json(cls, state: dict, where: str = "saved series") -> FittedSeries:
        """The series `to_json` wrote; DataError naming `where` (the file and series) for a
        state that is cut short or edited into another shape."""
        try:
            return cls._from_json(state, where)
        except DataError:  # already names what is wrong (a ValueError, caught below else)
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise DataError(f"{where} is damaged ({type(error).__name__}: {error})") from None

    @classmethod
    def _from_json(cls, state: dict, where: str) -> FittedSeries:
        rows = len(state["index"])
        index = (
            pd.DatetimeIndex(pd.to_datetime(state["index"]), name="date")
            if state["index_is_datetime"]
            else pd.Index([int(v) for v in state["index"]])
        )

        def table(key: str) -> np.ndarray:
            values = np.asarray(state[key], dtype=np.float64)
            if not values.size:
                return np.zeros((rows, 0))
            if values.ndim != 2 or values.shape[0] != rows:
                raise DataError(
                    f"{where}: {key!r} holds {values.shape[0] if values.ndim else 0} rows of "
                    f"shape {values.shape[1:]}, its index {rows} rows: the file was cut short "
                    "or edited"
                )
            return values

        tail = Series(
            uid=state["uid"],
            index=index,
            target=table("target"),
            hist=table("hist"),
            futr=table("futr"),
            static=np.asarray(state["static"], dtype=np.float64),
            freq=state["freq"],
        )
        return cls(tail, SeriesScaler.from_state_dict(state["scaler"]))
