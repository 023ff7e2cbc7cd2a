"""The language-model commands of the `titans-seq` CLI, each registered through its own
entry point (pyproject.toml, group `titans_seq.commands`):

* `generate`: continue a prompt with a saved LM, printing the continuation as it decodes;
* `prepare-text`: tokenize a corpus into memory-mapped shards;
* `passkey`: passkey-retrieval accuracy of a byte-level LM per length (and needle depth);
* `long-context`: a byte-level LM on the synthetic long-context suite (RULER-style needles,
  variable tracking, BABILong-style bAbI questions) over lengths and depths;
* `evaluate-lm`: a saved LM's loss over whole documents with its state carried across
  windows, per position bucket;
* `lm-eval`: lm-evaluation-harness with the TitansLM model.

The evaluation commands write a JSON record beside their table (`write_record`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from titans_seq.cli_types import (
    fraction_below_one,
    non_negative_float,
    non_negative_int,
    positive_int,
    probability_mass,
)
from titans_seq.devices import resolve_device


def add_weights_choice(p: argparse.ArgumentParser) -> None:
    """--weights: which weights of a training run folder an evaluation loads."""
    p.add_argument(
        "--weights",
        choices=["best", "last"],
        default="best",
        help="for a training run folder: its best validation weights or its newest checkpoint",
    )


def add_evaluation_outputs(p: argparse.ArgumentParser, out_help: str) -> None:
    """--device, --out and --quiet, as every evaluation command takes them."""
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.add_argument("--out", default=None, help=out_help)
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def register_generate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate",
        help="continue a prompt with a saved language model",
        description=(
            "Sample a continuation of PROMPT from a TitansLM saved with TitansLM.save (or the "
            "newest checkpoint of an lm training run), using the streaming state: the prompt "
            "is read in one pass, then one token per step."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument("--prompt", required=True, help="text to continue")
    p.add_argument("--max-new-tokens", type=positive_int, default=256, help="tokens to generate")
    p.add_argument("--temperature", type=non_negative_float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=positive_int, default=None, help="sample among the k likeliest")
    p.add_argument(
        "--top-p", type=probability_mass, default=None, help="nucleus sampling, in (0, 1]"
    )
    p.add_argument(
        "--seed", type=non_negative_int, default=None, help="seed of the sampling generator"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.set_defaults(handler=run_generate)


class TextStream:
    """Writes the text of a growing id sequence, holding back a cut multi-byte character."""

    def __init__(self, tokenizer, out):
        self.tokenizer, self.out = tokenizer, out
        self.ids: list[int] = []
        self.written = ""

    def add(self, token_id: int) -> None:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        if not text.endswith("\ufffd"):  # may be the first bytes of a character
            self._write(text)

    def close(self) -> None:
        self._write(self.tokenizer.decode(self.ids))
        self.out.write("\n")
        self.out.flush()

    def _write(self, text: str) -> None:
        # decoding a longer sequence can rewrite the tail (e.g. SentencePiece spaces):
        # write what extends the text already written
        common = 0
        for a, b in zip(text, self.written):
            if a != b:
                break
            common += 1
        if common < len(self.written):
            return  # cannot unwrite; wait for the text to extend it again
        self.out.write(text[common:])
        self.out.flush()
        self.written = text


def prompt_text(prompt: str) -> str:
    """The prompt as text. Python hands command-line bytes that are not UTF-8 over as lone
    surrogates, which no tokenizer can encode: name the first such byte instead."""
    raw = os.fsencode(prompt)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.start + 1].hex()
        raise ValueError(
            f"--prompt is not valid UTF-8 (byte 0x{bad} at position {error.start}); give "
            "the text in UTF-8"
        ) from None


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from .generation import check_sampling_args, stream
    from .model import load_lm_and_tokenizer

    check_sampling_args(args.temperature, args.top_k, args.top_p, args.max_new_tokens)
    from titans_seq.devices import resolve_device

    device = resolve_device(args.device)
    model, tokenizer = load_lm_and_tokenizer(args.model, map_location=device)
    model.eval()
    ids = tokenizer.encode(prompt_text(args.prompt))
    if not ids:
        if tokenizer.eos_id is None:
            raise ValueError("the prompt is empty; give some text to continue")
        ids = [tokenizer.eos_id]  # start a new document
    generator = None
    if args.seed is not None:
        generator = torch.Generator().manual_seed(args.seed)  # CPU: same tokens on any device
    out = sys.stdout
    out.write(prompt_text(args.prompt))
    out.flush()
    text = TextStream(tokenizer, out)
    prompt = torch.tensor(ids, dtype=torch.long, device=device)
    steps = stream(
        model,
        prompt,
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        generator=generator,
    )
    for token, _ in steps:
        token_id = int(token[0])
        if token_id == tokenizer.eos_id:
            break
        text.add(token_id)
    text.close()
    return 0


def register_prepare_text(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "prepare-text",
        help="tokenize a text corpus into binary shards for language-model training",
        description=(
            "Tokenize SOURCE (a registered corpus such as tinyshakespeare, a text file, a "
            "folder of .txt files, a glob, or hf:NAME[:CONFIG] to stream a Hugging Face "
            "dataset) into uint16/uint32 shards + meta.json under --out; train on the folder "
            "with `titans-seq train lm/... data.train=DIR`."
        ),
    )
    p.add_argument("source", help="registered corpus, file, folder, glob or hf:NAME[:CONFIG]")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--tokenizer",
        default="byte",
        help="byte (default), a tokenizer.json, a SentencePiece .model or a saved folder",
    )
    p.add_argument("--val", default=None, help="a separate validation text source")
    p.add_argument(
        "--val-fraction",
        type=fraction_below_one,
        default=0.1,
        help="without --val: the last fraction of a local corpus is the validation split "
        "(0: none; default 0.1)",
    )
    p.add_argument(
        "--val-documents",
        type=non_negative_int,
        default=1000,
        help="hf: sources without --val: the first N streamed documents are the validation "
        "split (default 1000)",
    )
    p.add_argument(
        "--max-tokens", type=positive_int, default=None, help="stop each split after about N tokens"
    )
    p.add_argument("--shard-tokens", type=positive_int, default=None, help="ids per shard file")
    p.add_argument("--hf-split", default="train", help="hf: sources: the split to stream")
    p.add_argument("--text-field", default="text", help="hf: sources: the text column")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=run_prepare_text)


def run_prepare_text(args: argparse.Namespace) -> int:
    import json

    from .data import META_FILE
    from .data.prepare import DEFAULT_SHARD_TOKENS, prepare_text

    out = prepare_text(
        args.source,
        args.tokenizer,
        args.out,
        val=args.val,
        val_fraction=args.val_fraction,
        val_documents=args.val_documents,
        max_tokens=args.max_tokens,
        hf_split=args.hf_split,
        hf_text_field=args.text_field,
        shard_tokens=args.shard_tokens or DEFAULT_SHARD_TOKENS,
        overwrite=args.overwrite,
        progress=not args.no_progress,
    )
    meta = json.loads((out / META_FILE).read_text())
    parts = [
        f"{name}: {info['tokens']} tokens from {info['bytes']} bytes in {len(info['shards'])} "
        f"shard(s)"
        for name, info in meta["splits"].items()
    ]
    print(f"prepared {out} ({meta['dtype']}, vocab {meta['vocab_size']}): " + "; ".join(parts))
    return 0


def register_passkey(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "passkey",
        help="evaluate passkey (needle-in-a-haystack) retrieval of a byte-level LM per length",
        description=(
            "Greedy-decode the passkey of synthetic needle-in-a-haystack examples (RULER's "
            "S-NIAH, noise haystack) at each length, feeding the prompt in chunks with the "
            "model's streaming state, and print the accuracy (all digits right) per length and "
            "needle depth. --model is a saved TitansLM folder or a training run folder (its "
            "best validation weights when it has them, else its newest checkpoint)."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument(
        "--lengths", required=True, help="comma-separated total lengths, e.g. 1024,2048,4096"
    )
    p.add_argument(
        "--samples",
        type=positive_int,
        default=50,
        help="examples per length (per length and depth)",
    )
    p.add_argument(
        "--depths",
        default=None,
        help="comma-separated needle depths in [0, 1], e.g. 0,0.25,0.5,0.75,1 (default: a "
        "uniform random depth per example)",
    )
    p.add_argument(
        "--digits",
        type=positive_int,
        default=None,
        help="passkey digits (default: the run's data.digits for an lm_passkey run, else 5)",
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="data seed of the evaluation examples (default 0)",
    )
    p.add_argument(
        "--chunk-len",
        type=non_negative_int,
        default=1024,
        help="tokens per streamed forward call (default 1024; 0: the whole prompt at once)",
    )
    p.add_argument("--batch-size", type=positive_int, default=16, help="examples decoded together")
    add_weights_choice(p)
    add_evaluation_outputs(p, out_help="write the results as JSON to this file")
    p.set_defaults(handler=run_passkey)


def load_passkey_model(path: str | Path, weights: str = "best"):
    """(model on CPU, digits the run was trained with or None) from a saved model folder,
    a training run folder, or a checkpoint folder.

    A run folder of the shared training loop has `config.yaml`; with `weights="best"` and a
    `best_model.safetensors` in it, the model is rebuilt by the run's task and given those
    weights (the checkpoint with the best validation metric). Everything else goes through
    `TitansLM.load` (saved models, newest checkpoints).
    """
    import yaml

    from titans_seq.training.loop import BEST_WEIGHTS
    from titans_seq.training.run_model import load_run_model

    from .model import TitansLM

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"--model {path} does not exist")
    run_config = path / "config.yaml"
    config = yaml.safe_load(run_config.read_text()) if run_config.is_file() else None
    digits = None
    if isinstance(config, dict) and config.get("task") == "lm_passkey":
        digits = (config.get("data") or {}).get("digits")
    if config is not None and weights == "best" and (path / BEST_WEIGHTS).is_file():
        _, _, model = load_run_model(path, weights)
    else:
        model = TitansLM.load(path)
    if getattr(model, "vocab_size", 256) != 256:
        raise ValueError(
            f"--model {path} has a vocabulary of {model.vocab_size} ids; the passkey task is "
            "byte level (256 ids)"
        )
    return model, digits


def run_passkey(args: argparse.Namespace) -> int:
    from .evals.passkey import evaluate_passkey, parse_depths, parse_lengths

    # validate the cheap arguments before loading anything
    lengths = parse_lengths(args.lengths)
    depths = parse_depths(args.depths)
    if args.samples <= 0:
        raise ValueError(f"--samples must be a positive integer, got {args.samples}")
    device = resolve_device(args.device)
    model, run_digits = load_passkey_model(args.model, args.weights)
    digits = args.digits or run_digits or 5
    model.to(device)
    result = evaluate_passkey(
        model,
        lengths,
        args.samples,
        depths=depths,
        seed=args.seed,
        device=device,
        chunk_len=args.chunk_len or None,
        digits=digits,
        batch_size=args.batch_size,
        progress=not args.quiet,
    )
    print(
        f"passkey retrieval, {digits} digits, {args.samples} examples per "
        f"{'length and depth' if depths else 'length (uniform depths)'}, model {args.model}, "
        f"{device}, {result.seconds:.1f} s (chance {result.chance_accuracy:.0e})"
    )
    print(result.table())
    if args.out:
        write_record(Path(args.out), args, device, model=str(args.model), **result.to_dict())
        print(f"results written to {args.out}")
    return 0


def register_long_context(subparsers: argparse._SubParsersAction) -> None:
    from .evals.suite_examples import task_names

    p = subparsers.add_parser(
        "long-context",
        help="score a byte-level LM on the long-context suite per length and depth",
        description=(
            "Build the seeded suite (tasks: " + ", ".join(task_names()) + "; the babilong "
            "tasks read bAbI's test stories), feed each "
            "prompt with the model's streaming state, decode the answer greedily and report "
            "the score per task and length (mean over depths), plus a heat map of score by "
            "length x depth per task."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument(
        "--lengths", default="1024,2048,4096", help="sequence lengths in bytes (prompt + answer)"
    )
    p.add_argument("--tasks", default="all", help="comma-separated task names, or all")
    p.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="key-statement depths")
    p.add_argument(
        "--samples", type=positive_int, default=10, help="examples per (task, length, depth)"
    )
    p.add_argument(
        "--haystack",
        default="noise",
        help="noise, or a text source (wikitext2-test, tinyshakespeare, a file or folder)",
    )
    p.add_argument("--seed", type=non_negative_int, default=0, help="data seed")
    p.add_argument("--chunk-len", type=positive_int, default=1024, help="tokens per streamed call")
    p.add_argument("--batch-size", type=positive_int, default=8, help="examples decoded together")
    p.add_argument(
        "--context",
        type=positive_int,
        default=None,
        help="read only each prompt's last N bytes from a fresh state (the control without "
        "carried memory: compare with a run without it)",
    )
    add_weights_choice(p)
    add_evaluation_outputs(p, out_help="folder for suite.json / suite.md / suite.png")
    p.set_defaults(handler=run_suite)


def run_suite(args: argparse.Namespace) -> int:
    from titans_seq.devices import resolve_device

    from .evals.needles import parse_depths, parse_lengths
    from .evals.suite import evaluate_suite, plot_heatmaps
    from .evals.suite_examples import check_tasks, task_names

    lengths = parse_lengths(args.lengths)
    depths = parse_depths(args.depths)
    tasks = task_names() if args.tasks == "all" else [t.strip() for t in args.tasks.split(",")]
    tasks = check_tasks(tasks, args.haystack, "--tasks (or all)")
    if args.samples < 1 or args.chunk_len < 1 or args.batch_size < 1:
        raise ValueError("--samples, --chunk-len and --batch-size must be positive integers")
    device = resolve_device(args.device)
    model, _ = load_passkey_model(args.model, args.weights)  # byte-level models only
    model.to(device)
    result = evaluate_suite(
        model,
        lengths,
        tasks,
        depths=depths,
        samples=args.samples,
        haystack=args.haystack,
        seed=args.seed,
        chunk_len=args.chunk_len,
        batch_size=args.batch_size,
        device=device,
        progress=not args.quiet,
        context=args.context,
    )
    reads = "" if args.context is None else f", each prompt's last {args.context} bytes only"
    print(
        f"long-context suite, {args.samples} examples per task, length and depth, haystack "
        f"{args.haystack}, model {args.model}, {device}{reads}, {result.seconds:.1f} s"
    )
    table = result.table()
    table += "\n\nShare of the answers' characters right:\n\n" + result.table("characters")
    print(table)
    if args.out:
        from titans_seq.training.checkpoint import atomic_write_text

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_record(out / "suite.json", args, device, **result.to_dict())
        atomic_write_text(out / "suite.md", table + "\n")
        plot_heatmaps(result, out / "suite.png", title=str(args.model))
        print(f"results written to {out}")
    return 0


def register_evaluate_lm(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "evaluate-lm",
        help="loss of a language model over whole documents, state carried, per position",
        description=(
            "Feed every document of DATA through the model in windows of --window tokens with "
            "the streaming state carried from one window to the next, and report the loss per "
            "position bucket (0-128, 128-256, ... doubling), overall loss and bits per byte. "
            "With --compare-reset the same documents are also scored with the state restarted "
            "at every window, side by side. DATA is a registered corpus (wikitext2-test is "
            "read as its 62 articles), a text file / folder / glob (one document per file), "
            "or a prepared folder (its val split, cut at its document starts)."
        ),
    )
    p.add_argument("--model", required=True, help="saved model folder or training run folder")
    p.add_argument("--data", required=True, help="documents to score")
    p.add_argument("--window", type=positive_int, default=1024, help="tokens per forward call")
    p.add_argument(
        "--max-documents", type=positive_int, default=None, help="score the first N only"
    )
    p.add_argument(
        "--max-tokens", type=positive_int, default=None, help="cut documents to N tokens"
    )
    p.add_argument(
        "--compare-reset", action="store_true", help="also score with the state reset per window"
    )
    add_evaluation_outputs(p, out_help="folder for long_eval.json / .md / .png")
    p.set_defaults(handler=run_evaluate_lm)


def document_tokens(source: str, tokenizer) -> tuple[list[torch.Tensor], int]:
    """(one 1-D id tensor per document, UTF-8 bytes of their text) of a text source or a
    prepared folder's val split (its train split when it has no val)."""
    from .data import load_source_split

    split = load_source_split(source, tokenizer)
    documents = []
    for i, array in enumerate(split.arrays):
        cuts = [0, *split.document_starts(i, 0, array.shape[0]).tolist(), array.shape[0]]
        documents += [
            torch.from_numpy(np.asarray(array[a:b], dtype=np.int64)) for a, b in zip(cuts, cuts[1:])
        ]
    return documents, split.num_bytes


def run_evaluate_lm(args: argparse.Namespace) -> int:
    from titans_seq.devices import resolve_device

    from .evals.long_documents import bucket_table, evaluate_long_documents, plot_bucket_losses
    from .model import load_lm_and_tokenizer

    for name in ("window", "max_documents", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    device = resolve_device(args.device)
    model, tokenizer = load_lm_and_tokenizer(args.model, map_location=device)
    documents, num_bytes = document_tokens(args.data, tokenizer)
    total = sum(d.numel() for d in documents)
    if args.max_documents is not None:
        documents = documents[: args.max_documents]
    if args.max_tokens is not None:
        documents = [d[: args.max_tokens] for d in documents]
    # bytes in proportion to the tokens kept (exact for byte-level tokens without cuts)
    num_bytes = num_bytes * sum(d.numel() for d in documents) / max(total, 1)
    modes = [True, False] if args.compare_reset else [True]
    results = [
        evaluate_long_documents(
            model,
            documents,
            window=args.window,
            carry_state=carry,
            num_bytes=num_bytes,
            device=device,
            progress=not args.quiet,
        )
        for carry in modes
    ]
    lengths = [d.numel() for d in documents]
    print(
        f"{len(documents)} documents of {min(lengths)}-{max(lengths)} tokens (median "
        f"{int(np.median(lengths))}) from {args.data}, model {args.model}, window "
        f"{args.window}, {device}"
    )
    table = bucket_table(results)
    print(table)
    if args.out:
        from titans_seq.training.checkpoint import atomic_write_text

        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_record(out / "long_eval.json", args, device, results=[r.to_dict() for r in results])
        atomic_write_text(out / "long_eval.md", table + "\n")
        plot_bucket_losses(results, out / "long_eval.png", title=f"{args.model} on {args.data}")
        print(f"results written to {out}")
    return 0


def register_lm_eval(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "lm-eval",
        help="run lm-evaluation-harness tasks on a saved language model",
        description=(
            "Run lm-evaluation-harness (the lm-eval extra) with the titans-seq model: the "
            "remaining arguments are the harness's (--model_args pretrained=DIR --tasks ...)."
        ),
        add_help=False,
    )
    p.set_defaults(handler=run_lm_eval, forward_unknown_args=True)


def run_lm_eval(args: argparse.Namespace) -> int:
    try:
        from lm_eval.__main__ import cli_evaluate

        from .evals import harness  # noqa: F401  (registers the "titans-seq" model)
    except ImportError:
        print(
            "titans-seq lm-eval needs lm_eval: pip install 'titans-seq[lm-eval]'", file=sys.stderr
        )
        return 2
    harness_args = list(args.forwarded_args)
    if {"-h", "--help"} & set(harness_args):
        # the harness's help below shows its own defaults; this command's differ in one
        print(
            "titans-seq lm-eval: lm-evaluation-harness's `lm_eval run` with --model titans-seq "
            "unless another model is named (the harness's help below says 'default: hf'); "
            "pass the saved model as --model_args pretrained=DIR.\n"
        )
    if "--model" not in harness_args and not any(a.startswith("--model=") for a in harness_args):
        harness_args = ["--model", "titans-seq", *harness_args]
    if harness_args[:1] != ["run"] and harness_args[:1] not in (["ls"], ["validate"]):
        harness_args = ["run", *harness_args]
    sys.argv = ["lm-eval", *harness_args]
    cli_evaluate()
    return 0


def write_record(path: Path, args: argparse.Namespace, device, **results) -> None:
    """Write {arguments, device, host, date, **results} to `path` atomically."""
    from titans_seq.training.checkpoint import atomic_write_text

    payload = {
        "arguments": {k: v for k, v in vars(args).items() if k != "handler"},
        "device": str(device),
        "host": platform.node(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **results,
    }
    atomic_write_text(Path(path), json.dumps(payload, indent=1) + "\n")
