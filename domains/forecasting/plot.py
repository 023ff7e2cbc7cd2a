"""History + forecast plot (matplotlib, written to a PNG file)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_forecast(
    history: pd.DataFrame,
    forecast: pd.DataFrame,
    path,
    columns=None,
    quantiles: dict | None = None,
    title: str | None = None,
) -> Path:
    """One panel per column: the last rows of `history`, then `forecast` (with a shaded band
    between the lowest and highest quantile when `quantiles` {level: DataFrame} is given).
    A column's missing values are left out, so series over different times (the columns of
    a pivoted long frame) each get their own time axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = list(columns or forecast.columns)
    starts = {column: forecast[column].first_valid_index() for column in columns}
    shared = len(set(starts.values())) == 1
    fig, axes = plt.subplots(
        len(columns), 1, figsize=(10, 1.9 * len(columns) + 0.6), sharex=shared, squeeze=False
    )
    for ax, column in zip(axes[:, 0], columns):
        past, ahead = history[column].dropna(), forecast[column].dropna()
        ax.plot(past.index, past, color="0.35", lw=1.0, label="history")
        ax.plot(ahead.index, ahead, color="tab:red", lw=1.4, label="forecast")
        if quantiles:
            low, high = min(quantiles), max(quantiles)
            ax.fill_between(
                ahead.index,
                quantiles[low][column].loc[ahead.index],
                quantiles[high][column].loc[ahead.index],
                color="tab:red",
                alpha=0.2,
                label=f"{low:g}-{high:g} quantiles",
            )
        ax.axvline(starts[column], color="0.6", lw=0.8, ls="--")
        ax.set_ylabel(str(column))
    axes[0, 0].legend(loc="upper left", fontsize=8, ncol=3)
    if title:
        axes[0, 0].set_title(title)
    if shared:
        fig.autofmt_xdate()  # time labels under the bottom panel only
    else:
        for ax in axes[:, 0]:
            plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
