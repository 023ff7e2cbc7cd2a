"""Every "auto" setting of a forecaster's fit, decided in one place before training.

`plan_fit(params, series, lookback)` reads what the rules need from the series once (their
lengths, count and frequency), counts the training windows each choice implies, and returns
a `FitPlan`: the rows each series trains on, whether the networks are refitted on every
row, the schedule, the width, the ensemble, the loss and the centers to compare. Each rule
and its reason is stated in `data_defaults`; `params` is the estimator (its parameters are
read, never changed), and a parameter that is not "auto" is kept as given.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .data_defaults import (
    AUTO,
    MIXERS_COMPARED,
    DataShape,
    choose_batch,
    choose_centers,
    choose_ensemble_size,
    choose_epoch_windows,
    choose_epochs,
    choose_lookback,
    choose_loss,
    choose_mixers,
    choose_patience,
    choose_refit,
    choose_target_transform,
    choose_weight_average,
    choose_width,
    increment_autocorrelation,
    season_length,
)
from .panel_windows import window_starts
from .series_input import Series


@dataclasses.dataclass(frozen=True)
class FitPlan:
    """What a fit decided before training (the forecaster's `plan_`).

    lookback: rows of context; train_windows: training windows of the hold-out's networks;
    refit: whether they are trained again on every row; max_epochs, epoch_windows,
    patience: the schedule; dim, heads: the width; ensemble_size: networks averaged; loss:
    "mse" or "mae"; centers, mixers: the window centers and the sequence mixers whose
    networks are compared on the hold-out (one: no comparison); batch_size, learning_rate:
    the optimisation's step; ema_decay: the decay of the trained weights' moving average
    that is kept (None: the trained weights); target_transform: "log" where the networks
    learn the logarithm of the target, else None.
    """

    lookback: int
    train_windows: int | None
    refit: bool
    max_epochs: int
    epoch_windows: int | None
    patience: int
    dim: int
    heads: int
    ensemble_size: int
    loss: str
    centers: tuple[str, ...]
    batch_size: int
    learning_rate: float
    mixers: tuple[str, ...]
    ema_decay: float | None = None
    target_transform: str | None = None

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "centers": list(self.centers),
                "mixers": list(self.mixers)}  # fmt: skip

    def describe(self) -> str:
        """One line: what was chosen, as a person would say it."""
        windows = "" if self.train_windows is None else f"{self.train_windows:,} windows, "
        compared = "".join(
            f", {what} {'/'.join(names)} compared"
            for what, names in (("centers", self.centers), ("mixers", self.mixers))
            if len(names) > 1
        )
        averaged = "" if self.ema_decay is None else f", weights averaged at {self.ema_decay:g}"
        if self.target_transform == "log":
            averaged += ", on the target's logarithm"
        return (
            f"lookback {self.lookback}, {windows}up to {self.max_epochs} epochs, "
            f"width {self.dim} x {self.heads} heads, {self.ensemble_size} network(s), "
            f"{self.loss} loss, batches of {self.batch_size} at learning rate "
            f"{self.learning_rate:g}{averaged}{', refitted on every row' if self.refit else ''}"
            f"{compared}"
        )


def shortest_lookback(params) -> int:
    """The shortest lookback "auto" may choose: what one patch needs (patch_len minus
    stride, since the last patch may reach `stride` rows of padding)."""
    return max(1, int(params.patch_len) - int(params.stride))


def min_context(params, lookback: int) -> int:
    """Observed rows a left-padded window of a long frame's short series needs."""
    return min(lookback, int(params.patch_len))


def plan_lookback(params, series: list[Series], freq: str | None) -> int:
    """The lookback parameter, or the one "auto" chooses for these series (`freq`: the
    panel's frequency, None where it has none or several)."""
    if params.lookback != AUTO:
        return int(params.lookback)
    kept = 1.0 - params.validation_fraction
    rows = int(np.median([len(s) for s in series]) * kept)
    shape = DataShape(rows=rows, series=len(series), horizon=int(params.horizon), freq=freq)
    unpredictable = dataclasses.replace(shape, increment_autocorrelation=0.0)
    if choose_lookback(shape) == choose_lookback(unpredictable):
        return choose_lookback(shape, shortest_lookback(params))  # the increments decide nothing
    # the fitting rows of every target column (the hold-out is the last rows)
    fitting = [s.target[: int(len(s) * kept), c] for s in series for c in range(s.target.shape[1])]
    shape = dataclasses.replace(
        shape, increment_autocorrelation=increment_autocorrelation(fitting, season_length(freq))
    )
    return choose_lookback(shape, shortest_lookback(params))


def train_rows(params, length: int, lookback: int, at_least: int = 0) -> int:
    """Rows of a series used for training; the rest (the last `validation_fraction` of the
    rows, at least `at_least` of them, when they hold a full validation window and leave a
    training window) for validation."""
    horizon = int(params.horizon)
    if params.validation_fraction == 0:
        return length
    held = max(int(length * params.validation_fraction), at_least)
    if held < horizon or length - held < lookback + horizon:
        return length  # too short to hold anything out: train on everything
    return length - held


def count_windows(params, lengths: list[int], rows: list[int], lookback: int) -> tuple[int, int]:
    """(training windows, validation windows) of series of `lengths` training on `rows`."""
    history_rows = int(params.history_windows) * lookback
    train, val = window_starts(
        lengths, rows, lookback, int(params.horizon), min_context(params, lookback), history_rows
    )
    return len(train), len(val)


def schedule(params, windows: int, series: int = 1) -> tuple[int, int, int]:
    """(max_epochs, epoch_windows, patience) for `windows` training windows."""
    given = None if params.epoch_windows == AUTO else int(params.epoch_windows)
    epoch_windows = choose_epoch_windows(windows, given)
    epochs = choose_epochs(epoch_windows, series)
    if params.max_epochs != AUTO:
        epochs = int(params.max_epochs)
    patience = choose_patience(epochs) if params.patience == AUTO else int(params.patience)
    return epochs, epoch_windows, patience


def width(params, windows: int) -> tuple[int, int]:
    """(dim, heads) for `windows` training windows."""
    return choose_width(
        windows,
        None if params.dim == AUTO else int(params.dim),
        None if params.heads == AUTO else int(params.heads),
    )


def batch(params, windows_seen: int) -> tuple[int, float]:
    """(batch_size, learning_rate) for a schedule of `windows_seen` training windows."""
    return choose_batch(
        windows_seen,
        None if params.batch_size == AUTO else int(params.batch_size),
        None if params.learning_rate == AUTO else float(params.learning_rate),
    )


def loss(params, windows: int, series: int = 1) -> str:
    return choose_loss(windows, params.quantiles, series) if params.loss == AUTO else params.loss


def plan_fit(
    params, series: list[Series], lookback: int, freq: str | None
) -> tuple[FitPlan, list[int]]:
    """(the plan, the rows each series trains on) for a fit of `series` with `lookback`."""
    lengths = [len(s) for s in series]
    rows = [train_rows(params, n, lookback) for n in lengths]
    windows, val_windows = count_windows(params, lengths, rows, lookback)
    # decided on the standard hold-out: a longer one only has fewer windows
    refit = choose_refit(windows) if params.refit == AUTO else bool(params.refit)
    if refit:
        # the refit gives the hold-out's rows back: a series whose fraction is shorter than
        # a horizon holds out one horizon, so that the epochs are still chosen
        longer = [train_rows(params, n, lookback, at_least=int(params.horizon)) for n in lengths]
        if longer != rows:
            rows = longer
            windows, val_windows = count_windows(params, lengths, rows, lookback)
    max_epochs, epoch_windows, patience = schedule(params, windows, len(series))
    dim, heads = width(params, windows)
    if params.center == AUTO:
        centers = choose_centers(windows, val_windows > 0, lookback, season_length(freq))
    else:
        centers = (params.center,)
    ensemble = choose_ensemble_size(windows)
    batch_size, learning_rate = batch(params, max_epochs * epoch_windows)
    if params.ema_decay == AUTO:
        ema_decay = choose_weight_average(max_epochs * epoch_windows)
    else:
        ema_decay = None if params.ema_decay is None else float(params.ema_decay)
    point_loss = loss(params, windows, len(series))
    if params.target_transform == AUTO:
        positive = all(bool((s.target > 0).all()) for s in series)  # a refit reads them all
        target_transform = choose_target_transform(len(series), point_loss, positive)
    else:
        target_transform = params.target_transform
    if params.mixer != AUTO:
        mixers = (params.mixer,)
    elif params.mixer_options:  # the memory's options: the memory alone
        mixers = MIXERS_COMPARED[:1]
    else:
        mixers = choose_mixers(max_epochs * epoch_windows, val_windows)
    plan = FitPlan(
        lookback=lookback,
        train_windows=windows,
        refit=refit,
        max_epochs=max_epochs,
        epoch_windows=epoch_windows,
        patience=patience,
        dim=dim,
        heads=heads,
        ensemble_size=ensemble if params.ensemble_size == AUTO else int(params.ensemble_size),
        loss=point_loss,
        centers=tuple(centers),
        batch_size=batch_size,
        learning_rate=learning_rate,
        mixers=tuple(mixers),
        ema_decay=ema_decay,
        target_transform=target_transform,
    )
    return plan, rows
