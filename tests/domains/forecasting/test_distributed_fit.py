"""A panel fitted under torchrun (2 processes, gloo, CPU): every process ends with the
same forecaster, the one a single process fits with the same global batch, and each
forecasts its own share of the series."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from process_helpers import subprocess_env

from titans_seq.domains.forecasting import TitansForecaster
from titans_seq.domains.forecasting import estimator as estimator_module

OPTIONS = dict(horizon=12, lookback=48, dim=16, heads=2, depth=1, max_epochs=2,
               ensemble_size=1, random_state=0, device="cpu")  # fmt: skip


def hourly_panel() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    parts = []
    for i in range(10):
        n = 150 + 13 * i
        day = np.sin(np.arange(n) / 24 * 2 * np.pi) * (i + 1)
        parts.append(
            pd.DataFrame(
                {
                    "unique_id": f"s{i}",
                    "y": day + rng.normal(size=n) * 0.1,
                    "ds": pd.date_range("2020-01-01", periods=n, freq="h"),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


def without_dropout():
    """`_model_config` with dropout off: each process draws its own dropout masks, so only
    a network without dropout can follow a single process step for step."""
    original = estimator_module.TitansForecaster._model_config
    return lambda self, *args: dataclasses.replace(original(self, *args), dropout=0.0)


SCRIPT = textwrap.dedent(
    """
    import json, os
    from test_distributed_fit import OPTIONS, hourly_panel, without_dropout
    from titans_seq.domains.forecasting import TitansForecaster, estimator

    estimator.TitansForecaster._model_config = without_dropout()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    forecaster = TitansForecaster(**OPTIONS).fit(hourly_panel())
    share = forecaster.ids_[rank::world]
    forecast = forecaster.predict(ids=share)
    weights = [p.detach().double().flatten().tolist() for p in forecaster.model_.parameters()]
    with open(os.path.join({out!r}, f"rank{{rank}}.json"), "w") as f:
        json.dump({{"weights": weights, "share": share, "forecast": forecast.iloc[:, -1].tolist(),
                   "epochs": forecaster.n_epochs_, "center": forecaster.center_,
                   "baseline": forecaster.baseline_weight_}}, f)
    """
)


def test_two_processes_fit_the_forecaster_one_process_fits(tmp_path, monkeypatch):
    script = tmp_path / "fit.py"
    script.write_text(SCRIPT.format(out=str(tmp_path)))
    here = Path(__file__).parent  # this module and the tests' helpers, importable there
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=2", str(script)]  # fmt: skip
    env = subprocess_env(here, here.parents[1])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]

    monkeypatch.setattr(estimator_module.TitansForecaster, "_model_config",
                        without_dropout())  # fmt: skip
    single = TitansForecaster(**OPTIONS).fit(hourly_panel())
    assert ranks[0]["weights"] == ranks[1]["weights"]  # the same network in every process
    for got, want in zip(ranks[0]["weights"], single.model_.parameters(), strict=True):
        got = torch.tensor(got, dtype=torch.float64)
        torch.testing.assert_close(got, want.detach().double().flatten(), rtol=1e-4, atol=1e-6)
    for r in ranks:
        assert (r["epochs"], r["center"], r["baseline"]) == (
            single.n_epochs_,
            single.center_,
            single.baseline_weight_,
        )
    # the shares cover every series once, and each forecasts what the single fit does
    assert sorted(ranks[0]["share"] + ranks[1]["share"]) == sorted(single.ids_)
    for r in ranks:
        want = single.predict(ids=r["share"]).iloc[:, -1].to_numpy()
        np.testing.assert_allclose(r["forecast"], want, rtol=1e-3, atol=1e-4)


def test_processes_that_read_different_panels_are_told_so(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(textwrap.dedent(
        """
        import os
        from test_distributed_fit import OPTIONS, hourly_panel
        from titans_seq.domains.forecasting import TitansForecaster

        panel = hourly_panel()
        if os.environ["RANK"] == "1":  # one process lost a series
            panel = panel[panel.unique_id != "s3"]
        TitansForecaster(**OPTIONS).fit(panel)
        """
    ))  # fmt: skip
    here = Path(__file__).parent
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node=2", str(script)]  # fmt: skip
    env = subprocess_env(here, here.parents[1])
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "every process fits the same panel" in done.stderr
    assert "process 0: 10 series" in done.stderr and "process 1: 9 series" in done.stderr
