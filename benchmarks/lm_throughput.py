"""Training throughput of a language model: Titans mixers (Triton memory backend) beside
Transformer++ at the same size, one process, synthetic tokens.

    python benchmarks/lm_throughput.py                                  # 125M, H100, bf16
    python benchmarks/lm_throughput.py --backends triton torch          # also the torch path
    python benchmarks/lm_throughput.py --contexts 2048x8 16384x1        # 2K and 16K context
    python benchmarks/lm_throughput.py --compile both                   # eager and compiled
    python benchmarks/lm_throughput.py --device cpu --preset tiny --seq-len 128 \
        --batch-size 2 --steps 3 --warmup 1                             # CPU smoke run

Every row builds `TitansLM.from_preset(preset, mixer=...)` with the MLP width that matches
the preset's Transformer++ parameter count (`sizing.parameter_matched_mlp_ratio`), then
times full optimizer steps (forward, backward, AdamW, bf16 autocast on GPU) on random
tokens (`--compile yes`: the model under `torch.compile`, as a training script compiles
it; the optimizer step stays eager): tokens/s is the median over `--steps` timed steps
after `--warmup` untimed ones (which compile), peak
memory is `torch.cuda.max_memory_allocated` over the timed steps, and MFU uses
`model.flops_per_token` against the device's 16-bit dense peak (the table the training loop
uses; none on CPU). Each row runs in its own process, so one row's failure (e.g. out of
memory) or allocator state never touches the others; --row-seconds caps a row (a mixer at
one context), compilation included, and --total-seconds the whole run. A context `LxB` is
L tokens per sequence and B sequences per step.

Writes `<out-dir>/lm_throughput.md` and `.json` with the command, device, date and commit,
rewritten after every row.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
from datetime import date
from pathlib import Path

import torch
from harness import (
    NO_TIME_LEFT,
    TimeLimits,
    add_time_limit_arguments,
    device_name,
    median_seconds,
    run_child,
)

from titans_seq.training.checkpoint import atomic_write_text

MIXERS = ("attention", "lmm", "mag", "mal", "mac")
# window / segment sizes of the hybrids at the benchmark's 2K context (the Titans paper's
# hybrids use local windows well below the context length)
HYBRID_OPTIONS = {
    "mag": {"window": 512},
    "mal": {"window": 512},
    "mac": {"segment_size": 512},
}


def mixer_options(mixer: str, backend: str) -> dict:
    """Options of `mixer` in this benchmark: the memory backend for the Titans mixers."""
    if mixer in ("attention", "swa"):
        return {}
    return {**HYBRID_OPTIONS.get(mixer, {}), "backend": backend}


def parse_context(text: str) -> tuple[int, int]:
    """A context `LENGTHxBATCH`: "2048x8" -> (2048 tokens per sequence, 8 per step)."""
    try:
        length, batch = (int(part) for part in text.lower().split("x"))
    except ValueError:
        message = f"a context is LENGTHxBATCH, e.g. 2048x8: {text!r}"
        raise argparse.ArgumentTypeError(message) from None
    if length < 1 or batch < 1:
        raise argparse.ArgumentTypeError(f"a context needs positive sizes: {text!r}")
    return length, batch


def time_row(
    args: argparse.Namespace, mixer: str, backend: str, context: tuple[int, int], compiled: bool
) -> dict:
    """Build one model and time its optimizer steps at `context` (a child process);
    compiled: the model under `torch.compile`."""
    from titans_seq.domains.lm import TitansLM
    from titans_seq.domains.lm.sizing import parameter_matched_mlp_ratio
    from titans_seq.training.logs import peak_flops

    device = torch.device(args.device)
    torch.manual_seed(0)
    options = mixer_options(mixer, backend)
    ratio = parameter_matched_mlp_ratio(args.preset, mixer, args.vocab_size, mixer_options=options)
    model = TitansLM.from_preset(
        args.preset,
        mixer=mixer,
        vocab_size=args.vocab_size,
        mixer_options=options or None,
        mlp_ratio=ratio,
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    forward = torch.compile(model) if compiled else model
    use_bf16 = device.type == "cuda" and not args.fp32
    seq_len, batch_size = context
    tokens = torch.randint(
        0, args.vocab_size, (batch_size, seq_len + 1), device=device
    )  # [B, T + 1]: inputs and next-token targets

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits, _ = forward(tokens[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1).float(), tokens[:, 1:].flatten()
            )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    seconds, times = median_seconds(step, warmup=0, repeat=args.steps, device=device)
    tokens_per_step = batch_size * seq_len
    tokens_per_s = tokens_per_step / seconds
    peak = peak_flops(None, device, torch.bfloat16 if use_bf16 else None)
    flops = model.flops_per_token(seq_len)
    return {
        "mixer": mixer,
        "backend": backend if options else "-",
        "compiled": compiled,
        "seq_len": seq_len,
        "batch_size": batch_size,
        "params": model.num_parameters(),
        "mlp_ratio": ratio,
        "tokens_per_s": tokens_per_s,
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
        "mfu": tokens_per_s * flops / peak if peak else None,
    }


def run_isolated(
    args: argparse.Namespace,
    mixer: str,
    backend: str,
    context: tuple[int, int],
    compiled: bool,
    limits,
) -> dict:
    """`time_row` in a child process under its time limit; a failure becomes a row with its
    error."""
    row = f"{mixer}:{backend}:{context[0]}x{context[1]}:{int(compiled)}"
    timeout = limits.for_row(mixer)
    if timeout is not None and timeout < 5:
        error = NO_TIME_LEFT
    else:
        argv = [sys.executable, __file__, *args.raw_argv, "--_row", row]
        result = run_child(argv, timeout=timeout, log=args.log)
        if result.returncode == 0 and result.records:
            return result.records[-1]
        error = result.error() or "no output"
    return {
        "mixer": mixer, "backend": backend, "compiled": compiled, "seq_len": context[0],
        "batch_size": context[1], "error": error,
    }  # fmt: skip


def rows_to_markdown(rows: list[dict]) -> str:
    lines = [
        "| mixer | memory backend | model | context | params | tokens/s | peak memory (GiB) "
        "| MFU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        context = f"{r['seq_len']} x {r['batch_size']}"
        mode = "compiled" if r.get("compiled") else "eager"
        if "error" in r:
            lines.append(
                f"| {r['mixer']} | {r['backend']} | {mode} | {context} | - | error: "
                f"{r['error']} | - | - |"
            )
            continue
        memory = "-" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.2f}"
        mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        lines.append(
            f"| {r['mixer']} | {r['backend']} | {mode} | {context} | {r['params']:,} | "
            f"{r['tokens_per_s']:,.0f} | {memory} | {mfu} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="125m")
    p.add_argument("--vocab-size", type=int, default=32000, help="Llama-size vocabulary")
    p.add_argument(
        "--contexts", type=parse_context, nargs="+", default=[(2048, 8)],
        help="LENGTHxBATCH: tokens per sequence and sequences per step (default 2048x8)",
    )  # fmt: skip
    p.add_argument("--mixers", nargs="+", default=list(MIXERS))
    p.add_argument(
        "--backends", nargs="+", default=["triton"], help="memory backends of the Titans rows"
    )
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation, caches)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast on GPU")
    p.add_argument(
        "--compile", choices=("no", "yes", "both"), default="no",
        help="time the model under torch.compile (yes), eagerly (no), or each (both)",
    )  # fmt: skip
    add_time_limit_arguments(p)
    p.add_argument("--log", default=None, help="the child processes' output, appended here")
    p.add_argument("--out-dir", default="runs/bench_lm_throughput")
    p.add_argument("--_row", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.raw_argv = argv  # what the child processes are started with (plus their row)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args._row is not None:  # child process: one row, printed as JSON
        mixer, backend, context, compiled = args._row.split(":")
        row = time_row(args, mixer, backend, parse_context(context), compiled == "1")
        print(json.dumps(row))
        return 0
    from harness import git_commit

    command = "python benchmarks/lm_throughput.py " + shlex.join(argv)
    contexts = ", ".join(f"{length} x {batch}" for length, batch in args.contexts)
    header = (
        f"- Command: `{command.strip()}`\n- Device: {device_name(args.device)}; torch "
        f"{torch.__version__}; date {date.today().isoformat()}; commit {git_commit()}\n"
        f"- Preset {args.preset}, vocabulary {args.vocab_size}, tokens per sequence x "
        f"sequences per step: {contexts}; "
        f"{'fp32' if args.fp32 or args.device == 'cpu' else 'bf16 autocast'}, AdamW; median "
        f"of {args.steps} steps after {args.warmup} warm-up steps\n"
    )
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, limits = [], TimeLimits.from_args(args)
    modes = {"no": [False], "yes": [True], "both": [False, True]}[args.compile]
    for mixer in args.mixers:
        backends = ["-"] if mixer in ("attention", "swa") else args.backends
        for backend, context, compiled in itertools.product(backends, args.contexts, modes):
            row = run_isolated(args, mixer, backend, context, compiled, limits)
            rows.append(row)
            print(rows_to_markdown([row]).splitlines()[-1], flush=True)
            table = rows_to_markdown(rows)
            atomic_write_text(out / "lm_throughput.md", header + "\n" + table + "\n")
            record = {
                "command": command, "device": device_name(args.device),
                "date": date.today().isoformat(), "commit": git_commit(), "rows": rows,
            }  # fmt: skip
            atomic_write_text(out / "lm_throughput.json", json.dumps(record, indent=1))
    print(header + "\n" + rows_to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
