"""CLI subcommand `titans-seq passkey`: passkey-retrieval accuracy of a byte-level LM per
sequence length (and needle depth)."""

from __future__ import annotations

import argparse
from pathlib import Path

from titans_seq.devices import resolve_device


def register(subparsers: argparse._SubParsersAction) -> None:
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
        "--samples", type=int, default=50, help="examples per length (per length and depth)"
    )
    p.add_argument(
        "--depths",
        default=None,
        help="comma-separated needle depths in [0, 1], e.g. 0,0.25,0.5,0.75,1 (default: a "
        "uniform random depth per example)",
    )
    p.add_argument(
        "--digits",
        type=int,
        default=None,
        help="passkey digits (default: the run's data.digits for an lm_passkey run, else 5)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="data seed of the evaluation examples (default 0)"
    )
    p.add_argument(
        "--chunk-len",
        type=int,
        default=1024,
        help="tokens per streamed forward call (default 1024; 0: the whole prompt at once)",
    )
    p.add_argument("--batch-size", type=int, default=16, help="examples decoded together")
    p.add_argument(
        "--weights",
        choices=["best", "last"],
        default="best",
        help="for a training run folder: its best validation weights or its newest checkpoint",
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when available), cpu, cuda:0...")
    p.add_argument("--out", default=None, help="write the results as JSON to this file")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
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
    from .passkey_eval import evaluate_passkey, parse_depths, parse_lengths

    # validate the cheap arguments before loading anything
    lengths = parse_lengths(args.lengths)
    depths = parse_depths(args.depths)
    if args.samples <= 0:
        raise ValueError(f"--samples must be a positive integer, got {args.samples}")
    if args.chunk_len < 0:
        raise ValueError(f"--chunk-len must be >= 0 (0: no chunking), got {args.chunk_len}")
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
        from .cli_records import write_record

        write_record(Path(args.out), args, device, model=str(args.model), **result.to_dict())
        print(f"results written to {args.out}")
    return 0
