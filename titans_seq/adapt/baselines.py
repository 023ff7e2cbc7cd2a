"""The baselines SVF is measured against: LoRA through `peft` (the maintained library, not
a copy of it) and full fine-tuning, on the same targets, data and budget."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .targets import match_parameters, select_targets


def lora_module_names(model: nn.Module, targets: Sequence[str] | None = None) -> list[str]:
    """The `nn.Linear` modules among SVF's targets. LoRA wraps a layer's forward, so the
    memory's initial weights W_0 (plain parameters) and layers whose weight the model reads
    directly (flagged `weight_read_directly`: the memory's gate projection, computed in
    float32) are not among them; SVF, which reparametrizes the weight itself, adapts both."""
    linear = {
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and not getattr(module, "weight_read_directly", False)
    }
    names = [t.module_name for t in select_targets(model, targets) if t.module_name in linear]
    if not names:
        raise ValueError("no nn.Linear among the targets: LoRA has nothing to adapt")
    return names


def add_lora(
    model: nn.Module,
    targets: Sequence[str] | None = None,
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.0,
    also_train: Sequence[str] = (),
) -> nn.Module:
    """Inject LoRA adapters (peft) into `model` in place and freeze everything else.

    targets: as for SVF (patterns over target names; the default set of mixers and MLPs).
    also_train: patterns over parameter names trained in full as well (e.g. a new head).
    Returns the same model, whose trainable parameters are the adapters (and also_train).
    """
    try:
        import peft
    except ImportError:
        raise ImportError(
            "LoRA needs peft: pip install 'titans-seq[adapt]' (or pip install peft)"
        ) from None
    config = peft.LoraConfig(
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=lora_module_names(model, targets),
    )
    peft.inject_adapter_in_model(config, model)
    for name, param in model.named_parameters():
        param.requires_grad_("lora_" in name)
    unfreeze(model, also_train)
    return model


def lora_state_dict(model: nn.Module) -> dict:
    """The adapter tensors of a model `add_lora` adapted (peft's own naming)."""
    import peft

    return peft.get_peft_model_state_dict(model)


def full_finetuning(model: nn.Module) -> nn.Module:
    """Every parameter trainable (the upper bound on what adaptation can buy)."""
    return model.requires_grad_(True)


def unfreeze(model: nn.Module, patterns: Sequence[str]) -> list[str]:
    """Make the parameters whose names match `patterns` trainable; returns their names."""
    chosen = match_parameters(model, patterns)
    for name in chosen:
        model.get_parameter(name).requires_grad_(True)
    return chosen


def count_trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
