"""Search spaces declared in YAML (a recipe's `search_space:` section or a separate file).

    search_space:
      optim.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      optim.warmup_steps: {type: int, low: 0, high: 200, step: 50}
      model.mixer: {type: categorical, choices: [lmm, mag, swa]}
      model.dim: [64, 128]            # a plain list is shorthand for a categorical

Keys are the dotted recipe keys that `titans-seq train` accepts as overrides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from titans_seq.training.config import ConfigError, apply_overrides, from_dict

ALLOWED = {
    "float": {"type", "low", "high", "log", "step"},
    "int": {"type", "low", "high", "log", "step"},
    "categorical": {"type", "choices"},
}


@dataclasses.dataclass(frozen=True)
class Param:
    key: str
    kind: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        if self.kind == "float":
            return trial.suggest_float(self.key, self.low, self.high, log=self.log, step=self.step)
        if self.kind == "int":
            return trial.suggest_int(
                self.key, int(self.low), int(self.high), log=self.log, step=int(self.step or 1)
            )
        return trial.suggest_categorical(self.key, list(self.choices))

    def example(self) -> Any:
        """A value inside the space (used to check that the key is a valid override)."""
        if self.kind == "categorical":
            return self.choices[0]
        return int(self.low) if self.kind == "int" else float(self.low)


def parse_search_space(spec: dict[str, Any]) -> list[Param]:
    """Validate a search-space mapping; errors name the offending key."""
    if not isinstance(spec, dict) or not spec:
        raise ConfigError("search_space must be a non-empty mapping of dotted keys to ranges")
    params = []
    for key, entry in spec.items():
        where = f"search_space.{key}"
        if isinstance(entry, list):
            entry = {"type": "categorical", "choices": entry}
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping with `type:` or a list of choices")
        kind = entry.get("type")
        if kind not in ALLOWED:
            raise ConfigError(f"{where}.type must be one of {sorted(ALLOWED)}, got {kind!r}")
        unknown = sorted(set(entry) - ALLOWED[kind])
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {unknown} for type {kind} "
                f"(allowed: {sorted(ALLOWED[kind])})"
            )
        if kind == "categorical":
            choices = entry.get("choices")
            if not isinstance(choices, list) or not choices:
                raise ConfigError(f"{where}.choices must be a non-empty list")
            for choice in choices:
                if not (choice is None or isinstance(choice, (bool, int, float, str))):
                    raise ConfigError(
                        f"{where}.choices: Optuna stores only null/bool/int/float/str, got "
                        f"{choice!r}"
                    )
            params.append(Param(key, kind, choices=tuple(choices)))
            continue
        low, high = _number(entry, "low", where), _number(entry, "high", where)
        if not low < high:
            raise ConfigError(f"{where}: low ({low}) must be below high ({high})")
        log = entry.get("log", False)
        if not isinstance(log, bool):
            raise ConfigError(f"{where}.log must be true or false, got {log!r}")
        if log and low <= 0:
            raise ConfigError(f"{where}: a log scale needs low > 0, got {low}")
        step = _number(entry, "step", where) if "step" in entry else None
        if step is not None and log:
            raise ConfigError(f"{where}: step and log cannot be combined")
        if kind == "int" and any(v != int(v) for v in (low, high, step or 1)):
            raise ConfigError(f"{where}: low/high/step of an int range must be integers")
        params.append(Param(key, kind, low=low, high=high, log=log, step=step))
    return params


def _number(entry: dict, field: str, where: str) -> float:
    value = entry.get(field)
    if isinstance(value, str):
        try:
            value = float(value)  # PyYAML reads 1e-4 (no dot) as a string
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{field} must be a number, got {value!r}")
    return value


def load_search_space(raw_recipe: dict[str, Any], path: str | Path | None) -> list[Param]:
    """The search space of a tuning run: from `path` if given, else the recipe's section.

    Each key is checked against the recipe by validating it with a value from the space, so
    a misspelt key fails before the first trial rather than in every trial.
    """
    if path is not None:
        data = yaml.safe_load(Path(path).read_text())
        if isinstance(data, dict) and "search_space" in data:
            data = data["search_space"]
        spec, origin = data, str(path)
    else:
        spec, origin = raw_recipe.get("search_space"), "the recipe"
    if not spec:
        raise ConfigError(
            f"no search space: add a `search_space:` section to {origin} or pass --search-space"
        )
    params = parse_search_space(spec)
    base = {k: v for k, v in raw_recipe.items() if k != "search_space"}
    for param in params:
        try:
            from_dict(apply_overrides(base, {param.key: param.example()}))
        except ConfigError as err:
            raise ConfigError(
                f"search_space.{param.key} is not a valid recipe key: {err}"
            ) from None
    return params
