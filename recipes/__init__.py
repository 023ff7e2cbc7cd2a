"""Training recipes (YAML, shipped as package data) and their runners (`titans_seq.recipes`).

Built-in recipes are named by their path under this folder without `.yaml`
(`synthetic/associative_recall_lmm`); a unique file stem works too (`associative_recall_lmm`).
Files whose name starts with `_` are shared bases for `extends:` and are not listed.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from titans_seq.errors import did_you_mean


def recipes_root() -> Path:
    """The folder holding the built-in recipes (inside the installed package)."""
    return Path(str(resources.files(__name__)))


def list_recipes() -> list[str]:
    """Names of the built-in recipes, sorted."""
    root = recipes_root()
    return sorted(
        p.relative_to(root).with_suffix("").as_posix()
        for p in root.rglob("*.yaml")
        if not p.name.startswith("_")
    )


def builtin_recipe_path(name: str) -> Path:
    """Path of a built-in recipe from its name (see the module docstring)."""
    root = recipes_root()
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    candidate = root / f"{stem}.yaml"
    if candidate.is_file():
        return candidate
    matches = [n for n in list_recipes() if n.rsplit("/", 1)[-1] == stem]
    if len(matches) == 1:
        return root / f"{matches[0]}.yaml"
    from titans_seq.training.config import ConfigError

    if len(matches) > 1:
        raise ConfigError(f"recipe name {name!r} is ambiguous: {', '.join(matches)}")
    known = list_recipes()
    raise ConfigError(
        f"recipe {name!r} is neither an existing file nor a built-in recipe"
        f"{did_you_mean(stem, known)}; built-in: {', '.join(known) or '(none)'}"
    )
