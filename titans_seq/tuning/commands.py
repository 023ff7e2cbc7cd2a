"""CLI subcommand `titans-seq tune`."""

from __future__ import annotations

import argparse

from ..cli_types import non_negative_int, positive_float, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    tune = subparsers.add_parser(
        "tune",
        help="tune a recipe's hyper-parameters with Optuna",
        description=(
            "Run Optuna trials over the recipe's `search_space:` (or --search-space FILE). "
            "Several workers share a study when they use the same --storage and --study: run "
            "the same command on every machine, e.g. with "
            "--storage postgresql://user:password@host/db."
        ),
    )
    tune.add_argument("recipe", help="recipe file or built-in name")
    tune.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    tune.add_argument(
        "--trials", type=positive_int, required=True, help="trials run by this worker"
    )
    tune.add_argument(
        "--storage", help="Optuna storage URL (default: sqlite file study.db in --out-dir)"
    )
    tune.add_argument("--study", help="study name (default: the recipe name)")
    tune.add_argument("--search-space", help="YAML file with the search space")
    tune.add_argument("--out-dir", help="tuning folder (default: runs/tune/STUDY)")
    tune.add_argument(
        "--pruner",
        choices=("median", "hyperband", "none"),
        default="median",
        help="prune trials from their intermediate validation scores (default: median)",
    )
    tune.add_argument("--seed", type=non_negative_int, default=None, help="seed of the TPE sampler")
    tune.add_argument(
        "--timeout", type=positive_float, default=None, help="stop after this many seconds"
    )
    tune.add_argument("--no-plots", action="store_true", help="do not write the study plots")
    tune.set_defaults(handler=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    from .study import GRACE_S, tune

    result = tune(
        args.recipe,
        n_trials=args.trials,
        overrides=args.overrides,
        storage=args.storage,
        study_name=args.study,
        search_space=args.search_space,
        out_dir=args.out_dir,
        pruner=args.pruner,
        sampler_seed=args.seed,
        timeout=args.timeout,
        plots=not args.no_plots,
    )
    running = ""
    if result.n_running:
        running = (
            f", {result.n_running} running (on other workers, or left by a worker that "
            f"stopped: marked failed once its heartbeat is {GRACE_S} s old)"
        )
    print(
        f"study {result.study_name}: {result.n_trials} trials ({result.n_complete} complete, "
        f"{result.n_pruned} pruned, {result.n_failed} failed{running})"
    )
    if result.best_recipe is None:
        print("no trial completed: nothing to export")
        return 1
    print(f"best value {result.best_value:.6g} with {result.best_params}")
    print(f"best recipe: {result.best_recipe}")
    return 0
