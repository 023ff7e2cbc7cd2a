"""What the language-model studies share (`lm_passkey.py`, `lm_long_context.py`): the mixers
compared, the recipe overrides every mixer gets, and widths matched by parameter count."""

from __future__ import annotations

from pathlib import Path

import torch

MIXERS = ("mac", "mag", "mal", "lmm", "swa", "attention")
WINDOW_OPTION = {"mag": "window", "mal": "window", "swa": "window", "mac": "segment_size"}
MEMORY_MIXERS = {"mac", "mag", "mal", "lmm"}


def overrides_for(args, mixer: str, dim: int) -> dict:
    """Recipe overrides shared by every mixer, plus the mixer's own window option."""
    options = {"chunk_size": args.chunk_size} if mixer in MEMORY_MIXERS else {}
    if mixer in WINDOW_OPTION:
        options[WINDOW_OPTION[mixer]] = args.window
    if mixer in {"mac", "mag", "mal", "lmm"}:
        options["num_persistent"] = 4
    steps = args.steps
    return {
        "model.dim": dim,
        "model.depth": args.depth,
        "model.heads": args.heads,
        "model.mixer_options": options,
        "data.train_length": args.train_length,
        "data.digits": args.digits,
        "train.max_steps": steps,
        "train.batch_size": args.batch_size,
        "train.seed": args.seed,
        "train.device": args.device,
        "train.precision": args.precision,
        "train.out_dir": str(Path(args.out_dir) / mixer),
        "train.checkpoint_every": steps,
        "train.log_every": max(1, min(50, steps // 10)),
        "train.progress": not args.quiet,
        "train.tensorboard": False,
        "eval.every": max(1, steps // args.evals),
        # the best weights by validation loss: smooth, where accuracy (all digits right) sits
        # at 0 for a while and would keep the first evaluation's weights on ties
        "eval.metric": "loss",
        "eval.mode": "min",
        "data.num_val": args.val_samples,
        "optim.lr": args.lr,
        "optim.warmup_steps": args.warmup if args.warmup is not None else max(1, steps // 20),
    }


def count_parameters(cfg) -> int:
    """Parameters of the model a config builds (on the meta device: no memory, no init)."""
    from titans_seq.training.tasks import get_task

    with torch.device("meta"):
        model = get_task(cfg.task).build_model(cfg)
    return sum(p.numel() for p in model.parameters())


def matched_dim(args, mixer: str, target: int, family: str, overrides_for) -> tuple[int, int]:
    """(dim, parameter count) of `mixer` closest to `target` among widths divisible by
    2 * heads (even head dims, for rotary embeddings), within half to twice --dim, built from
    recipe `lm/{family}_{mixer}` with `overrides_for(args, mixer, dim)`."""
    from titans_seq.training.config import load_config

    step = 2 * args.heads
    best = None
    for dim in range(max(step, (args.dim // 2) // step * step), 2 * args.dim + 1, step):
        cfg = load_config(f"lm/{family}_{mixer}", overrides_for(args, mixer, dim))
        count = count_parameters(cfg)
        if best is None or abs(count - target) < abs(best[1] - target):
            best = (dim, count)
    return best


def result_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def chosen_mixers(spec: str) -> list[str]:
    """The mixers of --mixers ("lmm,mag"), each one of MIXERS."""
    mixers = [m.strip() for m in spec.split(",") if m.strip()]
    unknown = sorted(set(mixers) - set(MIXERS))
    if unknown:
        raise SystemExit(f"unknown mixers {unknown}; choose from {', '.join(MIXERS)}")
    return mixers


def parameter_target(args, family: str, overrides_for) -> int | None:
    """With --match-params, the parameter count of `lm/{family}_{--match-to}` at --dim, which
    every mixer's width is matched to (`matched_dim`); None otherwise."""
    from titans_seq.training.config import load_config

    if not args.match_params:
        return None
    overrides = overrides_for(args, args.match_to, args.dim)
    return count_parameters(load_config(f"lm/{family}_{args.match_to}", overrides))
