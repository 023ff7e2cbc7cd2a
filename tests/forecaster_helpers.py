"""A tiny forecaster and a small hourly series, shared by the framework adapters' tests."""

import numpy as np
import pandas as pd

# one epoch of a network small enough for conformance suites that fit hundreds of times
TINY_FORECASTER = dict(
    lookback=12,
    horizon=4,
    dim=8,
    depth=1,
    heads=1,
    patch_len=4,
    stride=4,
    ensemble_size=1,
    max_epochs=1,
    device="cpu",
    random_state=0,
    mixer_options={"chunk_size": 4},
)


def hourly_frame(n: int = 150, channels: int = 2, offset: float = 0.0) -> pd.DataFrame:
    """[n, channels] daily-period sines with a slight trend, hourly DatetimeIndex."""
    t = np.arange(n)[:, None]
    values = np.sin(2 * np.pi * t / 12 + np.arange(channels)) + 0.05 * t / n + offset
    index = pd.date_range("2024-01-01", periods=n, freq="h")
    return pd.DataFrame(values, index=index, columns=[f"c{i}" for i in range(channels)])
