"""Class labels as a classifier takes them: one kind per fit, none missing.

scikit-learn's rule (`type_of_target`): labels are strings or numbers, discrete, and all of
one kind. NumPy would turn a mix of 1 and "a" into the strings "1" and "a", so that
`predict` returned "1" for a label given as 1; here such a mix is refused, as are missing
labels (None, NaN) and continuous values.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from titans_seq.data import DataError

_SHOW = 5


def _kind(value) -> str:
    if value is None or value is pd.NA or value is pd.NaT:
        return "missing"
    if isinstance(value, (str, bytes, np.str_, np.bytes_)):
        return "string"
    if isinstance(value, (bool, np.bool_)):
        return "boolean"
    if isinstance(value, numbers.Number):
        return "missing" if isinstance(value, numbers.Real) and np.isnan(value) else "number"
    return type(value).__name__


def check_labels(y, n_samples: int) -> np.ndarray:
    """The labels `y` as a 1-D array of one kind (strings, numbers or booleans).

    Raises DataError naming the problem: a length other than `n_samples`, missing labels
    (with their positions), a mix of kinds, labels of another type, continuous numbers.
    """
    values = list(y.tolist() if isinstance(y, (np.ndarray, pd.Series)) else y)
    array = np.asarray(y, dtype=object)
    if array.ndim != 1 or len(values) != n_samples:
        raise DataError(f"X has {n_samples} sequences but y has shape {array.shape}")
    kinds = [_kind(v) for v in values]
    missing = [i for i, kind in enumerate(kinds) if kind == "missing"]
    if missing:
        raise DataError(
            f"y has {len(missing)} missing label(s) (None or NaN), at positions "
            f"{missing[:_SHOW]}{' ...' if len(missing) > _SHOW else ''}: drop those sequences "
            "or label them"
        )
    found = sorted(set(kinds))
    other = [k for k in found if k not in ("string", "number", "boolean")]
    if other:
        raise DataError(f"labels must be strings or numbers, got values of type {other}")
    if len(found) > 1:
        examples = [values[kinds.index(kind)] for kind in found]
        raise DataError(
            f"y mixes label kinds ({' and '.join(found)}, e.g. "
            f"{', '.join(repr(e) for e in examples)}): give every label the same kind, e.g. "
            "all strings"
        )
    labels = np.asarray(values)
    if np.issubdtype(labels.dtype, np.floating):
        fractional = labels[labels != np.round(labels)]
        if len(fractional):
            raise DataError(
                f"y holds continuous values (e.g. {fractional[0].item()!r}): a classifier "
                "needs discrete classes"
            )
    return labels
