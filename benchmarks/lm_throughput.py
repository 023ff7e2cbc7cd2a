"""Training throughput of a language model: Titans mixers (Triton memory backend) beside
Transformer++ at the same size, one process, synthetic tokens.

    python benchmarks/lm_throughput.py                                  # 125M, H100, bf16
    python benchmarks/lm_throughput.py --backends triton torch          # also the torch path
    python benchmarks/lm_throughput.py --device cpu --preset tiny --seq-len 128 \
        --batch-size 2 --steps 3 --warmup 1                             # CPU smoke run

Every row builds `TitansLM.from_preset(preset, mixer=...)` with the MLP width that matches
the preset's Transformer++ parameter count (`sizing.parameter_matched_mlp_ratio`), then
times full optimizer steps (forward, backward, AdamW, bf16 autocast on GPU) on random
tokens: tokens/s is the median over `--steps` timed steps after `--warmup` untimed ones, peak
memory is `torch.cuda.max_memory_allocated` over the timed steps, and MFU uses
`model.flops_per_token` against the device's 16-bit dense peak (the table the training loop
uses; none on CPU). Each row runs in its own process, so one row's failure (e.g. out of
memory) or allocator state never touches the others.

Writes `<out-dir>/lm_throughput.md` and `.json` with the command, device and date.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch

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


def time_row(args: argparse.Namespace, mixer: str, backend: str) -> dict:
    """Build one model and time its optimizer steps (runs in a child process)."""
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
    use_bf16 = device.type == "cuda" and not args.fp32
    tokens = torch.randint(
        0, args.vocab_size, (args.batch_size, args.seq_len + 1), device=device
    )  # [B, T + 1]: inputs and next-token targets

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16):
            logits, _ = model(tokens[:, :-1])
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
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    tokens_per_step = args.batch_size * args.seq_len
    tokens_per_s = tokens_per_step / statistics.median(times)
    peak = peak_flops(None, device, torch.bfloat16 if use_bf16 else None)
    flops = model.flops_per_token(args.seq_len)
    return {
        "mixer": mixer,
        "backend": backend if options else "-",
        "params": model.num_parameters(),
        "mlp_ratio": ratio,
        "tokens_per_s": tokens_per_s,
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        ),
        "mfu": tokens_per_s * flops / peak if peak else None,
    }


def run_isolated(args: argparse.Namespace, mixer: str, backend: str) -> dict:
    """`time_row` in a child process; a failure becomes a row with its error."""
    argv = [sys.executable, __file__, *args.raw_argv, "--_row", f"{mixer}:{backend}"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    error = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"mixer": mixer, "backend": backend, "error": error[:200]}


def rows_to_markdown(rows: list[dict]) -> str:
    lines = [
        "| mixer | memory backend | params | tokens/s | peak memory (GiB) | MFU |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['mixer']} | {r['backend']} | - | error: {r['error']} | - | - |")
            continue
        memory = "-" if r["peak_memory_gib"] is None else f"{r['peak_memory_gib']:.2f}"
        mfu = "-" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        lines.append(
            f"| {r['mixer']} | {r['backend']} | {r['params']:,} | "
            f"{r['tokens_per_s']:,.0f} | {memory} | {mfu} |"
        )
    return "\n".join(lines)


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--preset", default="125m")
    p.add_argument("--vocab-size", type=int, default=32000, help="Llama-size vocabulary")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per step")
    p.add_argument("--mixers", nargs="+", default=list(MIXERS))
    p.add_argument(
        "--backends", nargs="+", default=["triton"], help="memory backends of the Titans rows"
    )
    p.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation, caches)")
    p.add_argument("--fp32", action="store_true", help="no bf16 autocast on GPU")
    p.add_argument("--out-dir", default="runs/bench_lm_throughput")
    p.add_argument("--_row", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.raw_argv = argv  # what the child processes are started with (plus their row)
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args._row is not None:  # child process: one row, printed as JSON
        mixer, backend = args._row.split(":")
        print(json.dumps(time_row(args, mixer, backend)))
        return 0
    rows = []
    for mixer in args.mixers:
        backends = ["-"] if mixer in ("attention", "swa") else args.backends
        for backend in backends:
            row = run_isolated(args, mixer, backend)
            rows.append(row)
            print(json.dumps(row), flush=True)
    command = "python benchmarks/lm_throughput.py " + shlex.join(argv)
    header = (
        f"- Command: `{command.strip()}`\n- Device: {device_name(args.device)}; torch "
        f"{torch.__version__}; date {date.today().isoformat()}\n- Preset {args.preset}, "
        f"vocabulary {args.vocab_size}, {args.batch_size} x {args.seq_len} tokens per step, "
        f"{'fp32' if args.fp32 or args.device == 'cpu' else 'bf16 autocast'}, AdamW; median "
        f"of {args.steps} steps after {args.warmup} warm-up steps\n"
    )
    table = rows_to_markdown(rows)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "lm_throughput.md").write_text(header + "\n" + table + "\n")
    (out / "lm_throughput.json").write_text(
        json.dumps({"command": command, "device": device_name(args.device), "rows": rows}, indent=1)
    )
    print(header + "\n" + table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
