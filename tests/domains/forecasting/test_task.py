"""The `forecasting` training task: recipes train end to end, DLinear baseline, metrics."""

import pytest
import torch

from titans_seq.domains.forecasting.dlinear import DLinear
from titans_seq.training import load_config, train


def test_dlinear_shapes_and_initial_mean_forecast():
    model = DLinear(lookback=30, horizon=7)
    x = torch.randn(4, 30, 3)
    assert model(x).shape == (4, 7, 3)
    constant = torch.full((2, 30, 3), 5.0)
    torch.testing.assert_close(model(constant), torch.full((2, 7, 3), 5.0))
    with pytest.raises(ValueError, match="odd"):
        DLinear(30, 7, kernel_size=4)


@pytest.mark.parametrize("architecture", ["simba", "dlinear"])
def test_tiny_recipe_trains_on_etth1_and_improves(tmp_path, architecture):
    cfg = load_config(
        "forecasting/tiny",
        [
            f"model.architecture={architecture}",
            f"train.out_dir={tmp_path}/run",
            "train.progress=false",
            "train.max_steps=40",
            "eval.every=20",
        ],
    )
    result = train(cfg)
    mses = [h["mse"] for h in result.history if "mse" in h]
    assert len(mses) == 2 and all(m == m for m in mses)
    assert mses[-1] < 1.2  # z-scored: well under the variance of the target
    assert (tmp_path / "run" / "best_model.safetensors").is_file()
