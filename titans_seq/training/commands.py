"""CLI subcommands `titans-seq train` and `titans-seq recipes`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser(
        "train",
        help="train a recipe (a YAML path or a built-in name)",
        description=(
            "Train a recipe with dotted overrides, e.g. `titans-seq train "
            "synthetic/associative_recall_lmm optim.lr=3e-4 model.mixer=mag`. Under "
            "`torchrun --nproc_per_node N -m titans_seq.cli train ...` it trains on N processes."
        ),
    )
    train.add_argument("recipe", help="recipe file or built-in name (see `titans-seq recipes`)")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    train.add_argument(
        "--resume",
        nargs="?",
        const=True,
        default=False,
        metavar="CHECKPOINT",
        help="continue the run from its newest checkpoint (or from the given checkpoint folder)",
    )
    train.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved, validated configuration and exit",
    )
    train.set_defaults(handler=run_train)

    recipes = subparsers.add_parser(
        "recipes",
        help="list the built-in recipes",
        description=(
            "List the recipes shipped with titans-seq and installed packages (name and the "
            "first comment line), or print one resolved: `titans-seq recipes lm/tiny`."
        ),
    )
    recipes.add_argument("name", nargs="?", help="print this recipe, resolved")
    recipes.set_defaults(handler=run_recipes)


def run_train(args: argparse.Namespace) -> int:
    from .config import load_config
    from .loop import train

    cfg = load_config(args.recipe, args.overrides)
    if args.print_config:
        print(cfg.to_yaml(), end="")
        return 0
    result = train(cfg, resume=args.resume)
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, rank 0 reports
        if result.best_metric is not None:
            best = f"best val {cfg.eval.metric} {result.best_metric:.6g} at step {result.best_step}"
        elif result.history:
            best = f"{len(result.history)} evaluation(s), none with a finite val {cfg.eval.metric}"
        else:
            best = "no evaluation"

        print(f"finished at step {result.step}: {best}; run folder {result.run_dir}")
    return 0


def run_recipes(args: argparse.Namespace) -> int:
    from .recipe_files import builtin_recipe_path, list_recipes

    if args.name:
        from .config import load_config

        print(load_config(args.name).to_yaml(), end="")
        return 0
    names = list_recipes()
    width = max((len(n) for n in names), default=0)
    for name in names:
        print(f"{name:<{width}}  {_description(builtin_recipe_path(name))}")
    return 0


def _description(path: Path) -> str:
    """The first comment line of a recipe file, which by convention describes it."""
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
        if line.strip():
            break
    return ""
