"""The z-scoring scalers: the plain one and the one on the logarithm, numpy and torch in,
their saved states, and values a log scale cannot take refused."""

import numpy as np
import pytest
import torch

from titans_seq.data import LogStandardScaler, StandardScaler, scaler_from_state


def test_the_log_scaler_z_scores_the_logarithm_and_inverts_it():
    rng = np.random.default_rng(0)
    values = np.exp(rng.normal(3.0, 1.5, size=(200, 2)))  # levels 1 to thousands
    scaler = LogStandardScaler().fit(values)
    z = scaler.transform(values)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-12)
    np.testing.assert_allclose(scaler.inverse_transform(z), values, rtol=1e-12)
    # a relative change is the same step in z wherever the level is
    step = scaler.transform(values * 1.1) - z
    np.testing.assert_allclose(
        step, np.broadcast_to(np.log(1.1) / scaler.scale_, step.shape), rtol=1e-9
    )
    tensor = torch.tensor(values[:5], dtype=torch.float32)
    out = scaler.transform(tensor)
    assert out.dtype == torch.float32
    torch.testing.assert_close(scaler.inverse_transform(out), tensor, rtol=1e-5, atol=0)


def test_states_say_which_scaler_they_are():
    values = np.array([[1.0], [2.0], [4.0]])
    for scaler in (LogStandardScaler().fit(values), StandardScaler().fit(values)):
        again = scaler_from_state(scaler.state_dict())
        assert type(again) is type(scaler)
        np.testing.assert_array_equal(again.transform(values), scaler.transform(values))


@pytest.mark.parametrize("bad", [0.0, -1.0, np.nan])
def test_a_log_scale_refuses_values_it_cannot_take(bad):
    with pytest.raises(ValueError, match="positive values"):
        LogStandardScaler().fit(np.array([[1.0], [bad]]))
    scaler = LogStandardScaler().fit(np.array([[1.0], [3.0]]))
    with pytest.raises(ValueError, match="positive values"):
        scaler.transform(np.array([[2.0], [bad]]))
