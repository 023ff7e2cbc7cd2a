"""A fitted `TitansForecaster` on disk: model.safetensors and forecaster.json (no pickle).

The JSON holds the parameters, what the "auto" settings chose, the fitted series' recent
rows and scalers, and a format version; `load_forecaster` reads every earlier version with
the settings it was saved under.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from titans_seq.data import StandardScaler
from titans_seq.mixers.registry import list_mixers
from titans_seq.training.checkpoint import CheckpointError
from titans_seq.training.in_memory import (
    estimator_device,
    load_described_weights,
    load_fitted,
    save_fitted,
    saved_mixer_options,
)

from .covariate_tokens import CovariateShape
from .data_defaults import AUTO
from .ensemble import one_model
from .fit_plan import FitPlan
from .fitted_series import FittedSeries
from .revin import CENTERS
from .task import build_forecaster

CONFIG_FILE = "forecaster.json"
# 2: the memory's stable parametrisation; 3: series, covariates; 4: theta_max no longer
# follows the chunk size; 5: MAL's layout "two_layers" (older versions are read with what
# they were saved under, see load_forecaster); 6: "auto" settings, with what they chose;
# 7: "auto" width (dim and heads) and ensembles (an ensemble's weights under members.<i>.);
# 8: the point loss (older versions trained on squared error); 9: the windows an epoch
# (older versions: every window, not recorded); 10: the refit on every row and its epochs;
# 11: the windows' center (older versions: the mean); 12: the "trend" center; 13: the
# seasonal naive forecast weighed in (older versions: the network alone); 14: batch size
# and learning rate may be "auto" (older versions: the numbers in params); 15: the mixer
# may be "auto" (older versions: the mixer in params); 16: the trained weights' moving
# average (`ema_decay`) and the target's logarithm (`target_transform`; older versions:
# the trained weights, the values)
FORMAT_VERSION = 16
# format version -> the generation of mixer defaults it was saved under (`pin_saved_defaults`)
DEFAULTS_GENERATION_OF_VERSION = {
    1: 1, 2: 2, 3: 2, 4: 3, 5: 4, 6: 4, 7: 4, 8: 4, 9: 4, 10: 4, 11: 4, 12: 4, 13: 4, 14: 4, 15: 4,
    16: 4,
}  # fmt: skip
# the settings "auto" may choose; saved under "chosen" with what they became, and their
# defaults before they could be "auto"
CHOSEN_NUMBERS = (
    "lookback",
    "max_epochs",
    "epoch_windows",
    "patience",
    "dim",
    "heads",
    "ensemble_size",
    "batch_size",
)
CHOSEN = (
    *CHOSEN_NUMBERS, "loss", "center", "learning_rate", "mixer", "ema_decay", "target_transform",
)  # fmt: skip
NUMERIC_DEFAULTS_BEFORE_AUTO = {
    "lookback": 96,
    "max_epochs": 10,
    "patience": 3,
    "dim": 64,
    "heads": 4,
    "ensemble_size": 1,
}


# which fields of forecaster.json shape which weights (for an error naming the field)
# (per axis of the weight where a tuple)
WEIGHT_FIELDS = {
    "position": ("lookback (with patch_len and stride)", "dim"),
    "head.weight": ("horizon (or quantiles)", "lookback (with patch_len and stride) or dim"),
    "head.bias": "horizon (or quantiles)",
    "quantile_levels": "quantiles",
    "revin.": "target_names (the columns forecast)",
    "patch_embed.weight": ("dim", "patch_len (or covariate_shape)"),
    "patch_embed.bias": "dim",
    "covariate": "covariate_shape (or the exog lists)",
}


def save_forecaster(forecaster, path) -> Path:
    """Write `path/` with model.safetensors + forecaster.json (no pickle) for a fitted
    `forecaster` (a TitansForecaster)."""
    meta = {
        "format_version": FORMAT_VERSION,
        "params": forecaster.get_params(),
        "layout": forecaster.layout_,
        "feature_names_in": list(forecaster.feature_names_in_),
        "target_names": list(forecaster.target_names_),
        "freq": forecaster.freq_,
        "calendar": forecaster.calendar_,
        "input_is_frame": forecaster._input_is_frame,
        "covariate_shape": dataclasses.asdict(forecaster.covariate_shape_),
        "static_scaler": None
        if forecaster.static_scaler_ is None
        else forecaster.static_scaler_.state_dict(),
        "series": [forecaster.series_[uid].to_json() for uid in forecaster.ids_],
        "history": forecaster.history_,
        "n_epochs": forecaster.n_epochs_,
        "refit_epochs": forecaster.refit_epochs_,
        "center_losses": forecaster.center_losses_,
        "mixer_losses": forecaster.mixer_losses_,
        "baseline": {
            "weight": forecaster.baseline_weight_,
            "season": forecaster.baseline_season_,
            # JSON keys are strings: each weight written as its repr
            "losses": None
            if forecaster.baseline_losses_ is None
            else {repr(w): loss for w, loss in forecaster.baseline_losses_.items()},
        },
        "chosen": {name: getattr(forecaster, f"{name}_") for name in CHOSEN},
        "plan": forecaster.plan_.as_dict(),
    }
    return save_fitted(path, forecaster.model_, meta, CONFIG_FILE)


def load_forecaster(cls, path, device: str | None = None, allow_unverified: bool = False):
    """Rebuild the forecaster saved in `path` as an instance of `cls` (TitansForecaster;
    weights via safetensors, never unpickled).

    allow_unverified: load a folder that has no manifest (saved before manifests, or
    whose manifest was removed), trusting that its files were not edited."""
    meta, weights = load_fitted(
        path, CONFIG_FILE, "TitansForecaster", FORMAT_VERSION, allow_unverified
    )
    version = meta["format_version"]
    if version < 3:
        meta = version_2_meta(meta)
    params = meta["params"]
    config = Path(path) / CONFIG_FILE
    if version < 6:  # saved when these settings were numbers, with these defaults
        params = {**NUMERIC_DEFAULTS_BEFORE_AUTO, **params}
    if version < 7:  # one network
        params = {"ensemble_size": 1, **params}
    if version < 8:  # squared error
        params = {"loss": "mse", **params}
    if version < 9:  # every training window an epoch, not recorded
        params = {"epoch_windows": AUTO, **params}
    if version < 10:  # the networks that early stopping chose
        params = {"refit": False, **params}
    if version < 11:  # windows normalised from their mean
        params = {"center": "mean", **params}
    if version < 13:  # the network alone
        params = {"baseline": None, **params}
    if version < 16:  # the trained weights, on the values
        params = {**params, "ema_decay": None, "target_transform": None}
    if version < 15 and params.get("mixer") == AUTO:
        raise CheckpointError(
            f"{config}: params mixer 'auto' in a format-{version} folder; that format saved "
            "the mixer the networks have (format 15 added 'auto')"
        )
    if version < FORMAT_VERSION:  # trained under earlier mixer defaults
        params["mixer_options"] = saved_mixer_options(
            params["mixer"], params.get("mixer_options"),
            DEFAULTS_GENERATION_OF_VERSION[version],
        )  # fmt: skip
    if params.get("quantiles") is not None:
        params["quantiles"] = tuple(params["quantiles"])
    f = cls(**params)
    f.layout_ = meta["layout"]
    f.feature_names_in_ = np.asarray(meta["feature_names_in"], dtype=object)
    f.n_features_in_ = len(f.feature_names_in_)
    f.target_names_ = list(meta["target_names"])
    f.freq_ = meta["freq"]
    f.calendar_ = list(meta["calendar"])
    f._input_is_frame = meta["input_is_frame"]
    f.covariate_shape_ = CovariateShape(**meta["covariate_shape"])
    f.static_scaler_ = (
        None
        if meta["static_scaler"] is None
        else StandardScaler.from_state_dict(meta["static_scaler"])
    )
    fitted = [
        FittedSeries.from_json(state, f"{config}: series {i}")
        for i, state in enumerate(meta["series"])
    ]
    f.series_ = {s.tail.uid: s for s in fitted}
    f.ids_ = [s.tail.uid for s in fitted]
    f.scaler_ = fitted[0].scaler.target if f.layout_ == "wide" else None
    f.history_, f.n_epochs_ = meta["history"], meta["n_epochs"]
    f.refit_epochs_ = meta.get("refit_epochs") if version >= 10 else None
    if f.refit_epochs_ is not None and (
        isinstance(f.refit_epochs_, bool)
        or not isinstance(f.refit_epochs_, int)
        or f.refit_epochs_ < 1
    ):
        raise CheckpointError(
            f"{config}: refit_epochs {f.refit_epochs_!r} is not a positive number of epochs"
        )
    # before format 6 every setting was a number; format 6 chose the first three
    chosen = {**{name: params[name] for name in CHOSEN}, **meta.get("chosen", {})}
    if version < 9:
        chosen["epoch_windows"] = None
    for name in CHOSEN:
        if params[name] != AUTO and params[name] != chosen[name]:
            raise CheckpointError(
                f"{config}: params {name} = {params[name]!r}, but the model was fitted "
                f"with {name} = {chosen[name]!r} (field 'chosen')"
            )
    resolved = (None if chosen[n] is None else int(chosen[n]) for n in CHOSEN_NUMBERS)
    (
        f.lookback_, f.max_epochs_, f.epoch_windows_, f.patience_, f.dim_, f.heads_,
        f.ensemble_size_, f.batch_size_,
    ) = resolved  # fmt: skip
    f.loss_, f.center_ = chosen["loss"], chosen["center"]
    f.learning_rate_ = chosen["learning_rate"]
    if not _is_number(f.learning_rate_) or not f.learning_rate_ > 0:
        raise CheckpointError(
            f"{config}: learning_rate {f.learning_rate_!r} is not a positive number "
            "(field 'chosen')"
        )
    f.learning_rate_ = float(f.learning_rate_)
    if f.center_ not in CENTERS:
        raise CheckpointError(
            f"{config}: center {f.center_!r} is not one of {CENTERS} (field 'chosen')"
        )
    f.mixer_ = chosen["mixer"]
    f.ema_decay_ = chosen["ema_decay"]
    if f.ema_decay_ is not None and (not _is_number(f.ema_decay_) or not 0 < f.ema_decay_ < 1):
        raise CheckpointError(
            f"{config}: ema_decay {f.ema_decay_!r} is neither null nor a number in (0, 1) "
            "(field 'chosen')"
        )
    f.target_transform_ = chosen["target_transform"]
    if f.target_transform_ not in (None, "log"):
        raise CheckpointError(
            f"{config}: target_transform {f.target_transform_!r} is neither null nor 'log' "
            "(field 'chosen')"
        )
    if f.mixer_ not in list_mixers():
        raise CheckpointError(
            f"{config}: mixer {f.mixer_!r} is not a registered mixer (field 'chosen')"
        )
    f.center_losses_ = meta.get("center_losses")
    f.mixer_losses_ = meta.get("mixer_losses")
    f.baseline_weight_, f.baseline_season_, f.baseline_losses_ = read_baseline(meta, config)
    f.plan_ = read_plan(f, meta.get("plan") or {}, config)
    if f.ensemble_size_ < 1:
        raise CheckpointError(f"{config}: ensemble_size {f.ensemble_size_} is not positive")
    members = [
        build_forecaster(
            f._model_config(f.dim_, f.heads_, f.loss_, f.center_, f.mixer_),
            len(f.target_names_),
            f.lookback_,
            f.horizon,
            f.covariate_shape_,
        )
        for _ in range(f.ensemble_size_)
    ]
    model = one_model(members)
    load_described_weights(model, weights, config, weight_fields(f.ensemble_size_))
    f.device_ = estimator_device(device or f.device)
    f.model_ = model.to(f.device_).eval()
    return f


def _is_number(value) -> bool:
    """A JSON number (not a boolean, which Python counts as an int)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_plan(f, saved: dict, config: Path) -> FitPlan:
    """The fit's plan: the choices read above (the checked source of truth), with what
    only the plan records (the training windows, whether a refit was planned, the centers
    compared) from its saved copy; folders saved before it have no window count."""
    windows = saved.get("train_windows")
    if windows is not None and (not isinstance(windows, int) or windows < 1):
        raise CheckpointError(f"{config}: plan train_windows {windows!r} is not a positive count")
    centers = saved.get("centers") or (list(f.center_losses_) if f.center_losses_ else [f.center_])
    if not set(centers) <= set(CENTERS):
        raise CheckpointError(f"{config}: plan centers {centers!r} are not among {CENTERS}")
    mixers = saved.get("mixers") or (list(f.mixer_losses_) if f.mixer_losses_ else [f.mixer_])
    if not set(mixers) <= set(list_mixers()):
        raise CheckpointError(f"{config}: plan mixers {mixers!r} are not registered mixers")
    return FitPlan(
        lookback=f.lookback_,
        train_windows=windows,
        refit=bool(saved.get("refit", f.refit_epochs_ is not None)),
        max_epochs=f.max_epochs_,
        epoch_windows=f.epoch_windows_,
        patience=f.patience_,
        dim=f.dim_,
        heads=f.heads_,
        ensemble_size=f.ensemble_size_,
        loss=f.loss_,
        centers=tuple(centers),
        batch_size=f.batch_size_,
        learning_rate=f.learning_rate_,
        mixers=tuple(mixers),
        ema_decay=f.ema_decay_,
        target_transform=f.target_transform_,
    )


def read_baseline(meta: dict, config: Path) -> tuple[float, int, dict | None]:
    """(weight, season, losses) of the seasonal naive forecast saved in `meta` (folders
    saved before it: weight 0)."""
    saved = meta.get("baseline")
    if saved is None:
        return 0.0, 1, None
    weight, season = saved.get("weight"), saved.get("season")
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or not 0 <= weight <= 1:
        raise CheckpointError(f"{config}: baseline weight {weight!r} is not a number in [0, 1]")
    if not isinstance(season, int) or isinstance(season, bool) or season < 1:
        raise CheckpointError(f"{config}: baseline season {season!r} is not a positive integer")
    losses = saved.get("losses")
    if losses is not None:
        losses = {float(w): float(loss) for w, loss in losses.items()}
    return float(weight), season, losses


def weight_fields(ensemble_size: int) -> dict:
    """WEIGHT_FIELDS for a model of `ensemble_size` networks (an ensemble's weights are
    its members', under members.<i>.)."""
    if ensemble_size == 1:
        return WEIGHT_FIELDS
    fields = {
        f"members.{i}.{prefix}": field
        for i in range(ensemble_size)
        for prefix, field in WEIGHT_FIELDS.items()
    }
    return {**fields, "members.": "ensemble_size (field 'chosen')"}


def version_2_meta(meta: dict) -> dict:
    """A format 1/2 forecaster.json (one wide series, no covariates) in format 3's terms."""
    scaler = StandardScaler.from_state_dict(meta["scaler"])
    context = scaler.inverse_transform(np.asarray(meta["last_context"], dtype=np.float64))
    rows = len(meta["last_index"])
    empty = [[] for _ in range(rows)]
    series_state = {
        "uid": "series",
        "index": meta["last_index"],
        "index_is_datetime": meta["last_index_is_datetime"],
        "freq": meta["freq"],
        "target": context.tolist(),
        "hist": empty,
        "futr": empty,
        "static": [],
        "scaler": {"target": scaler.state_dict(), "hist": None, "futr": None},
    }
    return {
        **meta,
        "layout": "wide",
        "target_names": meta["feature_names_in"],
        "calendar": [],
        "covariate_shape": dataclasses.asdict(CovariateShape()),
        "static_scaler": None,
        "series": [series_state],
    }
