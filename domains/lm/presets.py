"""Size presets of `TitansLM`: width, depth and heads (the mixer is chosen separately).

| preset | dim | depth | heads | about (attention mixer, tied embeddings)                    |
|--------|-----|-------|-------|--------------------------------------------------------------|
| tiny   |  32 |     2 |     2 | 33K parameters at vocab 256: CPU tests                       |
| 20m    | 512 |     6 |     8 | 19M at vocab 256 (byte level): tinyshakespeare benchmarks    |
| 125m   | 768 |    12 |    12 | 85M non-embedding; 110M at vocab 32000                       |
| 340m   |1024 |    24 |    16 | 302M non-embedding; 335M at vocab 32000                      |

"125m" and "340m" are the Transformer++ (Llama-style) shapes of the smallest models in the
Titans paper's language-modeling comparison (Behrouz et al. 2025, section 5.1), which
follows the setup of Gated DeltaNet / GLA (Yang et al. 2024): d=1024, 24 layers, 16 heads for
340M (the same widths as fla-org/flame `configs/transformer_340M.json`: hidden_size 1024,
num_hidden_layers 24, num_heads 16, vocab 32000) and the GPT-2-small / Mamba-130M shape
d=768, 12 layers, 12 heads for 125M. Those papers count parameters with a 32K vocabulary
(the Llama tokenizer); at the byte-level vocabulary (256) the same shapes have 85M and 302M
parameters. The Titans mixers have slightly more parameters per layer than attention (the
memory's gates, output gate and initial weights, persistent tokens); `TitansLM.num_parameters`
reports the exact count of any combination.

For comparisons at equal size, `sizing.parameter_matched_mlp_ratio(preset, mixer)` gives the MLP
width at which a Titans mixer has the parameter count of the preset's Transformer++.

The MLP is the Backbone's SwiGLU with `mlp_ratio` 4 (hidden width 2/3 * 4 * dim, rounded up to
a multiple of 8: the parameters of a 4x plain MLP).
"""

from __future__ import annotations

PRESETS: dict[str, dict] = {
    "tiny": {"dim": 32, "depth": 2, "heads": 2, "mlp_ratio": 4.0},
    "20m": {"dim": 512, "depth": 6, "heads": 8, "mlp_ratio": 4.0},
    "125m": {"dim": 768, "depth": 12, "heads": 12, "mlp_ratio": 4.0},
    "340m": {"dim": 1024, "depth": 24, "heads": 16, "mlp_ratio": 4.0},
}


def preset_config(name: str) -> dict:
    """A copy of the constructor arguments of preset `name` (ValueError lists the presets)."""
    if name not in PRESETS:
        raise ValueError(f"unknown LM preset {name!r}; the presets are {sorted(PRESETS)}")
    return dict(PRESETS[name])
