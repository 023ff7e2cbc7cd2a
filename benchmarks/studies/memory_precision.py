"""float32 against float64 over long streams: does rounding error stay small?

    python benchmarks/studies/memory_precision.py --lengths 1024,4096,16384

For each length T, the default `lmm` mixer (random initialisation, seed 0) reads the same
input x [1, T, D] (unit-RMS Gaussian, as a Backbone's pre-norm delivers) in float32 and in
float64, and in float32 streamed in pieces of `--piece` tokens. Reported, as max|a - b| /
max|b| over all outputs:

  fp32 vs fp64 (backend)     the recurrence's amplification of rounding error
  streamed vs one-shot       the same in float32 (the pieces cut chunks at other places)

With `--reference`, the token-by-token reference backend is compared too (slow: about a
minute per 16K tokens). Writes a Markdown table to stdout and `--out` (JSON) if given.

`--stress` instead runs the default mixer (torch backend, 4K tokens) with its gates forced
to extremes (bias +-8 or +-12, zero gate weights: theta at its bound, no momentum, momentum
and forgetting saturated) on three inputs (Gaussian, four repeated symbols as in DNA, one
token repeated) for memory depths 1-3 and chunk sizes 16 and 64, and reports whether the
stream stays finite and the float32 / float64 difference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

import titans_seq as ts


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def measure(T: int, piece: int, backends: list[str], dim: int, heads: int, options: dict):
    torch.manual_seed(0)
    mixer = ts.build_mixer("lmm", dim=dim, heads=heads, **options)
    x = torch.randn(1, T, dim, generator=torch.Generator().manual_seed(1))
    row = {"T": T}
    with torch.no_grad():
        for backend in backends:
            mixer.backend = backend
            start = time.perf_counter()
            y32, _ = mixer.float()(x)
            y64, _ = mixer.double()(x.double())
            mixer.float()
            row[f"fp32_vs_fp64_{backend}"] = relative_error(y32, y64)
            row[f"seconds_{backend}"] = time.perf_counter() - start
            row["finite"] = bool(torch.isfinite(y32).all())
        mixer.backend = "torch"
        y32, _ = mixer(x)
        state, pieces = None, []
        for start in range(0, T, piece):
            y, state = mixer(x[:, start : start + piece], state)
            pieces.append(y)
        row["streamed_vs_one_shot"] = relative_error(torch.cat(pieces, 1), y32)
    return row


STRESS_GATES = {  # (theta, eta, alpha) gate biases; the gate weights are zeroed
    "initial gates": (0.0, 2.0, -5.0),
    "theta at its bound": (8.0, 2.0, -5.0),
    "theta at its bound, no momentum": (8.0, -8.0, -12.0),
    "all saturated (eta ~ 1, alpha ~ 0)": (8.0, 6.0, -12.0),
}


def stress(T: int = 4096, dim: int = 64, heads: int = 4) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    vocab = torch.randn(4, dim, generator=g)
    inputs = {
        "gaussian": torch.randn(1, T, dim, generator=g),
        "4 symbols": vocab[torch.randint(0, 4, (1, T), generator=g)],
        "1 token": vocab[0].expand(1, T, dim).clone(),
    }
    rows = []
    for chunk in (16, 64):
        for label, (b_theta, b_eta, b_alpha) in STRESS_GATES.items():
            row = {"chunk": chunk, "gates": label}
            for name, x in inputs.items():
                for depth in (1, 2, 3):
                    torch.manual_seed(1)
                    m = ts.build_mixer(
                        "lmm", dim=dim, heads=heads, chunk_size=chunk, memory_depth=depth
                    )
                    with torch.no_grad():
                        bias = m.memory.gate_proj.bias
                        bias[:heads], bias[heads : 2 * heads] = b_theta, b_eta
                        bias[2 * heads :] = b_alpha
                        m.memory.gate_proj.weight.zero_()
                        y32, _ = m(x)
                        y64, _ = m.double()(x.double())
                    finite = bool(torch.isfinite(y32).all())
                    row[f"{name}, depth {depth}"] = relative_error(y32, y64) if finite else None
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", default="1024,4096,16384")
    p.add_argument("--piece", type=int, default=1000, help="streamed piece length")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--reference", action="store_true", help="also the reference backend")
    p.add_argument("--options", default="{}", help="JSON of lmm options (default: defaults)")
    p.add_argument("--out", default=None)
    p.add_argument("--stress", action="store_true", help="extreme gates and inputs (above)")
    args = p.parse_args(argv)
    if args.stress:
        rows = stress(dim=args.dim, heads=args.heads)
        columns = [c for c in rows[0] if c not in ("chunk", "gates")]
        print("\n| C | gates | " + " | ".join(columns) + " |")
        print("|---|---|" + "---|" * len(columns))
        for row in rows:
            cells = ["NaN" if row[c] is None else f"{row[c]:.0e}" for c in columns]
            print(f"| {row['chunk']} | {row['gates']} | " + " | ".join(cells) + " |")
        return 0
    backends = ["torch"] + (["reference"] if args.reference else [])
    options = json.loads(args.options)
    rows = []
    for T in map(int, args.lengths.split(",")):
        rows.append(measure(T, args.piece, backends, args.dim, args.heads, options))
        print(json.dumps(rows[-1]), flush=True)
    columns = [c for c in rows[0] if c != "T"]
    print("\n| T | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row in rows:
        cells = [f"{row[c]:.2e}" if isinstance(row[c], float) else str(row[c]) for c in columns]
        print(f"| {row['T']} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"command": " ".join(sys.argv), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
