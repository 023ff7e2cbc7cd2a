"""The learning-curve figure written at the end of a run (PNG, matplotlib's Agg backend)."""

from __future__ import annotations

from pathlib import Path

from .logs import EVAL_LOG, TRAIN_LOG, read_csv


def plot_learning_curves(run_dir: Path, out: Path | None = None) -> Path:
    """Train loss (raw and smoothed) and every validation metric against the step."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed (servers, CI, worker processes)
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "learning_curves.png"
    train = read_csv(run_dir / TRAIN_LOG)
    val = read_csv(run_dir / EVAL_LOG)
    metrics = [k for k in (val[0] if val else {}) if k not in ("step", "loss")]
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(5 * (1 + len(metrics)), 3.6))
    axes = list(axes) if len(metrics) else [axes]

    steps = [r["step"] for r in train if "loss" in r]
    losses = [r["loss"] for r in train if "loss" in r]
    # smoothing only helps with many points; with few it would lag behind the curve
    smooth = len(losses) >= 30
    axes[0].plot(steps, losses, alpha=0.35 if smooth else 1.0, label="train loss")
    if smooth:
        axes[0].plot(steps, _ema(losses, 0.9), label="train loss (EMA 0.9)")
    if val and "loss" in val[0]:
        axes[0].plot([r["step"] for r in val], [r["loss"] for r in val], "o-", label="val loss")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("loss")
    axes[0].legend()
    for ax, name in zip(axes[1:], metrics):
        ax.plot([r["step"] for r in val if name in r], [r[name] for r in val if name in r], "o-")
        ax.set_xlabel("step")
        ax.set_title(f"val {name}")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _ema(values: list[float], decay: float) -> list[float]:
    """Exponential moving average with bias correction (no pull towards the first value)."""
    out, avg = [], 0.0
    for i, v in enumerate(values, start=1):
        avg = decay * avg + (1 - decay) * v
        out.append(avg / (1 - decay**i))
    return out
