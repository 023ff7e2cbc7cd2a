"""Record, then compare, what a refactoring must not change: every mixer's outputs and
gradients at a fixed seed, and every shipped recipe's resolved config.

    python tools/behaviour_snapshot.py record before/       # on the old code
    python tools/behaviour_snapshot.py compare before/      # on the new code: bitwise

For each registered mixer (with several option sets, each backend that runs on CPU) the
tool builds the mixer at seed 0, runs x [2, 37, 16] one-shot and in two streamed pieces, and
stores y, the streamed y and the gradients of sum(y * w) for x and every parameter (by name,
so renamed parameters are reported too). Each recipe is resolved with `load_config` and its
model built at seed 0 when that needs no dataset; its config goes through the mixer-option
parser so that a recipe rewritten from flat to nested memory options compares equal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

MIXER_CASES = {
    "lmm": [{}, {"memory_depth": 1, "conv_size": 0, "num_persistent": 0}],
    "mag": [{"window": 8}, {"window": 8, "use_momentum": False, "qk_norm": True}],
    "mal": [{"window": 8}],
    "mac": [{"segment_size": 8, "num_memory_tokens": 3}, {"segment_size": 8}],
    "attention": [{}, {"num_persistent": 2}],
    "swa": [{"window": 8}],
}
BACKENDS = ("reference", "chunked", "torch")


def mixer_tensors() -> dict[str, torch.Tensor]:
    from titans_seq.mixers import build_mixer

    out = {}
    for name, cases in MIXER_CASES.items():
        for index, options in enumerate(cases):
            backends = BACKENDS if name != "attention" and name != "swa" else ("auto",)
            for backend in backends:
                extra = {} if backend == "auto" else {"backend": backend}
                torch.manual_seed(0)
                mixer = build_mixer(name, dim=16, heads=2, **options, **extra).double()
                x = torch.randn(2, 37, 16, dtype=torch.float64, requires_grad=True)
                w = torch.randn(2, 37, 16, dtype=torch.float64)
                y, _ = mixer(x)
                (y * w).sum().backward()
                key = f"{name}/{index}/{backend}"
                out[f"{key}/y"] = y.detach()
                out[f"{key}/grad_x"] = x.grad.detach()
                for pname, p in mixer.named_parameters():
                    out[f"{key}/grad/{pname}"] = p.grad.detach().clone()
                    out[f"{key}/param/{pname}"] = p.detach().clone()
                with torch.no_grad():
                    first, state = mixer(x[:, :13])
                    second, _ = mixer(x[:, 13:], state)
                out[f"{key}/streamed"] = torch.cat((first, second), dim=1)
    return out


def recipe_configs() -> dict[str, dict]:
    from titans_seq.training import load_config
    from titans_seq.training.recipe_files import list_recipes

    configs = {}
    for name in list_recipes():
        cfg = load_config(name).to_dict()
        configs[name] = normalise(cfg)
    return configs


def normalise(cfg: dict) -> dict:
    """The resolved config with its mixer options in one canonical form."""
    model = cfg.get("model") or {}
    options = model.get("mixer_options")
    if options is not None and "mixer" in model:
        try:
            from titans_seq.mixers.options import canonical_mixer_options
        except ImportError:  # the old code: options are already flat dicts
            return cfg
        model["mixer_options"] = canonical_mixer_options(
            model["mixer"], options, model.get("depth") or _preset_depth(model)
        )
    return cfg


def _preset_depth(model: dict) -> int:
    return {"tiny": 2, "20m": 6, "125m": 12, "340m": 24}.get(model.get("preset"), 1)


def record(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(mixer_tensors(), folder / "mixers.safetensors")
    (folder / "recipes.json").write_text(json.dumps(recipe_configs(), indent=1, sort_keys=True))
    print(f"recorded into {folder}")


def compare(folder: Path) -> int:
    before = load_file(folder / "mixers.safetensors")
    now = mixer_tensors()
    problems = [f"missing now: {k}" for k in sorted(set(before) - set(now))]
    problems += [f"new: {k}" for k in sorted(set(now) - set(before))]
    for key in sorted(set(before) & set(now)):
        if not torch.equal(before[key], now[key]):
            diff = (before[key] - now[key]).abs().max().item()
            problems.append(f"differs: {key} (max abs diff {diff:.3g})")
    old = json.loads((folder / "recipes.json").read_text())
    # both sides normalised twice (once when recorded, once here): normalising is not
    # idempotent for memory options (an unset `triton` becomes the dict of its defaults)
    new = json.loads(json.dumps(recipe_configs(), sort_keys=True))
    new = {name: normalise(cfg) for name, cfg in new.items()}
    for name in sorted(set(old) | set(new)):
        a = normalise(old.get(name, {})) if name in old else None
        if a != new.get(name):
            problems.append(f"recipe differs: {name}\n  before {a}\n  now    {new.get(name)}")
    print(f"{len(before)} tensors, {len(old)} recipes compared; {len(problems)} differences")
    for line in problems:
        print(line)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("record", "compare"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.action == "record":
        record(args.folder)
        return 0
    return compare(args.folder)


if __name__ == "__main__":
    sys.exit(main())
