"""The forecaster's `"auto"` settings: lookback, epochs and patience chosen from the data.

NHITS asks for an input size, AutoETS for a season length; a user without either in mind
should still get a sensible model from `TitansForecaster(horizon=h)`. The rules, from the
rows each series offers for training (the median over a panel's series), the horizon `h`
and the season length `m` of the data's frequency (`season_length`):

- lookback: `max(2h, m)` (two horizons, as neuralforecast's examples take, and one full
  season); with enough data to learn from a longer window (`MANY_WINDOWS` training windows
  over all series at that length) a quarter of the training rows, up to `max(2h, m, 96)`
  (96 is the long-horizon benchmarks' input length: longer windows add cost faster than
  accuracy on long series), provided that adds at least one whole season (weekly data
  stays at 52 weeks: on seven weekly influenza series forecast 24 ahead, 52 weeks gave MSE
  1.49 and 96 weeks 1.75 over three seeds; 2,284 co2 weeks 0.000779 and 0.000808). Rounding
  every longer lookback down to whole seasons was no better (a quarterly panel 0.585 against
  0.561, daily exchange rates 0.0147 against 0.0139). Never more than half of what remains
  after the horizon, so that at least half the rows start a training window, nor less than
  one patch needs. Nor is the lookback made longer where the past does not predict the
  data's increments (first differences): where no autocorrelation of the increments at lags
  1 to `m` (pooled over the panel's series and columns) reaches `PREDICTABLE_INCREMENTS`,
  the series moves as a random walk, its best forecast is near the last value, and a longer
  window only adds inputs to overfit. A negative autocorrelation (at lag 1: noise around
  the walk, such as a pegged exchange rate's) does not count, since the last few values
  already average it out. Eight daily exchange rates (largest increment autocorrelation
  0.008) forecast 24 days ahead from 48 days gave MSE 0.01291 and from 96 days 0.01392 over
  three seeds (the naive forecast 0.01294); the series whose error the longer window lowers
  have 0.31 (hourly electricity transformers, at lag 24), 0.31 (a quarterly macroeconomic
  panel) and 0.82 (El Nino, at lag 12).
  On a few hundred windows a longer lookback overfits (a yearly series of 300 points
  forecast 10 ahead: MSE 0.43 with 20 years, 1.0 with 60), with more it pays (61 years of
  monthly sea temperatures forecast 12 ahead: 0.49 with 24 months, 0.24 with 96). A
  144-month series forecast 12 ahead gets 24 months, a quarterly panel of 12 series with
  165 training rows each 41 quarters, an hourly series of years 96 hours.
- epoch windows: an epoch (the windows between two validations) is every training window
  up to `EPOCH_WINDOWS`, beyond that `EPOCH_WINDOWS` of them drawn at random, the next
  epoch continuing the same shuffled order. Neighbouring windows of a long series differ by
  one row, so a long panel needs far fewer windows than it has: on ETTm1 (7 series of
  15-minute rows, 376,000 training windows, horizon 24), four epochs of 25,000 windows
  forecast with MSE 0.156 in 84 s, where two passes over every window took 630 s for 0.195
  (validated twice, the second pass overfitted); ETTh1 (92,000 windows) 0.241 in 93 s
  against 0.237 in 800 s. Validation reads at most `VALIDATION_WINDOWS` windows, evenly
  spaced over the hold-out.
- epochs: enough epochs to show the model about `WINDOWS_SEEN` training windows, between
  `MIN_EPOCHS` and `MAX_EPOCHS`: a few hundred windows are seen hundreds of times, a long
  panel's four epochs of `EPOCH_WINDOWS`. The validation hold-out stops it earlier
  (`patience`).
- patience: a tenth of the epochs, at least 3.
- width and ensemble: below `MANY_WINDOWS` training windows, the mean of
  `FEW_WINDOWS_ENSEMBLE` narrow models (`FEW_WINDOWS_DIM` wide, `FEW_WINDOWS_HEADS` heads
  of 8) trained from seeds of their own; with more windows one model `DIM` wide with `HEADS`
  heads. On a few hundred windows one fit's forecast swings with its seed, the more so the
  narrower the model, and the mean of five narrow ones is both steadier and closer (MSE
  over three seeds, one 64-wide model / the mean of five 16-wide ones: 309 sunspot years
  0.44 / 0.26, 114 lynx years 1.0 / 0.44, a 144-month series 0.17 / 0.16). Such fits take
  seconds each.
- loss: below `MANY_WINDOWS` training windows the point head trains on absolute error (it
  forecasts the median; NHITS and PatchTST train on it by default), else on squared error
  (the mean). On a short series a few large errors (a lynx peak, a sunspot maximum) dominate
  the squared loss of a few hundred windows; over three seeds of the five-network mean,
  squared / absolute error: 144 airline months 0.160 / 0.153, 114 lynx years 0.438 / 0.382,
  309 sunspot years 0.262 / 0.267.
- refit: below `MANY_WINDOWS` training windows, once the hold-out has chosen the epochs
  (the median of the networks' best epochs), the networks train again on every row for
  that many epochs. There the hold-out is a large share of a short series, and its latest
  rows: over three seeds, 114 lynx years 0.379 -> 0.330, 309 sunspot years 0.274 -> 0.276,
  at about twice the fit time. Since the refit gives the rows back, a series whose
  validation fraction is shorter than the horizon holds out one horizon: 108 airline
  months forecast 12 ahead held out nothing and trained the full 200 epochs (0.153); held
  out, the last year chooses 104-112 epochs (0.144).
- center: below `MANY_WINDOWS` training windows, with a hold-out, the networks train twice,
  their windows normalised from the window's mean (RevIN) and from its last value (as
  NLinear); the last value is kept if its validation loss is lower than the mean's by more
  than `CENTER_MARGIN` (a share of it), else the mean. Which is better depends on the
  series, not on its length or frequency: over three seeds of the five-network mean, mean /
  last value, 114 lynx years 0.453 / 0.304, 144 airline months 0.159 / 0.128, but 309
  sunspot years 0.295 / 0.387. The hold-out tells them apart where the gap is large (lynx:
  the last value lower by 10-16% over seven seeds) and not where it is small: on sunspots
  the two came within 0.1-0.6% on the hold-out, and where a tenth of a percent chose the
  last value the test error rose by a third, hence the margin. The comparison costs the
  hold-out's training twice, on series whose fit takes seconds to a minute. Longer series
  keep the mean: there the last value is also better on some (one network, three seeds: 61
  years of El Nino months 0.268 / 0.219, 2,284 co2 weeks 0.000808 / 0.000714) and worse on
  others (a quarterly panel of 12 macro series 0.561 / 0.701), but their hold-out, the
  series' latest tenth, chose the worse one on El Nino and on the macro panel at every seed.
  Where the lookback holds `TREND_SEASONS` or more whole seasons of a known season (24 of
  a monthly series' months, say), a third center competes: the window's least-squares line
  read at its last step ("trend"), the level a trending seasonal series has reached, where
  the last value sits on one phase of the season and the mean lags half a window behind.
  The lowest of the other centers' losses is kept if it is below the mean's by the margin.
  Over five seeds of 144 airline months (24-month lookback), mean / last value / trend
  0.163 / 0.133 / 0.135 forced, and the hold-out, which preferred the mean to the
  last value at three seeds, prefers the trend at four (by 9-34%): the three-way choice
  gives 0.139 where the two-way gave 0.145. Three short seasonal series bundled with
  pmdarima, five seeds each, two-way / three-way: 176 months of wine sales 0.304 / 0.305
  (the trend kept at every seed), 211 quarters of beer production 0.0212 / 0.0194 (every
  seed), 119 quarters of wool yarn 0.446 / 0.446 (never). Yearly data gets no trend center:
  its frequency does not tell its cycle (about 10 lynx years, 11 sunspot years), the line
  follows the cycle's phase, and forced it raised the error (lynx 0.386, sunspots 0.366);
  offered, the hold-out preferred it on sunspots at three of five seeds by 2-4%, and the
  error rose from 0.29 to 0.34.

Each choice is stored on the fitted estimator (`lookback_`, `max_epochs_`,
`epoch_windows_`, `patience_`, `refit_epochs_`, `dim_`, `heads_`, `ensemble_size_`, `loss_`,
`center_`).
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
WINDOWS_SEEN = 100_000
EPOCH_WINDOWS = 25_000
VALIDATION_WINDOWS = 10_000
MIN_EPOCHS, MAX_EPOCHS = 2, 200
MIN_PATIENCE = 3
DIM, HEADS = 64, 4
FEW_WINDOWS_DIM, FEW_WINDOWS_HEADS = 16, 2
FEW_WINDOWS_ENSEMBLE = 5
CENTER_MARGIN = 0.01
TREND_SEASONS = 2

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


def choose_lookback(shape: DataShape, min_lookback: int = 1) -> int:
    """The lookback for `shape` (see the module's rules); at least `min_lookback` (what one
    patch needs) and at least 1."""
    h, m = shape.horizon, season_length(shape.freq)
    lookback = low = max(2 * h, m)
    if shape.series * (shape.rows - low - h + 1) >= MANY_WINDOWS:
        longer = min(max(shape.rows // 4, low), max(low, LONG_LOOKBACK))
        # only a whole further season: a window of 1.85 years of weeks holds part of a
        # season twice, and its level then depends on where in the year it ends
        whole_season = longer >= low + m
        # a random walk's older rows add inputs to overfit, not information
        predictable = (
            shape.increment_autocorrelation is None
            or shape.increment_autocorrelation >= PREDICTABLE_INCREMENTS
        )
        if whole_season and predictable:
            lookback = longer
    lookback = min(lookback, (shape.rows - h) // 2)
    return max(lookback, min_lookback, 1)


def choose_epochs(windows_per_epoch: int) -> int:
    """Epochs that show the model about WINDOWS_SEEN windows, within [MIN_EPOCHS, MAX_EPOCHS]."""
    wanted = math.ceil(WINDOWS_SEEN / max(1, windows_per_epoch))
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


def choose_loss(windows: int, quantiles) -> str:
    """The point head's training loss: "mae" (the median) below MANY_WINDOWS training
    windows, else "mse" (the mean); "mse" for a quantile head, which trains on the pinball
    loss whatever this says."""
    return "mae" if windows < MANY_WINDOWS and not quantiles else "mse"


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
    others = [c for c in validation_losses if c != "mean"]
    if not others:
        return "mean"
    best = min(others, key=validation_losses.__getitem__)
    clearly_lower = validation_losses[best] < (1.0 - CENTER_MARGIN) * validation_losses["mean"]
    return best if clearly_lower else "mean"


def choose_ensemble_size(windows: int) -> int:
    """How many networks, each from a seed of its own, the forecast averages:
    FEW_WINDOWS_ENSEMBLE below MANY_WINDOWS training windows, else one."""
    return FEW_WINDOWS_ENSEMBLE if windows < MANY_WINDOWS else 1
