"""Study plots as PNG files (optuna.visualization.matplotlib, Agg backend)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


def plot_study(study, out_dir: Path) -> list[Path]:
    """optimization_history.png, param_importances.png and intermediate_values.png.

    A plot that the study cannot support yet (importances need two finished trials with
    varying parameters) is skipped with a log message, never an error: the tuning itself
    succeeded.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import optuna.visualization.matplotlib as ovm
    from optuna.trial import TrialState

    complete = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    wanted = {"optimization_history": (ovm.plot_optimization_history, 1)}
    wanted["param_importances"] = (ovm.plot_param_importances, 2)
    wanted["intermediate_values"] = (ovm.plot_intermediate_values, 1)
    written = []
    for name, (plot, needed) in wanted.items():
        if len(complete) < needed:
            log.info("skipping %s: needs %d completed trial(s)", name, needed)
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna flags its matplotlib API experimental
                ax = plot(study)
        except (ValueError, RuntimeError) as err:
            log.info("skipping %s: %s", name, err)
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax.flat[0].figure
        fig.tight_layout()
        path = Path(out_dir) / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
