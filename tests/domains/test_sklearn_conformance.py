"""scikit-learn conformance of DNAClassifier and TitansForecaster.

Both declare through `__sklearn_tags__` that they do not take a [n_samples, n_features]
array (DNA strings; one time series whose rows are time steps). For such estimators
scikit-learn's `check_estimator` skips every check, the API checks included (each warns that
it requires 2-D input). This module calls scikit-learn's API checks that need no data one by
one, and runs the data checks' rules with the input each estimator does take (fit returns
self, fit leaves the parameters alone and adds only `_` attributes, unfitted estimators
raise NotFittedError, refitting is deterministic, read-only input).
"""

import warnings

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks as sk
from sklearn.utils import get_tags

from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.genomics import DNAClassifier

TINY = dict(dim=16, depth=1, heads=2, mixer_options={"chunk_size": 4}, random_state=0)
ESTIMATORS = {
    "dna": lambda: DNAClassifier(**TINY, max_epochs=1, batch_size=16, max_len=32),
    "forecaster": lambda: TitansForecaster(
        **TINY, lookback=16, horizon=4, patch_len=4, stride=4, max_epochs=1
    ),
}

# scikit-learn's checks that apply to any estimator whatever its input
API_CHECKS = [
    sk.check_estimator_cloneable,
    sk.check_estimator_repr,
    sk.check_estimator_tags_renamed,
    sk.check_valid_tag_types,
    sk.check_no_attributes_set_in_init,
    sk.check_do_not_raise_errors_in_init_or_set_params,
    sk.check_parameters_default_constructible,
    sk.check_get_params_invariance,
    sk.check_set_params,
    sk.check_mixin_order,
    sk.check_estimators_unfitted,
]


def fit_data(kind: str):
    """(args of fit, input of predict) for each estimator: DNA strings or one series."""
    rng = np.random.default_rng(0)
    if kind == "dna":
        X = ["".join(rng.choice(list("ACGT"), size=int(n))) for n in rng.integers(8, 30, 40)]
        y = np.array(["a", "b"] * 20)
        return (X, y), X[:5]
    series = np.sin(np.arange(120)[:, None] / 5.0 + np.arange(2)) + 0.1 * rng.normal(size=(120, 2))
    return (series,), series[-40:]


def predictions(estimator, kind: str, predict_input) -> np.ndarray:
    if kind == "dna":
        return estimator.predict_proba(predict_input)
    return np.asarray(estimator.predict(predict_input))


@pytest.mark.parametrize("kind", ESTIMATORS)
def test_check_estimator_skips_its_checks_by_the_tags(kind):
    estimator = ESTIMATORS[kind]()
    assert get_tags(estimator).input_tags.two_d_array is False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sk.check_estimator(estimator, on_fail="raise")
    assert any("requires input" in str(w.message) for w in caught)


def test_tags_state_the_inputs():
    dna = get_tags(ESTIMATORS["dna"]())
    assert dna.input_tags.string and dna.estimator_type == "classifier"
    forecaster = ESTIMATORS["forecaster"]()
    assert get_tags(forecaster).input_tags.allow_nan is False
    assert get_tags(forecaster.set_params(missing="interpolate")).input_tags.allow_nan is True


@pytest.mark.parametrize("check", API_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("kind", ESTIMATORS)
def test_scikit_learn_api_check(kind, check):
    estimator = ESTIMATORS[kind]()
    check(type(estimator).__name__, estimator)


@pytest.mark.parametrize("kind", ESTIMATORS)
def test_fit_rules_with_the_estimators_own_input(kind):
    estimator = ESTIMATORS[kind]()
    fit_args, predict_input = fit_data(kind)
    params_hash = joblib.hash(estimator.get_params())
    public_before = {k for k in vars(estimator) if not k.startswith("_")}

    assert estimator.fit(*fit_args) is estimator
    # fit leaves the parameters alone and adds only fitted `name_` or private attributes
    assert joblib.hash(estimator.get_params()) == params_hash
    added = {k for k in vars(estimator) if not k.startswith("_")} - public_before
    assert added and all(k.endswith("_") for k in added), added
    first = predictions(estimator, kind, predict_input)

    # a clone is unfitted; refitting with the same random_state reproduces the predictions
    copy = clone(estimator)
    with pytest.raises(NotFittedError):
        predictions(copy, kind, predict_input)
    np.testing.assert_allclose(predictions(copy.fit(*fit_args), kind, predict_input), first)
    np.testing.assert_allclose(predictions(estimator.fit(*fit_args), kind, predict_input), first)


@pytest.mark.parametrize("kind", ESTIMATORS)
def test_unfitted_score_raises_not_fitted(kind):
    fit_args, _ = fit_data(kind)
    with pytest.raises(NotFittedError):
        ESTIMATORS[kind]().score(*fit_args)


def test_forecaster_reads_read_only_memmapped_series(tmp_path):
    (series,), context = fit_data("forecaster")
    path = tmp_path / "series.npy"
    np.save(path, series)
    readonly = np.load(path, mmap_mode="r")
    forecaster = ESTIMATORS["forecaster"]().fit(readonly)
    assert forecaster.predict(readonly[-40:]).shape == (4, 2)
    assert forecaster.n_features_in_ == 2
