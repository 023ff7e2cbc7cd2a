"""SVF experts for passkey retrieval beyond the training length: the cross-entropy objective
against Transformer²'s RL objective (REINFORCE on an exact-match reward), at equal budget.

    python benchmarks/studies/adapt_passkey.py --out-dir runs/adapt_passkey --seeds 0,1,2
    python benchmarks/studies/adapt_passkey.py --base-steps 40 --steps 4 --samples 8 \
        --seeds 0 --out-dir runs/adapt_passkey_smoke                       # smoke run

A base byte-level model (`lm/passkey_mal`, shrunk as in `hybrid_variants.py`: 128 tokens,
D = 64, 2 blocks, 2 heads, window 16, memory chunk 8) is trained once at 128 tokens. From it
two SVF experts per seed are trained at `--adapt-length` tokens (default 1,024, 8x the
training length, where the base finds fewer than half of the passkeys):

  cross-entropy  the answer digits' next-token loss (the passkey task's own targets);
  reward         `train_with_reward`: each prompt sampled `--group` times (temperature 1),
                 reward 1 when all digits are right (`exact_match_reward`), the mean reward of
                 the prompt's samples as the baseline, KL penalty to the base.

Equal budget: both take `--steps` optimizer steps on z over `--prompts` x `--group`
sequences of the adaptation length each (cross-entropy: a batch of that many examples;
reward: `--prompts` prompts, `--group` samples each), with Adam at the same learning rate;
the table also gives each expert's wall time. The adaptation examples come from their own
data seed; every model is scored with `evaluate_passkey` (greedy, streaming state) on the
same held-out examples at the training and the adaptation length.

`--dispatch` compares the first passes of two-pass inference on the same base instead: two
experts, the base itself (z = 1, for the training length) and a cross-entropy expert at the
adaptation length, and a mixed held-out set of `--samples` examples at each length. Every
example is routed by one first pass, then decoded greedily with the chosen expert: the
prompt-based strategy (`choose_by_prompt`: the base reads the example and "Is this text
short or long? It is " and scores the labels "short" and "long"), the lowest next-token
loss on the prompt (`choose_by_loss`), the SVF classification expert (`SVFTaskClassifier`)
and a logistic regression of the base's features (`ExpertClassifier`), each classifier
fitted on 32 adaptation examples per length; beside them Transformer²'s third strategy, one
few-shot CEM mixture of the two experts for every example (`cem_mixture` on the answer
loss of 16 adaptation examples per length); each expert for all and oracle routing bound
them. Reported: the share routed to the right expert and the passkey accuracy
(`<out-dir>/dispatch.md`, `dispatch.json`).

Writes `<out-dir>/cells/<method>-seed<k>.json` (and `base.json`) as each finishes, skipped
when present, so a killed run resumes, and `<out-dir>/adapt_passkey.md` with the command,
device, date and commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: harness, cells
from cells import CellStore, mean_and_spread  # noqa: E402
from harness import provenance  # noqa: E402

TRAIN_LENGTH = 128
METHODS = ("cross-entropy", "reward")


def base_overrides(args, run_dir: Path) -> dict:
    return {
        "model.dim": 64,
        "model.depth": 2,
        "model.heads": 2,
        "model.mixer_options.window": 16,
        "model.mixer_options.memory.chunk_size": 8,
        "data.train_length": TRAIN_LENGTH,
        "data.num_train": 100_000,
        "data.num_val": 64,
        "train.max_steps": args.base_steps,
        "train.batch_size": 16,
        "train.seed": 0,
        "train.precision": "fp32",
        "train.device": "cpu",
        "train.checkpoint_every": max(1, args.base_steps // 4),
        "train.out_dir": str(run_dir),
        "train.progress": False,
        "train.plot": False,
        "train.tensorboard": False,
        "eval.every": max(1, args.base_steps // 8),
        "eval.batch_size": 64,
        "optim.lr": 3e-3,
        "optim.warmup_steps": max(1, args.base_steps // 20),
    }


def base_model(args, store: CellStore) -> tuple[torch.nn.Module, dict[int, float]]:
    """The base model with its best validation weights and its accuracy per length (trained
    and scored once, the `base` cell; a killed training resumes from its checkpoint)."""
    from titans_seq.training.checkpoint import load_weights
    from titans_seq.training.config import load_config
    from titans_seq.training.loop import BEST_WEIGHTS, train
    from titans_seq.training.tasks import get_task

    run_dir, resume = store.root / "runs" / "base", False
    if not store.done("base"):
        run_dir, resume = store.resumable_run_dir("base")
    cfg = load_config("lm/passkey_mal", base_overrides(args, run_dir))
    if not store.done("base"):
        train(cfg, resume=resume)
    model = get_task(cfg.task).build_model(cfg)
    model.load_state_dict(load_weights(run_dir / BEST_WEIGHTS))
    model.eval()
    if not store.done("base"):
        store.save("base", {"method": "base", "accuracy": score(model, args)})
    base = json.loads(store.path("base").read_text())["accuracy"]
    return model, {int(k): v for k, v in base.items()}


def score(model, args) -> dict[int, float]:
    from titans_seq.domains.lm.evals.passkey import evaluate_passkey

    lengths = sorted({TRAIN_LENGTH, args.adapt_length})
    result = evaluate_passkey(model, lengths, args.samples, seed=1, chunk_len=TRAIN_LENGTH)
    return {int(k): v for k, v in result.accuracy.items()}


def train_cross_entropy(svf, args, seed: int) -> None:
    """Adam on z: the answer digits' next-token loss on batches of adaptation examples."""
    from titans_seq.domains.lm.evals.needles import IGNORE_INDEX
    from titans_seq.domains.lm.evals.passkey import PasskeyRetrieval

    examples = PasskeyRetrieval(seed=2000 + seed)
    optimizer = torch.optim.Adam(svf.parameters(), lr=args.lr)
    batch_size = args.prompts * args.group
    svf.model.train()
    for step in range(args.steps):
        batch = examples.batch(args.adapt_length, range(step * batch_size, (step + 1) * batch_size))
        logits, _ = svf(batch.inputs)
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), batch.targets.flatten(), ignore_index=IGNORE_INDEX
        )
        if not torch.isfinite(loss):
            raise FloatingPointError(f"cross-entropy is {float(loss)} at step {step}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    svf.model.eval()


def train_reward(svf, args, seed: int) -> list:
    """`train_with_reward` on exact match: `--prompts` prompts a step, `--group` samples each."""
    from titans_seq.adapt import exact_match_reward, train_with_reward
    from titans_seq.domains.lm.evals.passkey import PasskeyRetrieval

    examples = PasskeyRetrieval(seed=2000 + seed)

    def prompts(step):
        first = step * args.prompts
        return examples.prompts_and_answers(args.adapt_length, range(first, first + args.prompts))

    return train_with_reward(
        svf, prompts, exact_match_reward, steps=args.steps, samples_per_prompt=args.group,
        lr=args.lr, kl_coef=args.kl_coef, seed=seed,
    )  # fmt: skip


def run_cell(method: str, seed: int, svf, args) -> dict:
    """One expert from the base (z = 1), trained and scored; z is reset afterwards."""
    torch.manual_seed(seed)
    svf.reset()
    try:
        start = time.perf_counter()
        history = None
        if method == "cross-entropy":
            train_cross_entropy(svf, args, seed)
        else:
            history = train_reward(svf, args, seed)
        seconds = time.perf_counter() - start
        accuracy = score(svf.model, args)
        cell = {"method": method, "seed": seed, "seconds": seconds, "accuracy": accuracy}
        if history:
            cell["mean_reward_first_tenth"] = statistics.fmean(
                h.reward for h in history[: max(1, len(history) // 10)]
            )
            cell["mean_reward_last_tenth"] = statistics.fmean(
                h.reward for h in history[-max(1, len(history) // 10) :]
            )
        return cell
    finally:
        svf.reset()


def write_table(store: CellStore, base: dict, args, command: str) -> str:
    cells = [c for c in store.load_all() if c["method"] in METHODS]
    lengths = sorted({TRAIN_LENGTH, args.adapt_length})
    stamp = provenance("cpu")
    lines = [
        "# SVF experts for passkey retrieval: cross-entropy against the reward objective",
        "",
        f"`{command}`",
        "",
        f"{stamp['device']}, torch {stamp['torch']}, {stamp['date']}, commit {stamp['commit']}.",
        f"Adaptation at {args.adapt_length} tokens, {args.steps} steps of "
        f"{args.prompts} x {args.group} sequences, lr {args.lr}; accuracy (all digits right) "
        f"on {args.samples} held-out examples per length, mean ± std over seeds.",
        "",
        "| model | " + " | ".join(f"{n} tokens" for n in lengths) + " | seconds | seeds |",
        "|---|" + "---|" * (len(lengths) + 2),
        "| base | " + " | ".join(f"{base[n]:.3f}" for n in lengths) + " | | |",
    ]
    for method in METHODS:
        rows = [c for c in cells if c["method"] == method]
        if not rows:
            continue
        accuracy = [mean_and_spread([r["accuracy"][str(n)] for r in rows]) for n in lengths]
        seconds = statistics.fmean(r["seconds"] for r in rows)
        lines.append(f"| {method} | " + " | ".join(accuracy) + f" | {seconds:.0f} | {len(rows)} |")
    text = "\n".join(lines) + "\n"
    (store.root / "adapt_passkey.md").write_text(text)
    return text


def dispatch(svf, args, store: CellStore) -> list[dict]:
    """The first passes on the mixed held-out set (see the module docstring)."""
    from titans_seq.adapt import (
        ExpertClassifier,
        SVFTaskClassifier,
        cem_mixture,
        choose_by_loss,
        choose_by_prompt,
    )
    from titans_seq.domains.lm.evals.needles import IGNORE_INDEX, greedy_answers
    from titans_seq.domains.lm.evals.passkey import PasskeyRetrieval

    lengths = [TRAIN_LENGTH, args.adapt_length]
    svf.reset()
    experts = [svf.expert(f"{TRAIN_LENGTH} tokens (the base)")]
    torch.manual_seed(0)
    train_cross_entropy(svf, args, seed=0)
    experts.append(svf.expert(f"{args.adapt_length} tokens (cross-entropy)"))
    svf.reset()
    held_out = [
        PasskeyRetrieval(seed=1).prompts_and_answers(n, range(args.samples)) for n in lengths
    ]
    adaptation = PasskeyRetrieval(seed=2000)
    shots = [[adaptation.prompts_and_answers(n, range(32))[0]] for n in lengths]

    def forward(model, prompts):
        return model(prompts)[0]

    def prompt_loss(model, prompts):  # [B] mean next-token loss over the prompt
        logits = forward(model, prompts)[:, :-1].float()
        losses = F.cross_entropy(logits.transpose(1, 2), prompts[:, 1:], reduction="none")
        return losses.mean(1)

    question = torch.tensor(list(b"\nIs this text short or long? It is "))
    labels = [torch.tensor(list(b"short")), torch.tensor(list(b"long"))]
    svf_classifier = SVFTaskClassifier(forward, seed=0).fit(svf, shots)
    logistic = ExpertClassifier(forward).fit(svf, shots)
    first_passes = {
        "prompt-based (the base names the length)": lambda p: choose_by_prompt(
            svf, p, question, labels, per_token=True
        ),
        "lowest loss on the prompt": lambda p: choose_by_loss(svf, experts, p, prompt_loss),
        "SVF classification expert": lambda p: svf_classifier.predict(svf, p),
        "logistic regression of the base's features": lambda p: logistic.predict(svf, p),
        "oracle routing": None,
        **{f"expert {e.task} for all": k for k, e in enumerate(experts)},
    }
    records = []
    for name, first in first_passes.items():
        routed = correct = total = 0
        for k, (prompts, answers) in enumerate(held_out):
            if first is None or isinstance(first, int):
                choice = torch.full((len(prompts),), k if first is None else first)
            else:
                choice = torch.as_tensor(first(prompts))
            for e in choice.unique().tolist():
                rows = (choice == e).nonzero().flatten()
                svf.load_expert(experts[e])
                with svf.evaluating():
                    decoded = greedy_answers(
                        svf.model, prompts[rows], answers.shape[1], TRAIN_LENGTH
                    )
                correct += int((decoded == answers[rows]).all(dim=1).sum())
            routed += int((choice == k).sum())
            total += len(prompts)
        svf.reset()
        record = {"first pass": name, "routed right": routed / total, "accuracy": correct / total}
        records.append(record)
        print(json.dumps(record), flush=True)
    # the few-shot mixture: one α for every example, fitted on the answers of 16 per length
    few = [adaptation.batch(n, range(100, 116)) for n in lengths]

    @torch.no_grad()
    def few_shot_loss(model) -> float:
        losses = []
        with svf.evaluating():
            for batch in few:
                logits = forward(model, batch.inputs).float()
                losses.append(F.cross_entropy(logits.transpose(1, 2), batch.targets,
                                              ignore_index=IGNORE_INDEX))  # fmt: skip
        return float(torch.stack(losses).mean())

    search = cem_mixture(svf, experts, few_shot_loss, seed=0)
    correct = total = 0
    for prompts, answers in held_out:
        with svf.evaluating():
            decoded = greedy_answers(svf.model, prompts, answers.shape[1], TRAIN_LENGTH)
        correct += int((decoded == answers).all(dim=1).sum())
        total += len(prompts)
    svf.reset()
    weights = ", ".join(f"{w:.2f}" for w in search.weights.tolist())
    record = {"first pass": f"few-shot CEM mixture, one for all (α = {weights})",
              "routed right": None, "accuracy": correct / total}  # fmt: skip
    records.insert(4, record)
    print(json.dumps(record), flush=True)
    store.save("dispatch", {"records": records, **provenance("cpu")})
    return records


def dispatch_table(records: list[dict], args, command: str) -> str:
    stamp = provenance("cpu")
    lines = [
        f"`{command}`",
        "",
        f"{stamp['device']}, torch {stamp['torch']}, {stamp['date']}, commit {stamp['commit']}.",
        f"{args.samples} held-out examples at {TRAIN_LENGTH} and at {args.adapt_length} tokens.",
        "",
        "| first pass | routed to the right expert | passkey accuracy |",
        "|---|---|---|",
    ]
    for r in records:
        routed = "–" if r["routed right"] is None else f"{r['routed right']:.3f}"
        lines.append(f"| {r['first pass']} | {routed} | {r['accuracy']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out-dir", default="runs/adapt_passkey")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--base-steps", type=int, default=800)
    p.add_argument("--adapt-length", type=int, default=1024)
    p.add_argument("--steps", type=int, default=60, help="optimizer steps of each expert")
    p.add_argument("--prompts", type=int, default=4, help="prompts per reward step")
    p.add_argument("--group", type=int, default=4, help="samples per prompt (the baseline group)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--kl-coef", type=float, default=0.1)
    p.add_argument("--samples", type=int, default=100, help="held-out examples per length")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dispatch", action="store_true", help="compare the first passes instead")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    store = CellStore(args.out_dir)
    from titans_seq.adapt import SVF

    model, base = base_model(args, store)
    print(f"base: {base}", flush=True)
    svf = SVF(model)  # adapts the model in place; every expert starts from z = 1
    command = " ".join(["python benchmarks/studies/adapt_passkey.py", *(argv or sys.argv[1:])])
    if args.dispatch:
        text = dispatch_table(dispatch(svf, args, store), args, command)
        (store.root / "dispatch.md").write_text(text)
        print(text)
        return 0
    for seed in [int(s) for s in args.seeds.split(",")]:
        for method in methods:
            name = f"{method}-seed{seed}"
            if store.done(name):
                continue
            cell = run_cell(method, seed, svf, args)
            store.save(name, cell)
            print(json.dumps(cell), flush=True)
    print(write_table(store, base, args, command))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
