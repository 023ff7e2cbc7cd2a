"""The forecaster's `"auto"` settings: each a rule of the data's shape, with its reason.

NHITS asks for an input size, AutoETS for a season length; a user without either in mind
should still get a sensible model from `TitansForecaster(horizon=h)`. The rules read the
rows each series offers for training (the median over a panel's series), the number of
series, the horizon `h` and the season length `m` of the data's frequency
(`season_length`). The measurements behind each are in benchmarks/results/NOTES.md ("The
forecaster's defaults: the evidence behind each rule") and docs/benchmarks.md.

- lookback: `max(2h, m)`, two horizons and one full season. Intraday data gets at least
  its week (`week_length`, up to `WEEK_IN_VIEW_ROWS` rows) where the rows hold
  `WEEKS_TO_LEARN` weeks: the day of the week the horizon falls on is then in view. With
  `MANY_WINDOWS` training windows at that length, a quarter of the training rows up to
  `max(2h, m, LONG_LOOKBACK)`, where that adds a whole season: longer windows add cost
  faster than accuracy on long series, and part of a season seen twice makes a window's
  level depend on where in the season it ends. Neither longer lookback where the data's
  increments are unpredictable (no autocorrelation of the first differences at lags 1 to
  `m` reaches `PREDICTABLE_INCREMENTS`, a negative one not counting): a random walk's best
  forecast is near its last value and older rows only add inputs to overfit. Never more
  than half the rows left after the horizon, so that half the rows start a window, nor
  less than one patch needs.
- epoch windows: every training window up to `EPOCH_WINDOWS`, beyond that that many drawn
  at random, the next epoch continuing the same order: neighbouring windows of a long
  series differ by one row. Validation reads at most `VALIDATION_WINDOWS`, evenly spaced.
- epochs: enough to show the model about `WINDOWS_SEEN` windows, and a panel's global
  model `SERIES_WINDOWS_SEEN` windows of each series where that is more (it learns every
  series' patterns), between `MIN_EPOCHS` and `MAX_EPOCHS`; patience a tenth of them, at
  least `MIN_PATIENCE`.
- width and ensemble: below `MANY_WINDOWS` windows the mean of `FEW_WINDOWS_ENSEMBLE`
  networks `FEW_WINDOWS_DIM` wide, each from a seed of its own (one narrow fit's forecast
  swings with its seed), else one network `DIM` wide.
- batch and learning rate: `BATCH` windows a step at `LEARNING_RATE`; where the schedule
  shows the model more than `LARGE_BATCH_WINDOWS` windows (a panel of hundreds of series,
  500 windows of each), `LARGE_BATCH`: a step of a small network costs about as much for 128
  windows as for 32 on a CPU, so the same windows train in a quarter of the steps, over a
  thousand of them still. Shorter schedules keep 32: there the fewer steps cost accuracy.
  The learning rate grows with the batch (linearly, up to `MAX_LEARNING_RATE_SCALE` times),
  so that fewer steps still travel as far.
- weight average: on those long schedules the weights evaluated and kept are the moving
  average of the trained ones over about 1 / (1 - `WEIGHT_AVERAGE_DECAY`) steps: a step
  of 128 windows from hundreds of series still moves the weights by its batch's noise.
  Shorter schedules keep the trained weights, where early stopping reads each epoch.
- loss: absolute error (the median) below `MANY_WINDOWS` windows or on a panel of
  `MANY_SERIES` series, where a few large errors would dominate a squared loss; else
  squared error (the mean).
- target transform: the logarithm of a panel of `MANY_SERIES` or more series whose every
  training value is positive, where the loss is absolute error (a median, which the
  logarithm keeps: the exponential of the median of log y is the median of y): the network
  then learns every series' relative changes, the errors that sMAPE and MASE count alike
  across series of different levels, as the M4 winners' networks did (ES-RNN's log of the
  deseasonalised level). Elsewhere the values themselves.
- refit: below `MANY_WINDOWS` windows, where the hold-out is a large share of the data,
  train again on every row for the epochs the hold-out chose; a series whose validation
  fraction is shorter than the horizon then holds out one horizon.
- center: below `MANY_WINDOWS` windows with a hold-out, the windows' mean, last value and,
  where the lookback holds `TREND_SEASONS` seasons of a known season, least-squares trend
  compete on the hold-out; another center than the mean is kept only if its loss is lower
  by `CENTER_MARGIN`, since the hold-out cannot tell close ones apart. Longer series keep
  the mean.
- mixer: with a hold-out of at least `MIXER_VALIDATION_WINDOWS` windows and a schedule of
  at most `LARGE_BATCH_WINDOWS` windows, networks with the Titans memory ("lmm") and with
  full attention are both trained and compared on the hold-out; attention is kept only if
  its loss is lower by `MIXER_MARGIN`. Neither wins everywhere (attention is ahead on a
  quarterly macroeconomic panel, the memory on ETTm1 and the short yearly and monthly
  series). A hold-out of a few windows cannot judge two architectures: on airline
  passengers (one validation window) and lynx (two) it chose attention at one seed in five
  each, and the test error doubled and grew by half. Longer schedules (panels of hundreds
  of series) keep the memory alone, where a second fit would double minutes of training;
  so does a fit given `mixer_options` (they are the memory's).

Each choice is stored on the fitted estimator (`lookback_`, `max_epochs_`,
`epoch_windows_`, `patience_`, `refit_epochs_`, `dim_`, `heads_`, `ensemble_size_`, `loss_`,
`center_`, `mixer_`, `batch_size_`, `learning_rate_`, `ema_decay_`, `target_transform_`); the
seasonal naive forecast's weight, chosen on the hold-out too, is in `baseline.py`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

AUTO = "auto"
LONG_LOOKBACK = 96
PREDICTABLE_INCREMENTS = 0.1
MANY_WINDOWS = 500
MANY_SERIES = 100
WINDOWS_SEEN = 100_000
SERIES_WINDOWS_SEEN = 500
EPOCH_WINDOWS = 25_000
VALIDATION_WINDOWS = 10_000
MIN_EPOCHS, MAX_EPOCHS = 2, 200
MIN_PATIENCE = 3
DIM, HEADS = 64, 4
FEW_WINDOWS_DIM, FEW_WINDOWS_HEADS = 16, 2
FEW_WINDOWS_ENSEMBLE = 5
CENTER_MARGIN = 0.01
MIXERS_COMPARED = ("lmm", "attention")  # the first is kept unless another is clearly better
MIXER_MARGIN = 0.01
MIXER_VALIDATION_WINDOWS = 100
TREND_SEASONS = 2
WEEK_IN_VIEW_ROWS = 336
WEEKS_TO_LEARN = 3
BATCH, LEARNING_RATE = 32, 1e-3
LARGE_BATCH, LARGE_BATCH_WINDOWS = 128, 150_000
WEIGHT_AVERAGE_DECAY = 0.99
MAX_LEARNING_RATE_SCALE = 3.0

_SECONDS_A_DAY = 86_400


def season_length(freq: str | None) -> int:
    """Steps in the data's main cycle: a day for intraday steps (24 for hourly, 96 for
    15-minute), a week for daily (7; 5 for business days), a year for weekly (52), monthly
    (12) and quarterly (4) data; 1 for yearly, integer or unknown steps."""
    if not freq:
        return 1
    try:
        offset = pd.tseries.frequencies.to_offset(freq)
    except ValueError:
        return 1
    name = offset.name.split("-")[0].upper()
    if name in ("B", "C"):
        return 5
    if name == "D":  # pandas 3 counts days by the calendar: not a fixed duration
        return 7 if offset.n == 1 else 1
    if name.startswith("W"):
        return 52
    if name in ("M", "ME", "MS", "BM", "BME", "BMS", "SM", "SME", "SMS"):
        return 12 // max(1, offset.n) or 1
    if name.startswith("Q") or name.startswith("BQ"):
        return 4 // max(1, offset.n) or 1
    if name.startswith(("A", "Y", "BA", "BY")):
        return 1
    try:
        seconds = pd.Timedelta(offset).total_seconds()
    except ValueError:
        return 1
    if seconds <= 0:
        return 1
    if seconds < _SECONDS_A_DAY:
        return max(1, round(_SECONDS_A_DAY / seconds))
    if seconds == _SECONDS_A_DAY:
        return 7
    return 1


@dataclasses.dataclass(frozen=True)
class DataShape:
    """What the rules read from the data: training rows per series (median over a panel),
    the number of series, the horizon, the frequency and the increments' largest
    autocorrelation up to a season (`increment_autocorrelation`; None: not known, read as
    predictable)."""

    rows: int
    series: int
    horizon: int
    freq: str | None
    increment_autocorrelation: float | None = None


def increment_autocorrelation(columns: list[np.ndarray], max_lag: int) -> float | None:
    """The largest autocorrelation (signed: the most positive) of the first differences at
    lags 1..`max_lag`, pooled over `columns` (1-D arrays, one per series and target column;
    NaN marks a missing row, and an increment touching one is left out). Each column's
    increments are centred and scaled to unit variance, so every increment weighs the same;
    columns with fewer than `max_lag + 2` increments or none that vary are skipped. None
    when no column is left."""
    max_lag = max(1, int(max_lag))
    products = np.zeros(max_lag + 1)
    for values in columns:
        steps = np.diff(np.asarray(values, dtype=np.float64))
        known = np.isfinite(steps)
        if known.sum() < max_lag + 2:
            continue
        centred = steps - steps[known].mean()
        spread = centred[known].std()
        if not spread > 0:
            continue
        z = np.where(known, centred / spread, 0.0)
        products += _lagged_products(z, max_lag)
    if not products[0] > 0:
        return None
    return float((products[1:] / products[0]).max())


def _lagged_products(z: np.ndarray, max_lag: int) -> np.ndarray:
    """sum_t z[t] z[t - k] for k = 0..max_lag (by FFT: a long series' cost does not grow
    with the lags)."""
    size = 1 << int(2 * len(z) - 1).bit_length()
    spectrum = np.fft.rfft(z, size)
    return np.fft.irfft(spectrum * np.conj(spectrum), size)[: max_lag + 1]


def week_length(freq: str | None) -> int | None:
    """Steps in a week for intraday data (168 hourly, 672 for 15-minute steps): its second
    cycle, around the day; None for daily and longer steps, where the week is the main
    season or less than a step."""
    day = season_length(freq)
    try:
        seconds = pd.Timedelta(pd.tseries.frequencies.to_offset(freq)).total_seconds()
    except (TypeError, ValueError):
        return None
    if not 0 < seconds < _SECONDS_A_DAY or day <= 1:
        return None
    return 7 * day


def choose_lookback(shape: DataShape, min_lookback: int = 1) -> int:
    """The lookback for `shape` (see the module's rules); at least `min_lookback` (what one
    patch needs) and at least 1."""
    h, m = shape.horizon, season_length(shape.freq)
    lookback = low = max(2 * h, m)
    # a random walk's older rows add inputs to overfit, not information
    predictable = (
        shape.increment_autocorrelation is None
        or shape.increment_autocorrelation >= PREDICTABLE_INCREMENTS
    )
    week = week_length(shape.freq)
    if (
        predictable
        and week is not None
        and week <= WEEK_IN_VIEW_ROWS
        and shape.rows >= WEEKS_TO_LEARN * week
        and shape.series * (shape.rows - week - h + 1) >= MANY_WINDOWS
    ):
        # intraday data's weekly cycle in every window: the day of the week the horizon
        # falls on is then in view (weekends, weekday peaks)
        lookback = low = max(low, week)
    if predictable and shape.series * (shape.rows - low - h + 1) >= MANY_WINDOWS:
        longer = min(max(shape.rows // 4, low), max(low, LONG_LOOKBACK))
        # only a whole further season: a window of 1.85 years of weeks holds part of a
        # season twice, and its level then depends on where in the year it ends
        if longer >= low + m:
            lookback = longer
    lookback = min(lookback, (shape.rows - h) // 2)
    return max(lookback, min_lookback, 1)


def choose_epochs(windows_per_epoch: int, series: int = 1) -> int:
    """Epochs that show the model about WINDOWS_SEEN windows, or SERIES_WINDOWS_SEEN of
    each of `series` series where that is more, within [MIN_EPOCHS, MAX_EPOCHS]."""
    seen = max(WINDOWS_SEEN, SERIES_WINDOWS_SEEN * series)
    wanted = math.ceil(seen / max(1, windows_per_epoch))
    return min(max(wanted, MIN_EPOCHS), MAX_EPOCHS)


def choose_epoch_windows(windows: int, epoch_windows: int | None = None) -> int:
    """Training windows per epoch: `epoch_windows` (None: EPOCH_WINDOWS), at most the
    `windows` there are, at least 1."""
    wanted = EPOCH_WINDOWS if epoch_windows is None else epoch_windows
    return max(1, min(windows, wanted))


def validation_subset(count: int) -> np.ndarray:
    """Indices of the validation windows read, of `count`: all of them up to
    VALIDATION_WINDOWS, else VALIDATION_WINDOWS evenly spaced (first and last included)."""
    if count <= VALIDATION_WINDOWS:
        return np.arange(count)
    return np.linspace(0, count - 1, VALIDATION_WINDOWS).round().astype(np.int64)


def choose_patience(max_epochs: int) -> int:
    return max(MIN_PATIENCE, max_epochs // 10)


def choose_width(windows: int, dim: int | None = None, heads: int | None = None):
    """(dim, heads) for `windows` training windows: (FEW_WINDOWS_DIM, FEW_WINDOWS_HEADS)
    below MANY_WINDOWS, else (DIM, HEADS); a given `dim` or `heads` (None: choose) is kept
    and the other fitted to it: the chosen width rounded up to a multiple of the given
    heads, or the most heads up to the chosen number that divide the given width."""
    few = windows < MANY_WINDOWS
    wanted_dim = FEW_WINDOWS_DIM if few else DIM
    wanted_heads = FEW_WINDOWS_HEADS if few else HEADS
    if dim is None and heads is None:
        return wanted_dim, wanted_heads
    if dim is None:
        return -(-wanted_dim // heads) * heads, heads
    if heads is None:
        return dim, max(h for h in range(1, wanted_heads + 1) if dim % h == 0)
    return dim, heads


def choose_loss(windows: int, quantiles, series: int = 1) -> str:
    """The point head's training loss: "mae" (the median) below MANY_WINDOWS training
    windows or for a panel of MANY_SERIES or more series, else "mse" (the mean); "mse" for
    a quantile head, which trains on the pinball loss whatever this says."""
    robust = windows < MANY_WINDOWS or series >= MANY_SERIES
    return "mae" if robust and not quantiles else "mse"


def choose_target_transform(series: int, loss: str, positive: bool) -> str | None:
    """ "log" for a panel of MANY_SERIES or more `positive` series trained on absolute error
    ("mae"), else None (the values themselves)."""
    return "log" if series >= MANY_SERIES and loss == "mae" and positive else None


def choose_refit(windows: int) -> bool:
    """Whether to train again on every row for the epochs the hold-out chose: below
    MANY_WINDOWS training windows."""
    return windows < MANY_WINDOWS


def choose_centers(
    windows: int, has_holdout: bool, lookback: int = 0, season: int = 1
) -> tuple[str, ...]:
    """The window centers to train and compare on the hold-out: below MANY_WINDOWS
    training windows, with a hold-out, ("mean", "last"), and "trend" as well where the
    lookback holds at least TREND_SEASONS whole seasons of a known season (`season` > 1);
    else ("mean",)."""
    if windows >= MANY_WINDOWS or not has_holdout:
        return ("mean",)
    if season > 1 and lookback >= TREND_SEASONS * season:
        return ("mean", "last", "trend")
    return ("mean", "last")


def choose_center(validation_losses: dict[str, float]) -> str:
    """The center other than "mean" with the lowest validation loss if that loss is below
    the mean's by more than CENTER_MARGIN of it, else "mean" (`validation_losses`: each
    compared center's loss, "mean" among them)."""
    return clearly_better(validation_losses, "mean", CENTER_MARGIN)


def clearly_better(validation_losses: dict[str, float], default: str, margin: float) -> str:
    """The option other than `default` with the lowest validation loss if that loss is
    below the default's by more than `margin` of it, else `default`: a hold-out cannot tell
    close options apart, and the default is the one the rules trust without it."""
    others = [name for name in validation_losses if name != default]
    if not others:
        return default
    best = min(others, key=validation_losses.__getitem__)
    clearly_lower = validation_losses[best] < (1.0 - margin) * validation_losses[default]
    return best if clearly_lower else default


def choose_mixers(windows_seen: int, validation_windows: int) -> tuple[str, ...]:
    """The mixers to train and compare on the hold-out: MIXERS_COMPARED with at least
    MIXER_VALIDATION_WINDOWS validation windows and a schedule of at most
    LARGE_BATCH_WINDOWS windows (`windows_seen`: epochs x windows per epoch), else the
    memory ("lmm") alone."""
    enough = validation_windows >= MIXER_VALIDATION_WINDOWS
    if enough and windows_seen <= LARGE_BATCH_WINDOWS:
        return MIXERS_COMPARED
    return MIXERS_COMPARED[:1]


def choose_mixer(validation_losses: dict[str, float]) -> str:
    """The mixer other than the first of MIXERS_COMPARED with the lowest validation loss if
    that loss is below the first's by more than MIXER_MARGIN of it, else the first
    (`validation_losses`: each compared mixer's loss)."""
    return clearly_better(validation_losses, MIXERS_COMPARED[0], MIXER_MARGIN)


def choose_weight_average(windows_seen: int) -> float | None:
    """The decay of the trained weights' moving average for a schedule of `windows_seen`
    training windows: WEIGHT_AVERAGE_DECAY above LARGE_BATCH_WINDOWS, else None (none)."""
    return WEIGHT_AVERAGE_DECAY if windows_seen > LARGE_BATCH_WINDOWS else None


def choose_batch(
    windows_seen: int, batch_size: int | None = None, learning_rate: float | None = None
) -> tuple[int, float]:
    """(batch size, learning rate) for a schedule of `windows_seen` training windows (epochs
    x windows per epoch): LARGE_BATCH above LARGE_BATCH_WINDOWS, else BATCH (or
    `batch_size`); LEARNING_RATE times the batch's multiple of BATCH, between 1 and
    MAX_LEARNING_RATE_SCALE (or `learning_rate`)."""
    if batch_size is None:
        batch_size = LARGE_BATCH if windows_seen > LARGE_BATCH_WINDOWS else BATCH
    if learning_rate is None:
        scale = min(max(batch_size / BATCH, 1.0), MAX_LEARNING_RATE_SCALE)
        learning_rate = LEARNING_RATE * scale
    return batch_size, learning_rate


def choose_ensemble_size(windows: int) -> int:
    """How many networks, each from a seed of its own, the forecast averages:
    FEW_WINDOWS_ENSEMBLE below MANY_WINDOWS training windows, else one."""
    return FEW_WINDOWS_ENSEMBLE if windows < MANY_WINDOWS else 1
