"""Every size and setting of the estimators is checked when `fit` starts, before any data is
read, with a message naming the parameter; recipes get the same checks when loaded."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from titans_seq.data import DataError
from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.genomics import DNAClassifier
from titans_seq.errors import ConfigError
from titans_seq.training import from_dict

SERIES = np.random.default_rng(0).normal(size=(300, 2))

FORECASTER_BAD = [
    ("patch_len", 0), ("stride", 0), ("stride", -2), ("dim", 0), ("depth", 0),
    ("lookback", 0), ("horizon", -1), ("max_epochs", 0), ("batch_size", 0),
    ("patience", -1), ("learning_rate", 0.0), ("learning_rate", float("nan")),
    ("validation_fraction", 1.0), ("validation_fraction", -0.1), ("quantiles", (0.1, 1.5)),
    ("quantiles", (0.5, 0.5)), ("random_state", -1),
]  # fmt: skip


@pytest.mark.parametrize("name, value", FORECASTER_BAD)
def test_forecaster_parameters_are_checked_before_the_data(name, value):
    forecaster = TitansForecaster(**{name: value})
    with pytest.raises(ConfigError, match=name):
        forecaster.fit("not a series at all")  # the parameter error comes first


def test_a_patch_longer_than_a_given_lookback_is_named_before_the_data():
    forecaster = TitansForecaster(lookback=96, patch_len=200)
    with pytest.raises(ConfigError, match="patch_len=200 is longer than lookback"):
        forecaster.fit("not a series at all")


def test_forecaster_takes_numpy_integers_from_a_parameter_grid():
    forecaster = TitansForecaster(
        lookback=np.int64(32), horizon=np.int64(8), patch_len=np.int64(8), stride=np.int64(4),
        max_epochs=np.int64(1), dim=np.int64(16), heads=np.int64(2), random_state=np.int64(0),
    )  # fmt: skip
    assert forecaster.fit(SERIES).predict().shape == (8, 2)


def test_duplicated_column_names_are_a_data_error():
    frame = pd.DataFrame(SERIES, columns=["a", "a"])
    with pytest.raises(DataError, match=r"duplicated column names: \['a'\]"):
        TitansForecaster(max_epochs=1).fit(frame)
    frame = pd.DataFrame(SERIES, columns=[1, "1"])  # the same name once made a string
    with pytest.raises(DataError, match="duplicated column names"):
        TitansForecaster(max_epochs=1).fit(frame)


DNA_BAD = [
    ("max_len", 0), ("max_len", "full"), ("dim", 0), ("heads", 0), ("rc_mode", "both"),
    ("architecture", "rnn"), ("max_epochs", 0), ("batch_size", -4), ("learning_rate", -1e-3),
    ("patience", 1.5), ("validation_fraction", 2.0),
]  # fmt: skip


@pytest.mark.parametrize("name, value", DNA_BAD)
def test_dna_classifier_parameters_are_checked_before_the_data(name, value):
    with pytest.raises(ConfigError, match=name):
        DNAClassifier(**{name: value}).fit(["ACGT", "GGCC"], [0, 1])


@pytest.mark.parametrize(
    "section, key, value",
    [("model", "patch_len", 0), ("model", "stride", -1), ("data", "lookback", 0),
     ("model", "dropout", 1.0)],
)  # fmt: skip
def test_forecasting_recipes_get_the_same_checks_when_loaded(section, key, value):
    raw = {"name": "bad", "task": "forecasting", section: {key: value}}
    with pytest.raises(ConfigError, match=rf"{section}\.{key}"):
        from_dict(raw)


def test_dna_recipes_get_the_same_checks_when_loaded():
    with pytest.raises(ConfigError, match=r"data\.max_len"):
        from_dict({"name": "bad", "task": "dna_classification", "data": {"max_len": 0}})
