"""`TitansLM`: a causal language model on any Titans (or baseline) sequence mixer.

    tokens [B, T] -> embedding * sqrt(D) -> Backbone (pre-norm blocks, final RMSNorm)
                  -> output head tied to the embedding -> logits [B, T, V]

The embedding is initialised with std D^-1/2 and scaled by sqrt(D) on the way in, so the
residual stream starts at unit RMS (what the pre-norm stack expects), while the tied head
`logits = h @ E^T` of the unit-RMS final hidden state starts with logits of unit scale. With
`tie_embeddings=False` the head is a separate `nn.Linear` with the same initial scale.

Streaming: `logits, state = model(tokens, state)` returns the Backbone's per-layer states;
feeding a stream in pieces and passing `state` along equals one call (to float rounding), for
every mixer. That is what `generate` uses: the prompt in one call, then one token per step.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from titans_seq.backbone import Backbone
from titans_seq.mixers.state import MixerState

from .presets import preset_config

# mixers whose attention sees a bounded window (option name of the bound) and whose cost
# includes a Titans memory


class TitansLM(nn.Module):
    """Causal LM: tokens [B, T] (int64) -> (logits [B, T, vocab_size], per-layer states).

    Args:
        vocab_size: number of token ids V.
        dim: model width D.
        depth: number of residual blocks.
        heads: heads of every mixer.
        mixer: a registered mixer name ("lmm", "mag", "mal", "mac", "attention", "swa", ...),
            a pattern tiled over the depth ("lmm*3,attention"), or one name per layer.
        mixer_options: options of the mixers (one dict for all layers, a dict keyed by mixer
            name, or one dict per layer; see `titans_seq.backbone.layer_mixer_options`).
        mlp_ratio: SwiGLU width as the ratio of a parameter-matched plain MLP (0: none).
        tie_embeddings: the output head is the embedding matrix (one tensor).
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 256,
        depth: int = 4,
        heads: int = 4,
        mixer: str | list[str] = "lmm",
        mixer_options: dict | list | None = None,
        mlp_ratio: float = 4.0,
        tie_embeddings: bool = True,
    ):
        super().__init__()
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size!r}")
        if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0:
            raise ValueError(f"heads must be a positive integer, got {heads!r}")
        if not isinstance(tie_embeddings, bool):
            raise ValueError(f"tie_embeddings must be True or False, got {tie_embeddings!r}")
        self._config = {
            "vocab_size": vocab_size,
            "dim": dim,
            "depth": depth,
            "heads": heads,
            "mixer": mixer if isinstance(mixer, str) else list(mixer),
            "mixer_options": copy.deepcopy(mixer_options),
            "mlp_ratio": float(mlp_ratio),
            "tie_embeddings": tie_embeddings,
        }
        self.vocab_size = vocab_size
        self.dim = dim
        self.embedding = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.embedding.weight, std=dim**-0.5)
        self.backbone = Backbone(
            dim,
            depth,
            mixer=mixer,
            mixer_options=mixer_options,
            heads=heads,
            mlp_ratio=mlp_ratio,
        )
        # tied: no head module at all, so the weight exists once (in the state dict too)
        self.head = None if tie_embeddings else nn.Linear(dim, vocab_size, bias=False)
        if self.head is not None:
            nn.init.normal_(self.head.weight, std=dim**-0.5)
        self.input_scale = math.sqrt(dim)

    # ------------------------------------------------------------------------ construction
    @property
    def config(self) -> dict:
        """The constructor arguments (JSON-able when `mixer_options` is)."""
        return copy.deepcopy(self._config)

    @classmethod
    def from_config(cls, config: Mapping) -> TitansLM:
        """A fresh model from `model.config` (unknown keys raise a TypeError naming them)."""
        if not isinstance(config, Mapping):
            raise TypeError(f"an LM config must be a dict, got {type(config).__name__}")
        accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
        unknown = sorted(set(config) - accepted)
        if unknown:
            raise TypeError(f"unknown TitansLM config keys {unknown}; accepted: {sorted(accepted)}")
        return cls(**config)

    @classmethod
    def from_preset(
        cls, name: str, *, mixer: str | list[str] = "lmm", vocab_size: int = 256, **overrides
    ) -> TitansLM:
        """A model of size preset `name` (see `domains/lm/presets.py`); `overrides` replace
        any constructor argument, e.g. `mixer_options={"window": 128}`."""
        config = preset_config(name)
        config.update(mixer=mixer, vocab_size=vocab_size)
        config.update(overrides)
        return cls.from_config(config)

    # ----------------------------------------------------------------------------- forward
    @property
    def depth(self) -> int:
        return self.backbone.depth

    @property
    def layer_mixers(self) -> list[str]:
        return list(self.backbone.layer_mixers)

    def forward(
        self,
        tokens: torch.Tensor,
        state: Sequence[MixerState | None] | None = None,
        cu_seqlens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[MixerState] | None]:
        """tokens [B, T] (integer ids in [0, vocab_size)) -> (logits [B, T, V], state).

        `state`: None (a fresh stream) or the state returned by the previous call of the same
        stream (a list of one state per layer).
        `cu_seqlens`: document boundaries [N + 1] of packed tokens [1, total]; each document
        is modelled as if alone (see `titans_seq.packing`) and the returned state is None.
        """
        self._check_tokens(tokens)
        x = self.embedding(tokens.long()) * self.input_scale
        hidden, state = self.backbone(x, state, cu_seqlens=cu_seqlens)
        return self.logits(hidden), state

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The output head: hidden [..., D] -> logits [..., V]."""
        weight = self.embedding.weight if self.head is None else self.head.weight
        return F.linear(hidden, weight)

    def _check_tokens(self, tokens: torch.Tensor) -> None:
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a tensor [B, T] of ids, got {type(tokens).__name__}")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must be integer ids (int64), got dtype {tokens.dtype}")
        if tokens.dim() != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(
                f"tokens must have shape [B, T] with B, T >= 1, got {tuple(tokens.shape)}"
            )
        # a range check needs the values on the host: done on CPU, where an out-of-range id
        # would otherwise give an opaque IndexError; on GPU it would cost a sync per call,
        # and under a user's `torch.compile` it would split the graph at the host read
        if tokens.device.type == "cpu" and not torch.compiler.is_compiling():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                bad = low if low < 0 else high
                raise ValueError(
                    f"token id {bad} is outside the vocabulary [0, {self.vocab_size}); is the "
                    "tokenizer the one the model was built for?"
                )

    # --------------------------------------------------------------------------- generation
    @torch.no_grad()
    def generate(
        self,
        prompt_tokens,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        eos_id: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor | list[torch.Tensor]:
        """Prompt [T] or [B, T] -> prompt + continuation ([T + n] or [B, T + n]); a list of
        prompts of different lengths -> a list of [T_b + n_b] (one batch all the same).

        The prompt is consumed in one call, then one token per step with the streaming state.
        `temperature=0` is greedy decoding; `top_k`/`top_p` filter the distribution before
        sampling; `generator` makes sampling reproducible. With `eos_id`, a sequence that has
        produced it is padded with `eos_id` and generation stops when every sequence has.
        See `titans_seq.domains.lm.generation`.
        """
        from .generation import generate

        return generate(
            self,
            prompt_tokens,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            eos_id=eos_id,
            generator=generator,
        )

    # ----------------------------------------------------------------------------- counting
    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of parameters, each shared tensor counted once. `exclude_embeddings` drops
        the token embedding table (with tied embeddings that is also the output head; an
        untied head is kept: it is a matmul per token)."""
        seen: set[int] = set()
        total = 0
        for name, param in self.named_parameters():
            if id(param) in seen:
                continue
            seen.add(id(param))
            if exclude_embeddings and name == "embedding.weight":
                continue
            total += param.numel()
        return total

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token (forward + backward) at sequence length `seq_len`.

        6 N for the matmuls of the N non-embedding parameters plus the output head (V * D),
        plus the terms that do not scale with the parameters, per layer and token:
          * attention: 12 * H * d * ctx, with ctx = seq_len (full), min(seq_len, window) +
            persistent tokens (swa, mag, mal), min(seq_len, segment_size) + persistent +
            memory tokens (mac): the PaLM / nanoGPT convention (QK^T and AV, forward 4 H d ctx,
            backward twice the forward; the causal mask is not discounted);
          * the Titans memory (chunk-parallel form, C = chunk_size): per head, forward
            8 P + 2 C * sum_l (in_l + out_l) with P the memory MLP's weights per head (the
            MLP forward and error back-propagation at the chunk weights, the retrieval's two
            matmuls with W_s and S_s, and the intra-chunk products X H^T and (M theta) Delta),
            times 3 for the backward.
        Element-wise work (norms, gates, activations, convolutions) is not counted. This is
        the "model FLOPs" of model-FLOPs utilization, not a measurement.
        """
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
            raise ValueError(f"seq_len must be a positive integer, got {seq_len!r}")
        dense = self.num_parameters(exclude_embeddings=True)
        if self.head is None:
            dense += self.vocab_size * self.dim  # the tied head still multiplies every token
        flops = 6.0 * dense
        for block in self.backbone.blocks:
            flops += block.mixer.flops_per_token(seq_len)
        return flops

    # ---------------------------------------------------------------------------- save/load
    def save(self, directory: str | Path, tokenizer=None) -> Path:
        """Write `model.safetensors` + `lm_config.json` (+ the tokenizer's files) into
        `directory`, each file atomically; see `titans_seq.domains.lm.io`."""
        from .io import save_lm

        return save_lm(self, directory, tokenizer=tokenizer)

    @classmethod
    def load(
        cls,
        directory: str | Path,
        map_location: str | torch.device = "cpu",
        allow_unverified: bool = False,
    ) -> TitansLM:
        """A model saved by `save`, or the model of a training run of the `lm` task (the run
        folder, its `checkpoints/` folder or one `step_*` checkpoint); see
        `titans_seq.domains.lm.io`. allow_unverified: load a saved folder without a
        manifest, trusting its files."""
        from .io import read_model

        model, _ = read_model(directory, cls, map_location, allow_unverified=allow_unverified)
        return model

    def extra_repr(self) -> str:
        return (
            f"vocab_size={self.vocab_size}, dim={self.dim}, "
            f"tie_embeddings={self._config['tie_embeddings']}"
        )


def load_lm(
    directory: str | Path,
    map_location: str | torch.device = "cpu",
    allow_unverified: bool = False,
) -> TitansLM:
    """A `TitansLM` from a directory written by `TitansLM.save` or from an `lm` training run
    (its folder, its `checkpoints/` folder or one `step_*` checkpoint)."""
    return TitansLM.load(directory, map_location, allow_unverified)


def load_lm_and_tokenizer(
    directory: str | Path,
    map_location: str | torch.device = "cpu",
    allow_unverified: bool = False,
):
    """(model, tokenizer) from a saved model directory or an `lm` training run; a model
    saved without a tokenizer gets the byte-level one. allow_unverified: load a saved
    folder without a manifest, trusting its files."""
    from .io import read_model

    return read_model(
        directory,
        TitansLM,
        map_location,
        with_tokenizer=True,
        allow_unverified=allow_unverified,
    )
