"""CLI subcommand `titans-seq forecast`: fit on a series and forecast what comes next."""

from __future__ import annotations

import argparse
import time

from titans_seq.cli_types import (
    non_negative_int,
    positive_float_or_auto,
    positive_int,
    positive_int_or_auto,
)

from .data_defaults import AUTO
from .revin import CENTERS


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "forecast",
        help="fit a Titans forecaster on a series and forecast the next steps",
        description=(
            "Fit TitansForecaster on a CSV file or a registered dataset (e.g. ETTh1), forecast "
            "the `horizon` steps after its end, and write them as CSV (and a PNG plot of "
            "history + forecast). A CSV is either wide (a timestamp column + one column per "
            "variable) or long (unique_id, ds, y and covariate columns: many series, one "
            "global model); its delimiter, decimal mark and timestamp column are read from it."
        ),
    )
    p.add_argument("--data", required=True, help="CSV path or registered dataset name")
    p.add_argument("--horizon", type=positive_int, default=96, help="steps to forecast")
    p.add_argument(
        "--lookback",
        type=positive_int_or_auto,
        default=96,
        help="steps of history per window, or auto (chosen from the data's length, frequency "
        "and the horizon)",
    )
    p.add_argument(
        "--mixer",
        default="auto",
        help="sequence mixer (see `titans_seq.list_mixers()`); auto: the memory or attention, "
        "compared on the hold-out (TitansForecaster's mixer)",
    )
    p.add_argument(
        "--epochs",
        type=positive_int_or_auto,
        default=3,
        help="maximum training epochs, or auto (enough to see about 100,000 windows)",
    )
    p.add_argument(
        "--center",
        default=AUTO,
        choices=[AUTO, *CENTERS],
        help="the level each window is forecast around: its mean, its last value, its "
        "least-squares line's last step (trend), or auto (on a short series, whichever the "
        "hold-out prefers; else the mean)",
    )
    p.add_argument(
        "--baseline",
        type=baseline_weight,
        default=AUTO,
        help="the seasonal naive forecast's weight in the forecast: auto (chosen on the "
        "hold-out, 0 unless it lowers the error), none (the network alone) or a number in "
        "[0, 1]",
    )
    p.add_argument(
        "--batch-size",
        type=positive_int_or_auto,
        default=64,
        help="windows per training step, or auto (the estimator's rule: 32; 128 where the "
        "schedule shows more than 150,000 windows)",
    )
    p.add_argument(
        "--lr",
        type=positive_float_or_auto,
        default=1e-3,
        help="AdamW learning rate, or auto (1e-3 times the batch's multiple of 32, 1 to 3)",
    )
    p.add_argument(
        "--train-rows",
        type=positive_int,
        default=None,
        help="fit on the last N rows only, of each series of a long file (None: all)",
    )
    p.add_argument("--target", default=None, help="column to put last (e.g. OT); wide data only")
    p.add_argument(
        "--hist-exog",
        type=column_names,
        default=None,
        help="columns that are historical covariates, not forecast (e.g. HUFL,HULL)",
    )
    p.add_argument(
        "--futr-exog",
        type=column_names,
        default=None,
        help="columns known in advance (future covariates); their values over the horizon "
        "come from --futr-data",
    )
    p.add_argument(
        "--futr-data",
        default=None,
        help="CSV with a timestamp column (and unique_id, for a long file) and the --futr-exog "
        "columns over the forecast horizon",
    )
    p.add_argument(
        "--calendar",
        type=calendar_option,
        default=None,
        help="calendar features as future covariates: auto, or names (hour,dayofweek,...)",
    )
    p.add_argument(
        "--missing",
        default="error",
        choices=["error", "ffill", "interpolate"],
        help="what to do with NaN/inf values and with time steps absent from the series' "
        "regular grid (ffill, interpolate: inserted and filled)",
    )
    p.add_argument(
        "--quantiles",
        type=quantile_levels,
        default=None,
        help="e.g. 0.1,0.5,0.9 for a forecast band",
    )
    p.add_argument("--out", default="forecast.csv", help="CSV of the forecast")
    p.add_argument("--plot", default=None, help="PNG of history + forecast")
    p.add_argument("--save-model", default=None, help="folder to save the fitted model in")
    p.add_argument(
        "--model",
        default=None,
        help="forecast with a model saved by --save-model, after the end of --data, without "
        "fitting (the model's own lookback, horizon and covariates apply)",
    )
    p.add_argument(
        "--allow-unverified-model",
        action="store_true",
        help="with --model: load a folder that has no model_manifest.json, trusting its files",
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="random seed of the fit")
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_forecast)


def quantile_levels(text: str) -> tuple[float, ...]:
    """`--quantiles 0.1,0.5,0.9` -> (0.1, 0.5, 0.9), each strictly between 0 and 1."""
    try:
        levels = tuple(float(q) for q in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"comma-separated numbers between 0 and 1 (e.g. 0.1,0.5,0.9), got {text!r}"
        ) from None
    if not all(0.0 < q < 1.0 for q in levels):
        raise argparse.ArgumentTypeError(f"every level must lie strictly in (0, 1), got {text!r}")
    return levels


def column_names(text: str) -> list[str]:
    """`HUFL,HULL` -> ["HUFL", "HULL"]."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"comma-separated column names, got {text!r}")
    return names


def calendar_option(text: str) -> str | list[str]:
    return "auto" if text == "auto" else column_names(text)


# options that shape the model: with --model they must agree with the saved one
MODEL_OPTIONS = {
    "lookback": "lookback",
    "horizon": "horizon",
    "mixer": "mixer",
    "quantiles": "quantiles",
    "hist_exog": "hist_exog_list",
    "futr_exog": "futr_exog_list",
    "calendar": "calendar",
}
TRAINING_OPTIONS = (
    "epochs", "center", "baseline", "batch_size", "lr", "seed", "train_rows", "save_model",
)  # fmt: skip


def baseline_weight(text: str):
    """--baseline: "auto", "none" or a weight in [0, 1]."""
    if text in (AUTO, "none"):
        return None if text == "none" else AUTO
    try:
        weight = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected auto, none or a number in [0, 1], got {text!r}"
        ) from None
    if not 0.0 <= weight <= 1.0:
        raise argparse.ArgumentTypeError(f"the weight must lie in [0, 1], got {text}")
    return weight


def run_forecast(args: argparse.Namespace) -> int:
    from titans_seq.errors import ConfigError
    from titans_seq.training.checkpoint import atomic_write_text, prepare_output_file

    out = prepare_output_file(args.out, "--out")  # before the fit, not after it
    if args.plot:
        prepare_output_file(args.plot, "--plot")
    if bool(args.futr_exog) != bool(args.futr_data):
        if not (args.model and args.futr_data):  # a saved model names its own columns
            raise ConfigError("--futr-exog and --futr-data go together (columns, and their values)")
    if args.allow_unverified_model and not args.model:
        raise ConfigError("--allow-unverified-model goes with --model (a saved model to load)")
    data = read_forecast_input(args)
    if args.model:
        forecaster = saved_forecaster(args)
        data.in_model_order(forecaster)
        forecast = forecaster.predict(data.series, futr_df=data.futr_df)
        bands = None
        if forecaster.quantiles:
            bands = forecaster.predict_quantiles(data.series, futr_df=data.futr_df)
        done = f"forecast with the model in {args.model}"
    else:
        forecaster, seconds = fitted_forecaster(args, data)
        forecast = forecaster.predict(futr_df=data.futr_df)
        bands = forecaster.predict_quantiles(futr_df=data.futr_df) if args.quantiles else None
        summary = fit_summary(forecaster)
        done = f"fitted on {data.describe(forecaster)} in {seconds:.0f} s ({summary})"
    atomic_write_text(out, with_quantiles(forecast, bands).to_csv(index=not data.long))
    print(f"{done}; forecast of {forecaster.horizon} steps written to {args.out}")
    if args.plot:
        plot_input_and_forecast(args, data, forecaster, forecast, bands)
        print(f"plot written to {args.plot}")
    if args.save_model:
        forecaster.save(args.save_model)
        print(f"model saved to {args.save_model}")
    return 0


def fitted_forecaster(args: argparse.Namespace, data):
    """(a TitansForecaster fitted on `data` with the command's options, seconds taken)."""
    from .estimator import TitansForecaster

    forecaster = TitansForecaster(
        lookback=args.lookback,
        horizon=args.horizon,
        mixer=args.mixer,
        quantiles=args.quantiles,
        hist_exog_list=args.hist_exog,
        futr_exog_list=args.futr_exog,
        calendar=args.calendar,
        max_epochs=args.epochs,
        center=args.center,
        baseline=args.baseline,
        batch_size=args.batch_size,
        learning_rate=args.lr,
        missing=args.missing,
        device=args.device,
        random_state=args.seed,
        verbose=not args.quiet,
    )
    start = time.perf_counter()
    forecaster.fit(data.series)
    return forecaster, time.perf_counter() - start


def fit_summary(forecaster) -> str:
    """The plan, the epochs run, the mixer, the window center and the lowest validation MSE (on
    z-scored values; the training loss may be another: MAE or the pinball loss) of a
    fitted forecaster."""
    validation = [h["mse"] for h in forecaster.history_ if "mse" in h]
    level = {"mean": "mean", "last": "last value", "trend": "trend"}[forecaster.center_]
    parts = [forecaster.plan_.describe(), f"{forecaster.n_epochs_} epochs run",
             f"mixer {forecaster.mixer_}", f"windows centered on their {level}"]  # fmt: skip
    if forecaster.baseline_weight_:
        parts.append(
            f"seasonal naive forecast (season {forecaster.baseline_season_}) weighed in at "
            f"{forecaster.baseline_weight_:g}"
        )
    if validation:
        parts.append(f"best validation MSE {min(validation):.4f}, z-scored")
    return ", ".join(parts)


def saved_forecaster(args: argparse.Namespace):
    """The forecaster saved in `--model`, refusing options that would train or that ask
    for another model than the saved one."""
    from titans_seq.errors import ConfigError

    from .estimator import TitansForecaster

    defaults = build_parser_defaults()
    trained = [f"--{o.replace('_', '-')}" for o in TRAINING_OPTIONS
               if getattr(args, o) != defaults[o]]  # fmt: skip
    if trained:
        raise ConfigError(f"{', '.join(trained)}: --model forecasts with a saved model, no fit")
    forecaster = TitansForecaster.load(args.model, allow_unverified=args.allow_unverified_model)
    if args.device != defaults["device"]:
        forecaster.set_params(device=args.device)
    for option, param in MODEL_OPTIONS.items():
        given, saved = getattr(args, option), forecaster.get_params()[param]
        if given != defaults[option] and _normalised(given) != _normalised(saved):
            raise ConfigError(
                f"--{option.replace('_', '-')} {given}: the model in {args.model} was fitted "
                f"with {param}={saved}"
            )
    return forecaster


def _normalised(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def build_parser_defaults() -> dict:
    """The forecast command's default option values, by destination name."""
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return vars(parser.parse_args(["forecast", "--data", ""]))


class ForecastInput:
    """What the command fits on: `series` (a wide frame [T, C] or a long frame), the
    future covariates `futr_df` (or None) and whether the layout is long."""

    def __init__(self, series, futr_df, long: bool):
        self.series, self.futr_df, self.long = series, futr_df, long

    def in_model_order(self, forecaster) -> None:
        """A wide file's columns in the order the model was fitted on (a file need not
        repeat the --target that put one last), when they are the same columns."""
        fitted = [str(c) for c in getattr(forecaster, "feature_names_in_", [])]
        if not self.long and sorted(fitted) == sorted(self.series.columns):
            self.series = self.series[fitted]

    def describe(self, forecaster) -> str:
        if self.long:
            count = self.series["unique_id"].nunique()
            return f"{count} series ({len(self.series)} rows)"
        return (
            f"{len(self.series)} rows x {self.series.shape[1]} columns "
            f"({len(forecaster.target_names_)} forecast)"
        )


def read_forecast_input(args: argparse.Namespace) -> ForecastInput:
    """The series to fit and the future covariates, from a registered dataset, a wide CSV
    or a long CSV (neuralforecast's unique_id, ds, y)."""
    from pathlib import Path

    from titans_seq.data import load_timeseries, read_csv_frame
    from titans_seq.data.frames import table_frame
    from titans_seq.data.registry import is_registered
    from titans_seq.data.tables import is_long_table, read_csv_table
    from titans_seq.errors import ConfigError

    file = not is_registered(args.data) and Path(args.data).is_file()
    table = read_csv_table(args.data) if file else None
    if table is None or not is_long_table(table):
        if table is None:  # a registered dataset (or no such file: load_timeseries says so)
            series = load_timeseries(args.data, target=args.target, missing=args.missing)
        else:  # the file already read, validated as load_timeseries validates a CSV
            series = table_frame(table, args.data, target=args.target, missing=args.missing)
        if args.train_rows:
            series = series.iloc[-args.train_rows :]
        futr_df = read_csv_frame(args.futr_data) if args.futr_data else None
        return ForecastInput(series, futr_df, long=False)
    if args.target:
        raise ConfigError("--target names a column of a wide file; a long file's target is y")
    if args.train_rows:
        table = table.groupby("unique_id", sort=False).tail(args.train_rows)
    futr_df = read_csv_table(args.futr_data) if args.futr_data else None
    return ForecastInput(table, futr_df, long=True)


def with_quantiles(forecast, bands: dict | None):
    """The forecast with a column `<name>_q<level>` per forecast column and quantile level
    (`bands`: {level: frame shaped as the forecast}) after the point forecast's."""
    if not bands:
        return forecast
    from .estimator import FORECAST_COLUMN

    table = forecast.copy()
    names = [FORECAST_COLUMN] if FORECAST_COLUMN in forecast.columns else list(forecast.columns)
    for name in names:
        for level, frame in sorted(bands.items()):
            table[f"{name}_q{level:g}"] = frame[name].to_numpy()
    return table


def plot_input_and_forecast(args, data: ForecastInput, forecaster, forecast, bands) -> None:
    """History + forecast, one panel per forecast column (the first six series of a long
    file), with the outer quantiles (`bands`, or None) as a band."""
    import pandas as pd

    from titans_seq.data.tables import parse_timestamps

    from .estimator import FORECAST_COLUMN
    from .plot import plot_forecast

    if data.long:
        ids = list(pd.unique(forecast["unique_id"]))[:6]

        def wide(frame, column):
            frame = frame[frame["unique_id"].isin(ids)]
            stamps = frame["ds"]
            if not pd.api.types.is_numeric_dtype(stamps):  # text read from the file
                stamps = parse_timestamps(stamps)
            table = frame.assign(ds=stamps).pivot(index="ds", columns="unique_id", values=column)
            return table[ids]

        recent = data.series.groupby("unique_id", sort=False).tail(4 * forecaster.horizon)
        history, forecast = wide(recent, "y"), wide(forecast, FORECAST_COLUMN)
        if bands:
            bands = {level: wide(frame, FORECAST_COLUMN) for level, frame in bands.items()}
    else:
        history = data.series.iloc[-4 * forecaster.horizon :][list(forecaster.target_names_)]
    plot_forecast(
        history,
        forecast,
        args.plot,
        quantiles=bands,
        title=f"{args.data}: {forecaster.mixer_} forecaster, horizon {forecaster.horizon}",
    )
