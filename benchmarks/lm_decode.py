"""Decoding speed: tokens/s of greedy generation with the streaming state, per mixer, and
the memory's single-token step against the chunk machinery it replaces.

    python benchmarks/lm_decode.py --device cpu --threads 1               # a small model
    python benchmarks/lm_decode.py --device cuda --preset 125m --batch 8  # on a GPU

Part 1 times `TitansLM.generate` (random weights, greedy, `--new-tokens` after a
`--prompt`-token prompt, batch `--batch`) for each mixer: decode tokens/s is batch x new
tokens / the time after the prompt's forward pass (median of `--repeats`). Part 2 times one
memory layer's op at T = 1 through `lmm_memory_step` (what `lmm_memory` dispatches a single
token to) and through `lmm_memory_torch` (the chunk-parallel path that handled it before),
both continuing the same state: milliseconds per token. Prints Markdown tables with the
device and date.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import date

import torch
from harness import device_name

MIXERS = ("attention", "swa", "lmm", "mag", "mal", "mac")
OPTIONS = {
    "swa": {"window": 256},
    "mag": {"window": 256},
    "mal": {"window": 256},
    "mac": {"segment_size": 256},
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def decode_rate(args, mixer: str, device: torch.device) -> tuple[float, int]:
    """(decode tokens/s, parameters) of greedy generation with `mixer`."""
    from titans_seq.domains.lm import TitansLM
    from titans_seq.domains.lm.generation import stream

    torch.manual_seed(0)
    model = TitansLM.from_preset(args.preset, mixer=mixer, mixer_options=OPTIONS.get(mixer))
    model.to(device).eval()
    prompt = torch.randint(0, 256, (args.batch, args.prompt), device=device)
    rates = []
    for _ in range(args.repeats):
        steps = stream(model, prompt, args.new_tokens, temperature=0)
        next(steps)  # the prompt's forward pass and the first token
        sync(device)
        start = time.perf_counter()
        for _ in steps:
            pass
        sync(device)
        rates.append(args.batch * (args.new_tokens - 1) / (time.perf_counter() - start))
    return statistics.median(rates), sum(p.numel() for p in model.parameters())


@torch.no_grad()
def step_milliseconds(args, device: torch.device) -> dict[str, float]:
    """ms per token of one memory layer's op at T = 1: the step vs the chunk machinery."""
    from titans_seq.ops.lmm import lmm_memory_step, lmm_memory_torch

    g = torch.Generator(device="cpu").manual_seed(0)
    B, H, d, T = args.batch, args.heads, args.head_dim, 64

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    q, k = (torch.nn.functional.normalize(rnd(B, T, H, d), dim=-1) for _ in range(2))
    v = rnd(B, T, H, d)
    theta, eta, alpha = (torch.rand(B, T, H, generator=g).to(device) * s for s in (0.1, 0.9, 0.1))
    weights = (rnd(H, d, d, scale=d**-0.5), rnd(H, d, d, scale=d**-0.5))
    _, state = lmm_memory_torch(
        q[:, :7], k[:, :7], v[:, :7], theta[:, :7], eta[:, :7], alpha[:, :7], weights,
        output_final_state=True,
    )  # fmt: skip
    result = {}
    for name, fn in (("step", lmm_memory_step), ("chunk machinery", lmm_memory_torch)):
        times = []
        for _ in range(args.repeats):
            s = state
            sync(device)
            start = time.perf_counter()
            for t in range(7, T):
                one = (x[:, t : t + 1] for x in (q, k, v, theta, eta, alpha))
                _, s = fn(*one, weights, initial_state=s, output_final_state=True)
            sync(device)
            times.append((time.perf_counter() - start) / (T - 7) * 1e3)
        result[name] = statistics.median(times)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--mixers", default=",".join(MIXERS))
    p.add_argument("--preset", default="tiny", help="model size preset (domains/lm/presets.py)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--heads", type=int, default=4, help="memory heads of the op timing")
    p.add_argument("--head-dim", type=int, default=64, help="memory head width of the op timing")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    name = device_name(device)
    command = " ".join(
        ["python benchmarks/lm_decode.py", *(sys.argv[1:] if argv is None else argv)]
    )
    print(f"- Command: `{command}`")
    print(
        f"- Device: {device} ({name or platform.machine()}), {torch.get_num_threads()} threads, "
        f"torch {torch.__version__}; {date.today().isoformat()}\n"
    )
    print(
        f"Greedy decoding, preset {args.preset}, batch {args.batch}, after a {args.prompt}-token "
        f"prompt, {args.new_tokens} new tokens (median of {args.repeats}):\n"
    )
    print("| mixer | parameters | decode tokens/s |\n|---|---|---|")
    for mixer in args.mixers.split(","):
        rate, params = decode_rate(args, mixer, device)
        print(f"| {mixer} | {params / 1e6:.2f}M | {rate:,.0f} |", flush=True)
    ms = step_milliseconds(args, device)
    print(
        f"\nOne memory layer at T = 1 (batch {args.batch}, {args.heads} heads of "
        f"{args.head_dim}, depth 2), ms per token:\n"
    )
    print("| path | ms / token |\n|---|---|")
    for path, value in ms.items():
        print(f"| {path} | {value:.3f} |")
    print(f"\nThe step is {ms['chunk machinery'] / ms['step']:.2f}x faster.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
