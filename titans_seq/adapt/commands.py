"""CLI: `titans-seq adapt train` (an SVF expert, LoRA adapter or fine-tuned model of a
trained run, on a recipe's data) and `titans-seq adapt mix` (few-shot CEM mixture of
experts on a recipe's data, evaluated beside every single expert and the base)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..cli_types import non_negative_int, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    adapt = subparsers.add_parser(
        "adapt",
        help="adapt a trained run to a task: SVF experts, mixtures, LoRA / full baselines",
        description="Singular-value fine-tuning (Transformer²) of a trained run (docs/adapt.md).",
    )
    commands = adapt.add_subparsers(dest="adapt_command", required=True, help="what to do")

    train = commands.add_parser(
        "train",
        help="train an expert (or a LoRA / full fine-tuning baseline) on a recipe's data",
        description=(
            "Train on RECIPE's data (with its optim/train/eval sections) starting from the "
            "trained model of the run folder --base; the model section is the base run's. "
            "An SVF run writes expert.safetensors into its run folder."
        ),
    )
    train.add_argument("recipe", help="recipe file or built-in name giving the task's data")
    train.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    train.add_argument("--base", required=True, type=Path, help="run folder of the base model")
    train.add_argument(
        "--method",
        choices=("svf", "lora", "full", "frozen"),
        default="svf",
        help="svf: singular-value scales (an expert); lora: peft LoRA; full: every weight; "
        "frozen: only --also-train (default: svf)",
    )
    train.add_argument(
        "--targets",
        nargs="+",
        default=None,
        metavar="PATTERN",
        help="fnmatch patterns over the matrices to adapt (default: every linear layer of the "
        "mixers and MLPs, and the memory's W_0)",
    )
    train.add_argument(
        "--also-train",
        nargs="+",
        default=(),
        metavar="PATTERN",
        help="patterns over parameters trained in full beside, e.g. a new head (default: none)",
    )
    train.add_argument("--lora-rank", type=positive_int, default=8, help="LoRA's r (default: 8)")
    train.add_argument(
        "--task-name",
        default=None,
        help="written into the expert file (default: the recipe's name)",
    )
    train.set_defaults(handler=run_train)

    mix = commands.add_parser(
        "mix",
        help="few-shot: search expert mixture weights (CEM) on k examples of a recipe's data",
        description=(
            "Search mixture weights of EXPERTS with the cross-entropy method on the first "
            "--shots training examples of RECIPE's data, then report the validation loss of "
            "the base, of every expert alone and of the mixture; --out writes the mixture as "
            "an expert file."
        ),
    )
    mix.add_argument("recipe", help="recipe file or built-in name giving the new task's data")
    mix.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    mix.add_argument("--base", required=True, type=Path, help="run folder of the base model")
    mix.add_argument("--experts", required=True, nargs="+", type=Path, help="expert files")
    mix.add_argument(
        "--shots",
        type=positive_int,
        default=32,
        help="labelled training examples used (default: 32)",
    )
    mix.add_argument(
        "--iterations", type=positive_int, default=8, help="CEM iterations (default: 8)"
    )
    mix.add_argument(
        "--population", type=positive_int, default=16, help="candidates per iteration (default: 16)"
    )
    mix.add_argument(
        "--seed", type=non_negative_int, default=0, help="the search's seed (default: 0)"
    )
    mix.add_argument("--out", type=Path, default=None, help="write the mixed expert here")
    mix.add_argument(
        "--strategy",
        choices=("cem", "classifier", "svf-classifier"),
        default="cem",
        help="cem: few-shot mixture weights; classifier: two-pass dispatch, an expert per "
        "example chosen by a logistic regression of the base model's features fitted on "
        "--shots training examples of every expert's own recipe (--expert-recipes); "
        "svf-classifier: the same dispatch with an SVF classification expert (z and a "
        "linear head trained to name the task) (default: cem)",
    )
    mix.add_argument(
        "--expert-recipes",
        nargs="+",
        default=None,
        metavar="RECIPE",
        help="with a classifier strategy: the recipe (data) each expert was trained on",
    )
    mix.set_defaults(handler=run_mix)


def _config_on_base(recipe: str, overrides: list[str], base: Path):
    """The recipe's config with the base run's model section (what the weights fit)."""
    from ..training.config import from_dict, load_config

    base_cfg = load_config(base / "config.yaml")
    cfg = load_config(recipe, overrides)
    if cfg.task != base_cfg.task:
        from ..errors import ConfigError

        raise ConfigError(
            f"the recipe's task is {cfg.task!r} but the base run's is {base_cfg.task!r}"
        )
    raw = cfg.to_dict()
    raw["model"] = base_cfg.to_dict()["model"]
    return from_dict(raw), base_cfg


def _base_builder(base: Path):
    from ..training.run_model import load_run_model

    _, _, model = load_run_model(base)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    def build(cfg):
        from ..training.tasks import get_task

        fresh = get_task(cfg.task).build_model(cfg)
        fresh.load_state_dict(state)
        return fresh

    return build


def run_train(args: argparse.Namespace) -> int:
    from ..training.loop import train
    from ..training.tasks import get_task
    from .task import EXPERT_FILE, AdaptationTask, AdaptConfig

    cfg, _ = _config_on_base(args.recipe, args.overrides, args.base)
    config = AdaptConfig(
        method=args.method,
        targets=None if args.targets is None else tuple(args.targets),
        also_train=tuple(args.also_train),
        lora_rank=args.lora_rank,
        task_name=args.task_name or cfg.name,
    )
    task = AdaptationTask(get_task(cfg.task), _base_builder(args.base), config, str(args.base))
    result = train(cfg, task=task)
    trained = sum(p.numel() for p in task.model.parameters() if p.requires_grad)
    print(
        f"finished at step {result.step}: best val {cfg.eval.metric} "
        f"{result.best_metric:.6g}; {trained:,} trained parameters; run folder {result.run_dir}"
    )
    if config.method == "svf":
        print(f"expert: {result.run_dir / EXPERT_FILE}")
    return 0


def _batches(dataset, size: int, limit: int | None) -> list:
    from ..training.tasks.base import fetch_batch

    starts = range(0, len(dataset), size)
    return [fetch_batch(dataset, range(i, min(i + size, len(dataset)))) for i in starts][:limit]


def run_mix(args: argparse.Namespace) -> int:
    from ..training.tasks import get_task
    from .mixture import cem_mixture, loss_score
    from .svf import SVF

    cfg, _ = _config_on_base(args.recipe, args.overrides, args.base)
    task = get_task(cfg.task)
    train_set, val_set = task.build_datasets(cfg)
    # the recipe's evaluation budget (eval.max_batches), as the training loop uses it
    val = _batches(val_set, cfg.eval.batch_size, cfg.eval.max_batches)
    svf = SVF(_base_builder(args.base)(cfg).eval(), base_name=str(args.base))
    score_val = loss_score(task, val)
    report = {"base": score_val(svf)}
    for path in args.experts:
        svf.load_expert(path)
        report[f"expert {path}"] = score_val(svf)
    if args.strategy in ("classifier", "svf-classifier"):
        report[f"two-pass dispatch ({args.strategy})"] = _dispatch_loss(args, cfg, task, svf, val)
    else:
        shots = _batches(train_set, max(1, args.shots), 1)
        search = cem_mixture(
            svf,
            args.experts,
            loss_score(task, shots),
            iterations=args.iterations,
            population=args.population,
            seed=args.seed,
        )
        report["mixture"] = score_val(svf)
        weights = ", ".join(f"{w:.3f}" for w in search.weights.tolist())
        print(f"mixture weights (CEM on {min(args.shots, len(train_set))} examples): {weights}")
    print(json.dumps({"validation loss": report}, indent=2))
    if args.out is not None and args.strategy == "cem":
        svf.save_expert(args.out, task=f"mixture of {len(args.experts)} experts")
        print(f"mixed expert: {args.out}")
    return 0


def _dispatch_loss(args, cfg, task, svf, val) -> float:
    """Validation loss when every example runs with the expert a classifier picks for it."""
    import torch

    from ..errors import UserError
    from ..training.tasks.base import batch_size_of
    from .dispatch import ExpertClassifier, index_batch
    from .mixture import loss_score
    from .task_experts import SVFTaskClassifier

    recipes = args.expert_recipes or []
    if len(recipes) != len(args.experts):
        raise UserError(
            f"--strategy {args.strategy} needs one --expert-recipes entry per expert "
            f"({len(args.experts)}), got {len(recipes)}"
        )
    examples = []
    for recipe in recipes:
        expert_cfg, _ = _config_on_base(recipe, [], args.base)
        expert_train, _ = task.build_datasets(expert_cfg)
        examples.append(_batches(expert_train, max(1, args.shots), 1))
    # running the task's loss runs the model; the classifier reads the features it makes
    kind = SVFTaskClassifier if args.strategy == "svf-classifier" else ExpertClassifier
    classifier = kind(forward=task.loss).fit(svf, examples)
    total, count = 0.0, 0
    for batch in val:
        choice = classifier.predict(svf, batch)
        for k in sorted(set(choice.tolist())):
            svf.load_expert(args.experts[k])
            part = index_batch(batch, torch.as_tensor(choice == k).nonzero().flatten())
            n = batch_size_of(part)
            total, count = total + loss_score(task, [part])(svf) * n, count + n
    return total / max(count, 1)
