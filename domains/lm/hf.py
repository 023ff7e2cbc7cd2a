"""`TitansLM` as a Hugging Face `transformers` model: config class, safetensors checkpoints,
`generate` with the memory state as its cache, and the Auto classes.

    from titans_seq.domains.lm.hf import TitansForCausalLM
    hf = TitansForCausalLM.from_titans(model)          # wrap a trained TitansLM (shares weights)
    hf.save_pretrained("out/")          # config.json + model.safetensors + the Auto classes' code
    hf = AutoModelForCausalLM.from_pretrained("out/", trust_remote_code=True)  # no import first
    hf.generate(input_ids, max_new_tokens=50, do_sample=False)

The transformers model composes a `TitansLM` (`hf.model`): weights, forward and state are
the library's own, so outputs equal `TitansLM`'s. The per-layer memory / attention state of
the stream is the generation cache: the prompt is read in one call, then one token per step.
Prompts in one batch must have the same length (no padding): a recurrent memory would
absorb the padding tokens. Needs the `hf` extra (`transformers`).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

try:
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        GenerationMixin,
        PretrainedConfig,
        PreTrainedModel,
    )
    from transformers.utils import ModelOutput
except ImportError as error:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the Hugging Face model needs transformers: pip install 'titans-seq[hf]'"
    ) from error

from titans_seq.training.checkpoint import CheckpointError, atomic_write_text

from .hf_tokenizer import TitansByteTokenizer
from .io import FORMAT_VERSION, config_of_version
from .model import TitansLM

MODEL_TYPE = "titans-seq-lm"
# a saved folder names its classes in config.json's auto_map and carries a two-line module
# that imports them from the installed package, so that transformers' Auto classes load it
# without an import of this module (trust_remote_code=True, as for any architecture that
# transformers does not ship)
AUTO_MODULE = "titans_seq_hf"
AUTO_MAP = {
    "AutoConfig": f"{AUTO_MODULE}.TitansLMConfig",
    "AutoModelForCausalLM": f"{AUTO_MODULE}.TitansForCausalLM",
}
AUTO_MODULE_SOURCE = (
    '"""titans-seq\'s transformers classes, from the installed package '
    "(pip install 'titans-seq[hf]')." + '"""\n\n'
    "from titans_seq.domains.lm.hf import TitansForCausalLM, TitansLMConfig  # noqa: F401\n"
)
# the config's fields are TitansLM's constructor arguments, with TitansLM's defaults; a
# transformers config must be constructible without arguments, so vocab_size (required by
# TitansLM) defaults to the byte-level vocabulary
LM_DEFAULTS = {
    name: parameter.default
    for name, parameter in inspect.signature(TitansLM.__init__).parameters.items()
    if name != "self"
}
LM_DEFAULTS["vocab_size"] = 256


class TitansLMConfig(PretrainedConfig):
    """The `TitansLM` constructor arguments as a transformers config (`config.json`).

    `titans_format_version` is the titans-seq LM format whose memory defaults the model was
    built under (`io.FORMAT_VERSION`; a `config.json` written before it was recorded is read
    as version 2), so a saved folder keeps the defaults it was trained with."""

    model_type = MODEL_TYPE

    def __init__(self, titans_format_version: int = FORMAT_VERSION, **kwargs):
        self.titans_format_version = titans_format_version
        for name, default in LM_DEFAULTS.items():
            setattr(self, name, kwargs.pop(name, copy.deepcopy(default)))
        # the tied head has no separate tensor (TitansLM shares it itself): nothing to tie
        kwargs["tie_word_embeddings"] = False
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(**kwargs)

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        # a saved config.json without the version predates it: LM format 2's defaults
        return super().from_dict({"titans_format_version": 2, **config_dict}, **kwargs)

    def to_diff_dict(self) -> dict:
        # always written, also when it equals the default, so that it outlives a change of it
        return {**super().to_diff_dict(), "titans_format_version": self.titans_format_version}

    def lm_config(self) -> dict:
        """TitansLM's constructor arguments, with the memory defaults of the model's format."""
        config = {name: getattr(self, name) for name in LM_DEFAULTS}
        return config_of_version(config, self.titans_format_version)


@dataclass
class TitansCausalLMOutput(ModelOutput):
    """loss (with labels), logits [B, T, V], memory_state (one state per layer)."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    memory_state: list | None = None


class TitansForCausalLM(PreTrainedModel, GenerationMixin):
    """A `TitansLM` behind transformers' `PreTrainedModel` and `GenerationMixin`."""

    config_class = TitansLMConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _is_stateful = True  # no assisted generation: a recurrent state cannot be rolled back

    def __init__(self, config: TitansLMConfig):
        super().__init__(config)
        self.model = TitansLM.from_config(config.lm_config())
        self.post_init()

    @classmethod
    def from_titans(cls, model: TitansLM) -> TitansForCausalLM:
        """Wrap a trained TitansLM; the wrapper shares (does not copy) its weights."""
        hf = cls(TitansLMConfig(**model.config))
        hf.model = model
        return hf

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' from_pretrained, refusing a checkpoint whose tensors are not exactly
        those of the model its config.json describes (transformers would start the missing
        ones afresh and only print a report): a config.json edited to another mixer, width
        or depth, or weights from another model."""
        with_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *args, output_loading_info=True, **kwargs
        )
        problems = {
            kind: sorted(str(k) for k in info.get(key) or ())
            for key, kind in (
                ("missing_keys", "missing from the weights"),
                ("unexpected_keys", "in the weights but not in the model"),
                ("mismatched_keys", "of another shape"),
            )
        }
        problems = {kind: keys for kind, keys in problems.items() if keys}
        if problems:
            described = "; ".join(
                f"{len(keys)} tensor(s) {kind}, e.g. {keys[0]}" for kind, keys in problems.items()
            )
            raise CheckpointError(
                f"{pretrained_model_name_or_path}: the weights do not fit the model that "
                f"config.json describes ({described}); config.json was edited, or the weights "
                "come from another model"
            )
        return (model, info) if with_info else model

    def save_pretrained(self, save_directory, *args, **kwargs):
        """transformers' save_pretrained, plus the module that config.json's auto_map names."""
        super().save_pretrained(save_directory, *args, **kwargs)
        atomic_write_text(Path(save_directory) / f"{AUTO_MODULE}.py", AUTO_MODULE_SOURCE)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the cache is the memory state, not attention keys and values

    def _init_weights(self, module):
        pass  # TitansLM initialises itself; loaded checkpoints overwrite every tensor

    def get_input_embeddings(self):
        return self.model.embedding

    def set_input_embeddings(self, value):
        self.model.embedding = value

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        memory_state: list | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TitansCausalLMOutput:
        """input_ids [B, T] -> logits [B, T, V]; `memory_state` continues a stream; `labels`
        [B, T] give the next-token cross-entropy (shifted inside, -100 ignored)."""
        if attention_mask is not None and not bool(attention_mask.all()):
            raise ValueError(
                "TitansForCausalLM takes no padding: the recurrent memory would read the padding "
                "tokens. Batch prompts of the same length, or run them one at a time"
            )
        logits, state = self.model(input_ids, memory_state)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(
                logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
            )
        return TitansCausalLMOutput(loss=loss, logits=logits, memory_state=state)

    def prepare_inputs_for_generation(
        self, input_ids, memory_state=None, attention_mask=None, **kwargs
    ):
        # with a state, only the newest token is new to the model; the state holds the rest
        if memory_state is not None:
            return {"input_ids": input_ids[:, -1:], "memory_state": memory_state}
        return {"input_ids": input_ids, "attention_mask": attention_mask}

    def _update_model_kwargs_for_generation(
        self, outputs, model_kwargs, is_encoder_decoder=False, num_new_tokens=1
    ):
        model_kwargs = super()._update_model_kwargs_for_generation(
            outputs, model_kwargs, is_encoder_decoder, num_new_tokens
        )
        model_kwargs["memory_state"] = outputs.memory_state
        return model_kwargs

    def _beam_search(self, *args, **kwargs):
        # transformers reorders only the caches it knows by name: beams would silently carry
        # the wrong memory state
        raise ValueError(
            "TitansForCausalLM does not support beam search (num_beams > 1): the memory state "
            "cannot be reordered between beams; use greedy decoding or sampling"
        )


AutoConfig.register(MODEL_TYPE, TitansLMConfig, exist_ok=True)
AutoModelForCausalLM.register(TitansLMConfig, TitansForCausalLM, exist_ok=True)
# byte level for the model type; a folder's tokenizer_config.json names its class in any case
AutoTokenizer.register(TitansLMConfig, slow_tokenizer_class=TitansByteTokenizer, exist_ok=True)
