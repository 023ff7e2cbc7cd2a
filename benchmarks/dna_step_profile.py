"""Where a DNA classifier's training step spends its time, and the memory op's share of it.

    python benchmarks/dna_step_profile.py                # 1 thread, backend "torch"
    python benchmarks/dna_step_profile.py --backend compiled --threads 2

The network `DNAClassifier()` trains (its defaults: dim 64, 2 layers, 4 heads of 16, one
direction, one strand a step, the width-7 stem patching 4 bases a position, the 6-mer head;
`--stem-stride 1` reads every base) on a batch of --batch random sequences of --length
bases: forward, loss, backward. Prints the median seconds per step over --repeat
steps after two warm-up steps, then profiles one step with torch.profiler and prints the
share of CPU time inside the memory op (its autograd Function's forward and backward, all
that runs under them included) and the top operators by self time.
"""

from __future__ import annotations

import argparse
import sys

import torch
from harness import median_seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--backend", default="torch")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=240)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stem-stride", default="auto", help='"auto" (the default) or an integer')
    args = p.parse_args(argv)

    from torch.profiler import profile

    from titans_seq.domains.genomics import DNAClassifier
    from titans_seq.domains.genomics.task import build_net

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    stride = args.stem_stride if args.stem_stride == "auto" else int(args.stem_stride)
    classifier = DNAClassifier(mixer_options={"backend": args.backend}, stem_stride=stride)
    model = build_net(classifier._model_config(2)).train()
    ids = torch.randint(1, 5, (args.batch, args.length))
    lengths = torch.full((args.batch,), args.length)
    labels = torch.randint(0, 2, (args.batch,))

    def step():
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(ids, lengths), labels).backward()

    seconds, _ = median_seconds(step, warmup=2, repeat=args.repeat)
    print(
        f"backend {args.backend}, {args.threads} thread(s), batch {args.batch} x "
        f"{args.length} bp: {seconds:.3f} s per training step"
    )

    with profile() as prof:
        step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    memory_op = sum(e.cpu_time_total for e in events if e.key in ("_TorchLMM", "_TorchLMMBackward"))
    print(f"memory op (forward + backward): {100 * memory_op / total:.0f}% of the step's CPU time")
    print(events.table(sort_by="self_cpu_time_total", row_limit=12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
