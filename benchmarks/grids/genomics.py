"""GenomicsBenchmarks: Titans classifiers (LMM, MAG) vs. the CNN and a Transformer baseline,
with and without next-base pretraining, several seeds, one harness.

    python benchmarks/grids/genomics.py --device cuda            # the benchmark (GPU)
    python benchmarks/grids/genomics.py --device cpu --threads 1 --seeds 0 --dim 32 --depth 1 \
        --max-steps 40 --pretrain-steps 40 --batch-size 32 --subsample 512 \
        --eval-subsample 128                                   # a quick CPU smoke run

Data: the two mirrored GenomicsBenchmarks datasets (human_enhancers_cohn,
human_nontata_promoters). Only their official *test* splits are available offline, so each
is re-split 70/10/20 (stratified, fixed seed `--split-seed`), and the numbers are not
comparable with published train/test results; the report says so.

Every model is trained by the shared loop from the `genomics/nontata_*` recipes with the
same fine-tuning budget (`--max-steps`, batch, schedule); the checkpoint with the best
validation accuracy is evaluated on the test part. "pretrained" runs first train the same
backbone on next-base prediction over the training part's sequences (unlabeled; the
validation and test parts are never seen) for `--pretrain-steps`, then fine-tune from it
(`model.pretrained`); the CNN has no pretrained variant. The Transformer is the same
classifier with full attention, its width chosen so that its parameter count is the
closest to the LMM classifier's; every row reports its parameter count.

Resumable: every finished (dataset, model, seed, pretrained) cell is written to
`<out-dir>/cells/<name>.json` (accuracies, steps, seconds, settings, device, torch, commit,
date) and skipped when the grid is run again with the same --out-dir; a cell killed midway
continues from its newest checkpoint (saved at every evaluation, `--checkpoint-every`), its
run folder in `<out-dir>/runs/<name>/`. A store refuses cells of other settings (budget,
sizes, passes, split): give such a grid its own --out-dir. Writes `<out-dir>/genomics.md`
(Markdown table of every cell in the store, with command, device, date) and
`<out-dir>/genomics.json` (the cells).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from cells import CellStore, mean_and_spread  # noqa: E402
from harness import STARTED_AT_COMMIT, device_name, provenance  # noqa: E402

from titans_seq.domains.genomics.model import RC_MODES  # noqa: E402

DATASETS = ("human_enhancers_cohn", "human_nontata_promoters")
# the benchmark's sequences are 500 and 251 bases long
MAX_LEN = {"human_enhancers_cohn": 512, "human_nontata_promoters": 256}
MODELS = ("lmm", "mag", "cnn", "attention")
# the options that change a cell's result: a store holds cells of one setting only
SETTINGS = (
    "passes", "cnn_rc_mode", "max_steps", "pretrain_steps", "batch_size", "dim", "depth",
    "heads", "split_seed", "subsample", "eval_subsample",
)  # fmt: skip
TITANS_OPTIONS = {
    "lmm": {"chunk_size": 16},
    "mag": {"chunk_size": 16, "window": 64},
    "attention": {},
}


# How a sequence model reads each sequence: "four" passes, the recipes' (both directions,
# both strands conjoined); "one" (forward only, a random strand per training example, the
# given strand scored), which `benchmarks/studies/dna_passes.py` found at least as accurate
# at a quarter of the cost a step; or "posthoc", `DNAClassifier`'s default: "one"'s training
# with both strands averaged for validation and test. The CNN reads one direction whatever
# `--passes` says; its strands follow `--cnn-rc-mode` ("none", GenomicsBenchmarks' protocol:
# the given strand only, by default).
PASSES = {
    "four": {},
    "one": {"model.bidirectional": False, "model.rc_mode": "augment"},
    "posthoc": {"model.bidirectional": False, "model.rc_mode": "posthoc"},
}


def model_overrides(
    model: str,
    dim: int,
    depth: int,
    heads: int,
    attention_dim: int,
    passes: str = "four",
    cnn_rc_mode: str = "none",
) -> dict:
    if model == "cnn":
        return {"model.architecture": "cnn", "model.rc_mode": cnn_rc_mode}
    return PASSES[passes] | {
        "model.architecture": "backbone",
        "model.mixer": model,
        "model.mixer_options": TITANS_OPTIONS[model],
        "model.dim": attention_dim if model == "attention" else dim,
        "model.depth": depth,
        "model.heads": heads,
    }


def matched_attention_dim(dim: int, depth: int, heads: int, max_len: int) -> tuple[int, int]:
    """(width, parameters) of the attention classifier closest in size to the LMM one."""
    from titans_seq.domains.genomics import count_parameters
    from titans_seq.domains.genomics.task import DNAModelConfig, build_net

    def size(mixer: str, width: int) -> int:
        cfg = DNAModelConfig(
            dim=width, depth=depth, heads=heads, mixer=mixer, mixer_options=TITANS_OPTIONS[mixer]
        )
        return count_parameters(build_net(cfg, max_len))

    target = size("lmm", dim)
    step = 2 * heads  # rotary embeddings need an even head dimension
    widths = range(step, 4 * dim + step, step)
    best = min(widths, key=lambda w: abs(size("attention", w) - target))
    return best, size("attention", best)


def warmup(steps: int) -> int:
    """The recipes' 100 warm-up steps, or a tenth of a shorter budget."""
    return min(100, max(1, steps // 10))


def common_overrides(args, dataset: str, seed: int, out_dir: Path) -> dict:
    return {
        "data.dataset": dataset,
        "data.split": "test",
        "data.resplit": True,
        "data.seed": args.split_seed,
        "data.max_train": args.subsample,
        "data.max_val": args.eval_subsample,
        "train.seed": seed,
        "train.device": args.device,
        "train.batch_size": args.batch_size,
        "train.out_dir": str(out_dir),
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
    }


def cell_name(dataset: str, model: str, seed: int, pretrained: bool) -> str:
    return f"{dataset}-{model}-seed{seed}" + ("-pretrained" if pretrained else "")


def cell_settings(args) -> dict:
    return {key: getattr(args, key) for key in SETTINGS}


def checkpoint_every(args, steps: int) -> int:
    """Checkpoint at every evaluation (a tenth of the budget) unless told otherwise."""
    return args.checkpoint_every or max(1, steps // 10)


def finished_summary(run_dir: Path) -> dict | None:
    """The summary a finished training run left in `run_dir`, or None."""
    path = run_dir / "summary.json"
    return json.loads(path.read_text()) if path.exists() else None


def pretrain_run(
    args, dataset: str, model: str, seed: int, arch: dict, store: CellStore
) -> tuple[Path, float]:
    """Next-base pretraining of a cell's backbone: its folder and best validation loss. A
    finished pretraining is reused; a killed one resumes from its newest checkpoint."""
    from titans_seq.training import load_config, train

    name = cell_name(dataset, model, seed, True) + "-pretrain"
    done = finished_summary(store.root / "runs" / name)
    if done is not None:
        return store.root / "runs" / name, float(done["best_metric"])
    out_dir, resume = store.resumable_run_dir(name)
    overrides = common_overrides(args, dataset, seed, out_dir)
    overrides.pop("data.max_val")
    # the causal next-base model reads one direction of one strand whatever the classifier does
    reading = {"model.architecture", *PASSES["one"]}
    overrides |= {k: v for k, v in arch.items() if k not in reading}
    overrides |= {
        "data.seq_len": MAX_LEN[dataset],
        "data.max_val": args.eval_subsample,
        "train.max_steps": args.pretrain_steps,
        "train.checkpoint_every": checkpoint_every(args, args.pretrain_steps),
        "optim.warmup_steps": warmup(args.pretrain_steps),
        "eval.every": max(1, args.pretrain_steps // 5),
        "eval.max_batches": 8,
    }
    result = train(load_config("genomics/pretrain_lmm", overrides), resume=resume)
    return out_dir, float(result.best_metric)


@torch.no_grad()
def test_accuracy(cfg, weights: Path, args, rc_mode: str | None = None) -> float:
    """Accuracy of the saved weights on the test part; rc_mode: score with another strand
    reading than the one trained (the same weights: "augment" scores one strand)."""
    from titans_seq.devices import resolve_device
    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample
    from titans_seq.domains.genomics.task import build_net, token_batches
    from titans_seq.training.checkpoint import load_weights

    d = cfg.data
    test = benchmark_parts(d.dataset, d.split, d.resplit, d.seed)["test"]
    data = token_batches(subsample(test, args.eval_subsample, d.seed), d.max_len, d.strict)
    device = resolve_device(args.device, 0)
    net = build_net(cfg.model, d.max_len)
    net.load_state_dict(load_weights(weights))
    if rc_mode is not None:
        net.rc_mode = rc_mode
    net.to(device).eval()
    correct = 0
    for start in range(0, len(data), 256):
        ids, lengths, labels = data.get_batch(range(start, min(start + 256, len(data))))
        logits = net(ids.to(device), lengths.to(device))
        correct += int((logits.argmax(-1).cpu() == labels).sum())
    return correct / len(data)


def run_one(
    args, dataset: str, model: str, seed: int, pretrained: bool, arch: dict, store: CellStore
) -> dict:
    """Train and test one cell (resuming it if a killed run left a checkpoint); its record."""
    from titans_seq.domains.genomics import count_parameters
    from titans_seq.domains.genomics.task import build_net
    from titans_seq.training import load_config, train

    start = time.perf_counter()
    name = cell_name(dataset, model, seed, pretrained)
    record = {"dataset": dataset, "model": model, "seed": seed, "pretrained": pretrained}
    overrides = {}
    if pretrained:
        folder, loss = pretrain_run(args, dataset, model, seed, arch, store)
        overrides["model.pretrained"] = str(folder)
        record["pretrain_val_loss"] = loss
    run_dir, resume = store.resumable_run_dir(name)
    if resume:
        print(f"{name}: resuming from its newest checkpoint", flush=True)
    overrides |= common_overrides(args, dataset, seed, run_dir)
    overrides |= arch | {
        "data.max_len": MAX_LEN[dataset],
        "train.max_steps": args.max_steps,
        "train.checkpoint_every": checkpoint_every(args, args.max_steps),
        "optim.warmup_steps": warmup(args.max_steps),
        "eval.every": max(1, args.max_steps // 10),
        "eval.patience": 0,  # the same budget for every model
    }
    cfg = load_config("genomics/nontata_lmm", overrides)
    result = train(cfg, resume=resume)
    best = result.run_dir / "best_model.safetensors"
    record |= {
        "parameters": count_parameters(build_net(cfg.model, cfg.data.max_len)),
        "best_val_accuracy": float(result.best_metric),
        "best_step": result.best_step,
        "test_accuracy": test_accuracy(cfg, best, args),
    }
    if cfg.model.rc_mode == "posthoc":  # what averaging the strands adds to the same weights
        record["one_strand_test_accuracy"] = test_accuracy(cfg, best, args, rc_mode="augment")
    record |= {
        # a resumed cell counts only the seconds of the process that finished it
        "seconds": time.perf_counter() - start,
        "resumed": resume,
        "settings": cell_settings(args),
        **provenance(args.device),
    }
    store.save(name, record)
    print(json.dumps(record), flush=True)
    return record


def foreign_settings(store: CellStore, settings: dict) -> dict:
    """{cell name: its differing settings} for the store's cells run with other settings."""
    foreign = {}
    for record in store.load_all():
        theirs = record.get("settings", {})
        diff = {k: theirs.get(k) for k in settings if theirs.get(k) != settings[k]}
        if diff:
            key = (record["dataset"], record["model"], record["seed"], record["pretrained"])
            foreign[cell_name(*key)] = diff
    return foreign


def report(args, records: list[dict], started: str) -> str:
    from titans_seq.domains.genomics.recipe_data import describe_protocol

    seeds = sorted({r["seed"] for r in records})
    commits = sorted({r["commit"] for r in records})
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in records)]
    models = [m for m in MODELS if any(r["model"] == m for r in records)]
    lines = [
        "# GenomicsBenchmarks: Titans vs. CNN and Transformer",
        "",
        f"* command: `{' '.join(shlex.quote(a) for a in [sys.executable, *sys.argv])}`",
        f"* device: {device_name(args.device)}; torch {torch.__version__}",
        f"* date: {started}; cells run at commit {', '.join(commits)}",
        f"* seeds: {seeds} (mean ± sample std over seeds); fine-tuning budget: "
        f"{args.max_steps} steps x batch {args.batch_size} for every model; pretraining: "
        f"{args.pretrain_steps} extra steps of next-base prediction on the training part",
        f"* passes of the sequence models over each sequence: {args.passes} ({PASSES[args.passes]}"
        " over the recipes)",
    ]
    for dataset in datasets:
        lines.append(f"* data: {describe_protocol(dataset, 'test', True, args.split_seed)}")
    if args.subsample or args.eval_subsample:
        lines.append(
            f"* subsampled: at most {args.subsample} training and {args.eval_subsample} "
            "validation/test sequences (a quick run, not the benchmark)"
        )
    lines += [
        "",
        "| dataset | model | parameters | pretrained | test accuracy | best val accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for dataset in datasets:
        for model in models:
            for pretrained in (False, True):
                runs = [
                    r
                    for r in records
                    if (r["dataset"], r["model"], r["pretrained"]) == (dataset, model, pretrained)
                ]
                if not runs:
                    continue
                lines.append(
                    f"| {dataset} | {model} | {runs[0]['parameters']:,} | "
                    f"{'yes' if pretrained else 'no'} | "
                    f"{mean_and_spread([r['test_accuracy'] for r in runs])} | "
                    f"{mean_and_spread([r['best_val_accuracy'] for r in runs])} |"
                )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--pretraining", choices=("both", "no", "yes"), default="both", help="which variants"
    )
    parser.add_argument(
        "--passes", choices=tuple(PASSES), default="four",
        help="passes of a sequence model over each sequence (see PASSES)",
    )  # fmt: skip
    parser.add_argument(
        "--cnn-rc-mode", choices=RC_MODES, default="none",
        help="the CNN's strand reading (default: the given strand, as GenomicsBenchmarks)",
    )  # fmt: skip
    parser.add_argument("--max-steps", type=int, default=2000, help="fine-tuning steps")
    parser.add_argument("--pretrain-steps", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--split-seed", type=int, default=0, help="seed of the 70/10/20 re-split")
    parser.add_argument("--subsample", type=int, default=None, help="at most N training seqs")
    parser.add_argument(
        "--eval-subsample", type=int, default=None, help="at most N validation and test seqs"
    )
    parser.add_argument("--device", default="auto", help="cuda for the benchmark; cpu for smoke")
    parser.add_argument(
        "--out-dir",
        default="runs/benchmark_genomics",
        help="the cell store (cells/, runs/) and the report; a rerun resumes it",
    )
    parser.add_argument(
        "--checkpoint-every", type=int, default=None,
        help="steps between checkpoints (default: every evaluation, a tenth of the budget)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads (1 is fastest on a busy machine)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(args.models) - set(MODELS)) + sorted(set(args.datasets) - set(DATASETS))
    if unknown:
        parser.error(f"unknown model/dataset {unknown}; models {MODELS}, datasets {DATASETS}")
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = {"both": (False, True), "no": (False,), "yes": (True,)}[args.pretraining]
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    store = CellStore(args.out_dir)
    foreign = foreign_settings(store, cell_settings(args))
    if foreign:
        parser.error(
            f"{args.out_dir} holds cells run with other settings ({foreign}); "
            "give this grid its own --out-dir"
        )

    for dataset in args.datasets:
        attention_dim, attention_params = matched_attention_dim(
            args.dim, args.depth, args.heads, MAX_LEN[dataset]
        )
        print(f"{dataset}: attention width {attention_dim} ({attention_params:,} parameters)")
        for model in args.models:
            arch = model_overrides(
                model, args.dim, args.depth, args.heads, attention_dim, args.passes,
                args.cnn_rc_mode,
            )  # fmt: skip
            for pretrained in variants:
                if pretrained and model == "cnn":
                    continue  # no pretrained variant of the CNN
                for seed in seeds:
                    name = cell_name(dataset, model, seed, pretrained)
                    if store.done(name):
                        print(f"{name}: done, skipped", flush=True)
                        continue
                    run_one(args, dataset, model, seed, pretrained, arch, store)
                    write_reports(args, store, started)  # after every cell: a kill keeps them
    print(write_reports(args, store, started))


def write_reports(args, store: CellStore, started: str) -> str:
    """genomics.json and genomics.md of every cell in the store; the Markdown."""
    from titans_seq.training.checkpoint import atomic_write_text

    records = store.load_all()
    payload = {"args": vars(args), "commit": STARTED_AT_COMMIT, "runs": records}
    atomic_write_text(store.root / "genomics.json", json.dumps(payload, indent=1))
    text = report(args, records, started) if records else "no finished cells yet\n"
    atomic_write_text(store.root / "genomics.md", text)
    return text


if __name__ == "__main__":
    main()
