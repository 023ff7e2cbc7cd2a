"""Adapting one next-base-pretrained DNA backbone to the mirrored GenomicsBenchmarks tasks:
SVF experts against LoRA (peft), full fine-tuning, a linear probe and training from scratch,
at the same step budget.

    python benchmarks/studies/adapt_genomics.py --out-dir runs/adapt_genomics

A bidirectional LMM classifier backbone (recipe `genomics/nontata_lmm`, sized by --dim and
--depth) is pretrained by next-base prediction on the training part of
human_nontata_promoters (the re-split of the mirrored official test split, 70/10/20,
stratified, seed 0: not comparable with published train/test scores). Every task then gets
a new 2-class head on the same pretrained backbone, and one of:

- SVF: z of every mixer/MLP matrix and memory W_0, plus the head (the task's expert);
- LoRA r=8 through peft on the same linear layers, plus the head;
- full fine-tuning; a linear probe (the head alone); a fresh model trained from scratch.

Every run has the same budget (--steps at --batch-size), is selected on validation
accuracy and evaluated on a seeded random subset of the test part (--test-subsample).
Results: `<out-dir>/adapt_genomics.md` / `.json`.

`--dispatch` asks instead how well two-pass inference routes the test sequences of both
tasks, mixed, to the tasks' SVF experts (z + head) when nothing says which task a sequence
comes from. The first pass is one of: Transformer²'s classification expert
(`SVFTaskClassifier`: z_c and a linear head trained to name the task), a logistic
regression of the base model's features (`ExpertClassifier`), each fitted on
--dispatch-shots training sequences per task; every sequence with its own task's expert
(oracle routing) and one expert for all are the bounds. The first pass reads every sequence
cut to its first --dispatch-length bases (the tasks' sequences differ in length, which would
otherwise name the task by itself); the expert then reads the whole sequence. Reported: how
often the first pass names the right task, and the accuracy of the routed predictions on
the mixed test set.
Results: `<out-dir>/dispatch.md` / `.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from cells import mean_and_spread  # noqa: E402
from harness import provenance  # noqa: E402

DATASETS = ("human_nontata_promoters", "human_enhancers_cohn")
MAX_LEN = {"human_enhancers_cohn": 512, "human_nontata_promoters": 256}
METHODS = {  # label -> (AdaptConfig method or None for scratch, lr)
    "SVF expert (z + head)": ("svf", 3e-3),
    "LoRA r=8 (peft) + head": ("lora", 1e-3),
    "full fine-tuning": ("full", 1e-3),
    "linear probe (head only)": ("frozen", 3e-3),
    "from scratch (no pretraining)": (None, 1e-3),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out-dir", type=Path, default=Path("runs/adapt_genomics"))
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-train", type=int, default=None, help="subsample the training part")
    p.add_argument("--eval-subsample", type=int, default=512, help="validation sequences")
    p.add_argument(
        "--test-subsample", type=int, default=512, help="test sequences (a seeded random subset)"
    )
    p.add_argument("--seeds", default="0")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dispatch", action="store_true", help="the two-pass dispatch study")
    p.add_argument("--dispatch-shots", type=int, default=256, help="sequences per task")
    p.add_argument("--dispatch-length", type=int, default=200, help="bases the first pass reads")
    p.add_argument("--dispatch-epochs", type=int, default=10, help="of the classification expert")
    return p.parse_args(argv)


def shared(args, dataset: str, seed: int, out_dir: Path, steps: int, lr: float) -> dict:
    return {
        "data.dataset": dataset,
        "data.max_train": args.max_train,
        "data.max_val": args.eval_subsample,
        "model.dim": args.dim,
        "model.depth": args.depth,
        "train.seed": seed,
        "train.batch_size": args.batch_size,
        "train.max_steps": steps,
        "train.checkpoint_every": steps,
        "train.out_dir": str(out_dir),
        "train.progress": False,
        "train.tensorboard": False,
        "train.plot": False,
        "optim.lr": lr,
        "optim.warmup_steps": min(100, max(1, steps // 10)),
    }


def pretrain(args, seed: int) -> Path:
    from titans_seq.training import load_config, train
    from titans_seq.training.loop import BEST_WEIGHTS

    out_dir = args.out_dir / f"seed{seed}" / "pretrain"
    if not (out_dir / BEST_WEIGHTS).is_file():
        overrides = shared(args, DATASETS[0], seed, out_dir, args.pretrain_steps, 1e-3)
        overrides.pop("data.max_train")
        overrides |= {
            "data.seq_len": MAX_LEN[DATASETS[0]],
            "eval.every": max(1, args.pretrain_steps // 5),
            "eval.max_batches": 8,
        }
        train(load_config("genomics/pretrain_lmm", overrides), quiet=True)
    return out_dir


@torch.no_grad()
def test_accuracy(cfg, model, limit: int | None) -> float:
    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample
    from titans_seq.domains.genomics.task import token_batches

    d = cfg.data
    test = benchmark_parts(d.dataset, d.split, d.resplit, d.seed)["test"]
    data = token_batches(subsample(test, limit, d.seed), d.max_len, d.strict)
    model.eval()
    correct = 0
    for start in range(0, len(data), 256):
        ids, lengths, labels = data.get_batch(range(start, min(start + 256, len(data))))
        correct += int((model(ids, lengths).argmax(-1) == labels).sum())
    return correct / len(data)


def run_config(args, dataset: str, label: str, seed: int, pretrained: Path):
    """(the config, the run folder) of one strategy's run on one task."""
    from titans_seq.training import load_config

    method, lr = METHODS[label]
    tag = label.split(" ")[0].lower()
    out_dir = args.out_dir / f"seed{seed}" / f"{dataset}_{tag}_{method or 'scratch'}"
    overrides = shared(args, dataset, seed, out_dir, args.steps, lr) | {
        "data.max_len": MAX_LEN[dataset],
        "eval.every": max(1, args.steps // 6),
        "eval.patience": 0,
    }
    if method is not None:
        overrides["model.pretrained"] = str(pretrained)
    return load_config("genomics/nontata_lmm", overrides), out_dir


def run(args, dataset: str, label: str, seed: int, pretrained: Path) -> dict:
    from titans_seq.adapt import AdaptationTask, AdaptConfig, count_trainable
    from titans_seq.domains.genomics.task import DNAClassificationTask
    from titans_seq.training import train
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.loop import BEST_WEIGHTS

    method, _ = METHODS[label]
    cfg, out_dir = run_config(args, dataset, label, seed, pretrained)
    base_task = DNAClassificationTask()
    task = (
        base_task
        if method is None
        else AdaptationTask(
            base_task,
            base_task.build_model,
            AdaptConfig(method=method, also_train=("classifier.*",), task_name=dataset),
            base_name=str(pretrained),
        )
    )
    start = time.perf_counter()
    if not (out_dir / BEST_WEIGHTS).is_file():
        result = train(cfg, task=task, quiet=True)
        best_val = float(result.best_metric)
    else:
        best_val = float("nan")
    model = task.build_model(cfg)
    model.load_state_dict(load_weights(out_dir / BEST_WEIGHTS))
    record = {
        "dataset": dataset,
        "strategy": label,
        "seed": seed,
        "trainable": count_trainable(model),
        "best_val_accuracy": best_val,
        "test_accuracy": test_accuracy(cfg, model, args.test_subsample),
        "seconds": time.perf_counter() - start,
    }
    print(json.dumps(record), flush=True)
    return record


def dispatch(args, seed: int, pretrained: Path) -> list[dict]:
    """The tasks' SVF experts on one SVF, and the mixed test sequences routed to them by
    each first pass (see the module docstring)."""
    from titans_seq.adapt import (
        SVF,
        ExpertClassifier,
        SVFTaskClassifier,
        read_expert,
        run_with_experts,
    )
    from titans_seq.adapt.task import EXPERT_FILE
    from titans_seq.domains.genomics.recipe_data import benchmark_parts, subsample
    from titans_seq.domains.genomics.task import DNAClassificationTask, token_batches

    label = "SVF expert (z + head)"
    experts, parts, svf = [], [], None
    for dataset in DATASETS:
        run(args, dataset, label, seed, pretrained)  # trained once, then read back
        cfg, out_dir = run_config(args, dataset, label, seed, pretrained)
        if svf is None:  # one base for both: the pretrained backbone (heads are the experts')
            base = DNAClassificationTask().build_model(cfg)
            svf = SVF(base, also_train=("classifier.*",), base_name=str(pretrained))
        experts.append(read_expert(out_dir / EXPERT_FILE))  # the best weights' z and head
        d = cfg.data
        split = benchmark_parts(d.dataset, d.split, d.resplit, d.seed)
        test = subsample(split["test"], args.test_subsample, d.seed)
        shots = subsample(split["train"], args.dispatch_shots, d.seed)
        cut = args.dispatch_length
        parts.append(
            (token_batches(shots, cut), token_batches(test, cut), token_batches(test, d.max_len))
        )

    def forward(model, batch):
        return model(batch[0], batch[1])

    def batches(data, size=64):
        return [
            data.get_batch(range(i, min(i + size, len(data)))) for i in range(0, len(data), size)
        ]

    shots = [batches(train) for train, _, _ in parts]
    first_passes = {
        "SVF classification expert (z_c + linear head)": SVFTaskClassifier(
            forward, epochs=args.dispatch_epochs, seed=seed
        ),
        "logistic regression of the base's features": ExpertClassifier(forward),
    }
    records = []
    for name, classifier in first_passes.items():
        start = time.perf_counter()
        classifier.fit(svf, shots)
        fit_seconds = time.perf_counter() - start
        named = correct = total = 0
        for k, (_, test_cut, test) in enumerate(parts):
            for first, batch in zip(batches(test_cut), batches(test)):
                choice = classifier.predict(svf, first)
                logits = run_with_experts(svf, experts, choice, batch, forward)
                named += int((choice == k).sum())
                correct += int((logits.argmax(-1) == batch[2]).sum())
                total += len(choice)
        records.append({"seed": seed, "first pass": name, "routed right": named / total,
                        "accuracy": correct / total, "fit_seconds": fit_seconds})  # fmt: skip
    for name, pick in (("oracle routing (each sequence's own expert)", None),
                       *((f"expert {d} for all", k) for k, d in enumerate(DATASETS))):  # fmt: skip
        named = correct = total = 0
        for k, (_, _, test) in enumerate(parts):
            svf.load_expert(experts[k if pick is None else pick])
            with svf.evaluating():
                for batch in batches(test):
                    correct += int((forward(svf.model, batch).argmax(-1) == batch[2]).sum())
                    total += len(batch[2])
            named += len(test) if pick in (None, k) else 0
        records.append({"seed": seed, "first pass": name, "routed right": named / total,
                        "accuracy": correct / total, "fit_seconds": 0.0})  # fmt: skip
    for record in records:
        print(json.dumps(record), flush=True)
    return records


def dispatch_table(records: list[dict]) -> str:
    lines = [
        "| first pass | routed to the right task | accuracy on the mixed test set |",
        "|---|---|---|",
    ]
    for name in dict.fromkeys(r["first pass"] for r in records):
        rows = [r for r in records if r["first pass"] == name]
        routed = mean_and_spread([r["routed right"] for r in rows])
        lines.append(f"| {name} | {routed} | {mean_and_spread([r['accuracy'] for r in rows])} |")
    return "\n".join(lines)


def table(records: list[dict]) -> str:
    lines = [
        "| strategy | trainable parameters | "
        + " | ".join(f"{d} test acc." for d in DATASETS)
        + " |",
        "|---|---|" + "---|" * len(DATASETS),
    ]
    for label in METHODS:
        cells, params = [], []
        for dataset in DATASETS:
            rows = [r for r in records if r["strategy"] == label and r["dataset"] == dataset]
            cells.append(mean_and_spread([r["test_accuracy"] for r in rows]) if rows else "–")
            params += [f"{r['trainable']:,}" for r in rows[:1]]
        lines.append(f"| {label} | {' / '.join(params)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records = []
    for seed in (int(s) for s in args.seeds.split(",")):
        pretrained = pretrain(args, seed)
        if args.dispatch:
            records += dispatch(args, seed, pretrained)
            continue
        for dataset in DATASETS:
            for label in METHODS:
                records.append(run(args, dataset, label, seed, pretrained))
    md = dispatch_table(records) if args.dispatch else table(records)
    name = "dispatch" if args.dispatch else "adapt_genomics"
    meta = provenance(torch.device("cpu")) | {"seconds": time.perf_counter() - start}
    args_json = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    (args.out_dir / f"{name}.json").write_text(
        json.dumps({"meta": meta, "args": args_json, "records": records}, indent=2)
    )
    (args.out_dir / f"{name}.md").write_text(md + "\n")
    print(md)
    print(f"total {meta['seconds']:.0f} s; {meta}")


if __name__ == "__main__":
    main()
