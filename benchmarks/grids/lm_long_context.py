"""The long-context suite beyond the training length: Titans mixers vs. attention baselines.

    # the target run (GPU): trained at 1K bytes, evaluated at 1K ... 16K
    python benchmarks/grids/lm_long_context.py --device cuda

    # trained on streams of 4 x 256-byte segments with the state carried (1K bytes)
    python benchmarks/grids/lm_long_context.py --device cpu --threads 1 --train-length 1024 \
        --streams segment_length=256,segments=4,state_passing=0.5 ...

    # a CPU-sized study: small models, 256-byte training sequences, 256 ... 4K
    python benchmarks/grids/lm_long_context.py --device cpu --threads 1 --train-length 256 \
        --dim 64 --depth 2 --heads 2 --window 32 --chunk-size 8 --steps 600 \
        --batch-size 16 --lr 3e-3 --samples 8 --depths 0,0.5,1 --val-samples 64 \
        --no-match-params --out-dir runs/lm_long_context_cpu

Every mixer is trained by the shared training loop from its recipe `lm/suite_<mixer>` (the
`lm_suite` task: a mixture of `--tasks`, answer-only loss) with the same data, steps, batch,
learning rate and seed; widths are matched in parameters as in `lm_passkey.py`. The weights
of each run's best validation loss are then scored by `evaluate_suite` (greedy answers after
the prompt is streamed in pieces with the model's state) on every task at `--factors` times
the training length and every depth. A finished mixer is stored in `<out-dir>/<mixer>.json`
and not trained again on a rerun: asked for lengths its stored scores lack (or for other
tasks, depths or examples), its best weights are scored from its run folder; a rerun whose
training arguments differ from the finished run's is refused, naming the settings that
differ. Writes `<out-dir>/long_context.md` with the command, device and date.

`--mixers gdn` adds flash-linear-attention's Gated DeltaNet (`fla_gated_deltanet.py`: fla's
PyTorch forms, so it trains on a CPU; needs the fla wheels) in the SWA recipe's model, at
--dim (with --no-match-params); `--mixers tpm` titans-pytorch's NeuralMemory
(`titans_pytorch_memory.py`, its memory MLP at its defaults, chunks of --chunk-size; needs
titans-pytorch) likewise.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from harness import device_name  # noqa: E402
from lm_study import MIXERS, chosen_mixers, matched_dim, parameter_target, result_device  # noqa: E402
from lm_study import overrides_for as passkey_overrides  # noqa: E402

DEFAULT_TASKS = "niah_passkey,niah_number,niah_multikey,babi_qa1"
MEMORY_MIXERS = ("lmm", "mag", "mal", "mac")


class Peer(NamedTuple):
    """A mixer of another library: the recipe whose model it takes, the mixer built, the
    module that registers it, and the arguments passed on as its options (of the same name)."""

    recipe: str
    mixer: str
    module: str
    options: tuple[str, ...] = ()


PEERS = {
    "gdn": Peer("swa", "fla_gated_deltanet", "fla_gated_deltanet"),
    # titans-pytorch's memory steps at the chunk size the Titans mixers use
    "tpm": Peer("swa", "titans_pytorch_memory", "titans_pytorch_memory", ("chunk_size",)),
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--mixers",
        default=",".join(MIXERS),
        help=f"comma-separated mixers ({', '.join(MIXERS)}; gdn: fla's Gated DeltaNet; tpm: "
        "titans-pytorch's NeuralMemory)",
    )
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="suite tasks trained and evaluated")
    p.add_argument("--haystack", default="noise", help="haystack of training and evaluation")
    p.add_argument("--train-length", type=int, default=1024)
    p.add_argument("--factors", default="1,2,4,8,16", help="evaluation lengths / train length")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=None, help="warmup steps (default: steps/20)")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--window", type=int, default=64, help="window (swa/mag/mal), MAC segment")
    p.add_argument("--chunk-size", type=int, default=16, help="memory chunk size")
    p.add_argument("--match-to", default="mag", help="mixer whose parameter count all match")
    p.add_argument("--no-match-params", dest="match_params", action="store_false")
    p.add_argument("--samples", type=int, default=20, help="examples per task, length, depth")
    p.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="depths of the key statement")
    p.add_argument("--val-samples", type=int, default=256, help="validation examples")
    p.add_argument("--evals", type=int, default=8, help="validations during training")
    p.add_argument("--eval-batch-size", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="training seed (model init, data order)")
    p.add_argument("--eval-seed", type=int, default=0, help="seed of the evaluation examples")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda")
    p.add_argument("--precision", default="auto", help="train.precision (auto: bf16 on GPU)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument(
        "--streams",
        default="",
        help="train with the state carried: the recipe's streams section as KEY=VALUE,... "
        "(e.g. segment_length=256,segments=4,state_passing=0.5; --train-length is then the "
        "stream's length)",
    )
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more recipe overrides, applied last to every mixer's recipe (e.g. "
        "model.mixer_options.memory.forget_toward=initial; a mixer without the key keeps "
        "its recipe's)",
    )
    p.add_argument(
        "--compare-context",
        type=int,
        default=None,
        metavar="N",
        help="also score each model reading only each prompt's last N bytes from a fresh "
        "state (the control without carried memory; rows task:reset); finished models are "
        "re-scored from their run folders",
    )
    p.add_argument("--out-dir", default="runs/lm_long_context")
    p.add_argument(
        "--json",
        default=None,
        help="also write rows {model, task, length, seed, metric, value} (metric accuracy: "
        "exact match, or characters: the share of the answers' characters right; each the "
        "mean over depths) with train_length at the top (benchmarks/results/long_memory/)",
    )
    p.add_argument(
        "--label", default="", help="appended to the mixer's name in the JSON rows (lmm/LABEL)"
    )
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    args.digits = 5  # read by the passkey overrides, dropped below
    return args


def overrides_for(args, mixer: str, dim: int) -> dict:
    """The passkey benchmark's overrides (model, optimizer, loop) for the suite task."""
    overrides = passkey_overrides(args, mixer, dim)
    del overrides["data.digits"]
    if mixer in PEERS:
        peer = PEERS[mixer]
        overrides["model.mixer"] = peer.mixer
        overrides["model.mixer_options"] = {name: getattr(args, name) for name in peer.options}
    overrides["data.tasks"] = args.tasks.split(",")
    overrides["data.haystack"] = args.haystack
    for item in filter(None, args.streams.split(",")):
        key, _, value = item.partition("=")
        overrides[f"streams.{key.strip()}"] = yaml.safe_load(value)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        key, value = key.strip(), yaml.safe_load(value)
        if key.startswith("model.mixer_options."):
            if key.startswith("model.mixer_options.memory.") and mixer not in MEMORY_MIXERS:
                continue  # a memory option: the attention baselines have no memory
            # into the mixer options the shared overrides already set, level by level
            *path, last = key.removeprefix("model.mixer_options.").split(".")
            node = overrides["model.mixer_options"]
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
        else:
            overrides[key] = value
    return overrides


def suite_config(args, mixer: str, dim: int):
    """The training config of `mixer` at width `dim` (its run folder included)."""
    from titans_seq.training.config import load_config

    recipe = PEERS[mixer].recipe if mixer in PEERS else mixer
    return load_config(f"lm/suite_{recipe}", overrides_for(args, mixer, dim))


def trained_model(args, cfg) -> torch.nn.Module:
    """The network of `cfg`'s run with its best validation weights, on the scoring device."""
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS
    from titans_seq.training.tasks import get_task

    model = get_task(cfg.task).build_model(cfg)
    model.load_state_dict(load_weights(cfg.run_dir() / BEST_WEIGHTS))
    return model.to(torch.device(result_device(args.device)))


def score(args, model, lengths: list[int], depths: list[float], context: int | None = None):
    """`evaluate_suite` of `model` with the grid's settings (`context`: last bytes only)."""
    from titans_seq.domains.lm.evals.suite import evaluate_suite

    return evaluate_suite(
        model,
        lengths,
        args.tasks.split(","),
        depths=depths,
        samples=args.samples,
        haystack=args.haystack,
        seed=args.eval_seed,
        chunk_len=args.train_length,
        batch_size=args.eval_batch_size,
        device=torch.device(result_device(args.device)),
        progress=not args.quiet,
        context=context,
    )


def run_mixer(args, mixer: str, dim: int, lengths: list[int], depths: list[float]) -> dict:
    from titans_seq.domains.lm.evals.suite import plot_heatmaps
    from titans_seq.training.loop import train

    cfg = suite_config(args, mixer, dim)
    start = time.perf_counter()
    # a run folder with checkpoints (a killed run, or a finished one being re-scored) resumes
    result = train(cfg, resume=any((cfg.run_dir() / "checkpoints").glob("step_*")))
    train_seconds = time.perf_counter() - start
    model = trained_model(args, cfg)
    evaluation = score(args, model, lengths, depths)
    plot_heatmaps(evaluation, Path(args.out_dir) / f"{mixer}.png", title=mixer)
    return {
        "mixer": mixer,
        "dim": dim,
        "parameters": sum(p.numel() for p in model.parameters()),
        "mixer_options": cfg.model.mixer_options,
        "train_seconds": train_seconds,
        "best_step": result.best_step,
        "best_val": next((h for h in result.history if h["step"] == result.best_step), None),
        "evaluation": evaluation.to_dict(),
        "mean_by_length": mean_by_length(evaluation),
    }


def mean_by_length(evaluation) -> dict[str, float]:
    """A `SuiteResult`'s score per length (as a string), the mean over its tasks and depths."""
    return {
        str(n): sum(evaluation.mean(t, n) for t in evaluation.tasks) / len(evaluation.tasks)
        for n in evaluation.lengths
    }


def scored_as_asked(evaluation: dict, args, depths: list[float]) -> bool:
    """Whether a stored `SuiteResult.to_dict()` holds the tasks, depths, examples and haystack
    the arguments ask for (the lengths aside), with the characters scored."""
    return (
        evaluation.get("tasks") == args.tasks.split(",")
        and evaluation.get("depths") == [float(d) for d in depths]
        and evaluation.get("samples") == args.samples
        and evaluation.get("haystack") == args.haystack
        and evaluation.get("seed") == args.eval_seed
        and "characters" in evaluation  # rows written before the characters were scored
    )


def check_trained_as_asked(args, row: dict) -> None:
    """Refuse to reuse a finished row whose run folder was trained with other settings than
    the arguments make (other steps, width, streams, ...): its scores would be reported
    under this command. Keys its recipe predates are not compared."""
    from titans_seq.training.config import config_changes
    from titans_seq.training.run_files import RUN_CONFIG

    cfg = suite_config(args, row["mixer"], row["dim"])
    recipe = cfg.run_dir() / RUN_CONFIG
    if not recipe.is_file():
        raise SystemExit(
            f"{row['mixer']} is finished in {args.out_dir} but its run folder {cfg.run_dir()} "
            f"has no {RUN_CONFIG}: its training cannot be checked against these arguments"
        )
    changes = config_changes(
        yaml.safe_load(recipe.read_text()), cfg.to_dict(), keys_saved_only=True
    )
    if changes:
        raise SystemExit(
            f"{row['mixer']} in {args.out_dir} was trained with other settings than these "
            f"arguments make ({'; '.join(changes)}): use another --out-dir, or the arguments "
            "it was trained with to score it at more lengths"
        )


def add_missing_scores(args, row: dict, lengths: list[int], depths: list[float]) -> bool:
    """Score a finished row's model at the `lengths` its stored evaluation lacks and merge
    them in; an evaluation of other tasks, depths, examples or haystack is replaced whole.
    False if nothing was missing."""
    from titans_seq.domains.lm.evals.suite import SuiteResult, plot_heatmaps

    stored = row["evaluation"]
    same_cells = scored_as_asked(stored, args, depths)
    have = set(stored["lengths"]) if same_cells else set()
    missing = [n for n in lengths if n not in have]
    if not missing:
        return False
    model = trained_model(args, suite_config(args, row["mixer"], row["dim"]))
    fresh = score(args, model, missing, depths).to_dict()
    if same_cells:
        for measure in ("scores", "characters"):
            for task, by_length in fresh[measure].items():
                stored[measure][task].update(by_length)
        stored["lengths"] = sorted(have | set(missing))
        stored["seconds"] += fresh["seconds"]
    else:
        row["evaluation"] = stored = fresh
    evaluation = SuiteResult.from_dict(stored)
    row["mean_by_length"] = mean_by_length(evaluation)
    plot_heatmaps(evaluation, Path(args.out_dir) / f"{row['mixer']}.png", title=row["mixer"])
    return True


def add_reset_scores(args, row: dict, lengths: list[int], depths: list[float]) -> bool:
    """Score the row's trained model again reading only each prompt's last
    `--compare-context` bytes (as `row["reset_evaluation"]`); False if it already holds them
    for the lengths, tasks, depths and examples asked for."""
    done = row.get("reset_evaluation")
    if (
        done is not None
        and done.get("context") == args.compare_context
        and done.get("lengths") == lengths
        and scored_as_asked(done, args, depths)
    ):
        return False
    model = trained_model(args, suite_config(args, row["mixer"], row["dim"]))
    row["reset_evaluation"] = score(args, model, lengths, depths, args.compare_context).to_dict()
    return True


def mean_over_depths(scores: dict, task: str, length: int) -> float:
    """A `SuiteResult.to_dict()` score (or characters share) of (task, length), averaged
    over the depths."""
    per_depth = scores[task][str(length)]
    return sum(per_depth.values()) / len(per_depth)


def markdown(rows: list[dict], lengths: list[int], tasks: list[str]) -> str:
    """Per mixer: the mean score over tasks per length, then one row per task (and the mean
    reading only the prompts' last bytes, where that control was scored)."""
    header = ["mixer", "task", "params", "val acc"] + [str(n) for n in lengths]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        val = (row["best_val"] or {}).get("accuracy")
        scores = row["evaluation"]["scores"]
        first = [
            row["mixer"],
            "**mean**",
            f"{row['parameters'] / 1e3:.0f}K",
            "-" if val is None else f"{val:.2f}",
        ]
        out.append(
            "| "
            + " | ".join(first + [f"**{row['mean_by_length'][str(n)]:.2f}**" for n in lengths])
            + " |"
        )
        characters = row["evaluation"].get("characters")
        for task in tasks:
            cells = [f"{mean_over_depths(scores, task, n):.2f}" for n in lengths]
            out.append(f"| | {task} | | | " + " | ".join(cells) + " |")
            if characters is not None and any(
                mean_over_depths(characters, task, n) != mean_over_depths(scores, task, n)
                for n in lengths
            ):  # partial answers: the share of their characters right
                cells = [f"{mean_over_depths(characters, task, n):.2f}" for n in lengths]
                out.append(f"| | {task}, characters right | | | " + " | ".join(cells) + " |")
        reset = row.get("reset_evaluation")
        if reset is not None:
            cells = [
                f"{sum(mean_over_depths(reset['scores'], t, n) for t in tasks) / len(tasks):.2f}"
                for n in lengths
            ]
            label = f"mean, last {reset['context']} bytes only"
            out.append(f"| | {label} | | | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compare_context is not None and args.compare_context < 1:
        raise SystemExit(f"--compare-context takes a positive count, got {args.compare_context}")
    if args.threads:
        torch.set_num_threads(args.threads)
    from titans_seq.domains.lm.evals.passkey import parse_depths

    names = [m.strip() for m in args.mixers.split(",") if m.strip()]
    peers = [m for m in names if m in PEERS]
    mixers = chosen_mixers(",".join(m for m in names if m not in PEERS)) + peers
    if peers:
        if args.match_params:
            raise SystemExit(f"--mixers {','.join(peers)} runs at --dim: add --no-match-params")
        for peer in peers:
            importlib.import_module(PEERS[peer].module)  # registers the mixer
    lengths = [int(f) * args.train_length for f in args.factors.split(",")]
    depths = parse_depths(args.depths)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = parameter_target(args, "suite", overrides_for)
    rows = []
    for mixer in mixers:
        done = out_dir / f"{mixer}.json"
        if done.is_file():
            row = json.loads(done.read_text())
            print(f"== {mixer}: done before, {done}", flush=True)
            check_trained_as_asked(args, row)
            if add_missing_scores(args, row, lengths, depths):
                done.write_text(json.dumps(row, indent=1) + "\n")
        else:
            dim = (
                matched_dim(args, mixer, target, "suite", overrides_for)[0] if target else args.dim
            )
            print(f"== {mixer}: dim {dim}", flush=True)
            row = run_mixer(args, mixer, dim, lengths, depths)
            done.write_text(json.dumps(row, indent=1) + "\n")
            print(
                f"{mixer}: trained in {row['train_seconds']:.0f} s; mean score per length "
                f"{row['mean_by_length']}",
                flush=True,
            )
        if args.compare_context and add_reset_scores(args, row, lengths, depths):
            done.write_text(json.dumps(row, indent=1) + "\n")
        rows.append(row)
    device = result_device(args.device)
    device_label = device_name(device)
    command = " ".join(
        ["python benchmarks/grids/lm_long_context.py", *(sys.argv[1:] if argv is None else argv)]
    )
    header = (
        f"- Command: `{command}`\n"
        f"- Device: {device} ({device_label}), torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; "
        f"{datetime.now(timezone.utc).date().isoformat()}\n"
        f"- Trained at {args.train_length} bytes for {args.steps} steps (batch "
        f"{args.batch_size}); scores: exact match of the greedy answer, mean over "
        f"{len(depths)} depths x {args.samples} examples per cell.\n\n"
    )
    table = markdown(rows, lengths, args.tasks.split(","))
    (out_dir / "long_context.md").write_text(header + table + "\n")
    print(header + table)
    if args.json:
        record = {"study": "long_context_suite", "train_length": args.train_length,
                  "steps": args.steps, "command": command, "device": device_label,
                  "reset_context": args.compare_context,
                  "rows": result_rows(rows, args, lengths)}  # fmt: skip
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return 0


def result_rows(runs: list[dict], args, lengths: list[int]) -> list[dict]:
    """One row per (mixer, task, length of `lengths`, metric): exact match ("accuracy") and
    the share of the answers' characters right ("characters"), each averaged over the depths;
    the control reading only the prompts' last bytes as task `<task>:reset`."""
    out = []
    for run in runs:
        model = run["mixer"] + (f"/{args.label}" if args.label else "")
        evaluations = [("", run["evaluation"])]
        if run.get("reset_evaluation") is not None:
            evaluations.append((":reset", run["reset_evaluation"]))
        for suffix, evaluation in evaluations:
            measures = [("accuracy", evaluation["scores"])]
            if evaluation.get("characters") is not None:
                measures.append(("characters", evaluation["characters"]))
            for metric, cells in measures:
                for task, by_length in cells.items():
                    for length in (n for n in lengths if str(n) in by_length):
                        row = {"model": model, "task": task + suffix, "length": int(length),
                               "seed": args.seed, "metric": metric}  # fmt: skip
                        row["value"] = mean_over_depths(cells, task, int(length))
                        out.append(row)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
