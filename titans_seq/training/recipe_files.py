"""Recipe files: YAML with `extends:` chains, built-in recipe names and dotted overrides.

A recipe argument is a path, or the name of a recipe shipped by an installed package (the
`titans_seq.recipe_dirs` entry-point group; `titans_seq.recipes` ships the built-in ones).
"""

from __future__ import annotations

import copy
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from ..errors import ConfigError, did_you_mean

RECIPE_DIRS_GROUP = "titans_seq.recipe_dirs"


def recipe_dirs() -> list[Path]:
    """Folders of the installed recipe collections, in entry-point name order."""
    points = sorted(metadata.entry_points(group=RECIPE_DIRS_GROUP), key=lambda ep: ep.name)
    return [Path(str(ep.load()())) for ep in points]


def list_recipes() -> list[str]:
    """Names of the installed recipes (path under their folder without `.yaml`), sorted.
    Files whose name starts with `_` are shared bases for `extends:` and are not listed."""
    names = set()
    for root in recipe_dirs():
        names.update(
            p.relative_to(root).with_suffix("").as_posix()
            for p in root.rglob("*.yaml")
            if not p.name.startswith("_")
        )
    return sorted(names)


def builtin_recipe_path(name: str) -> Path:
    """Path of an installed recipe from its name (`synthetic/associative_recall_lmm`) or its
    unique file stem (`associative_recall_lmm`)."""
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    roots = recipe_dirs()
    for root in roots:
        candidate = root / f"{stem}.yaml"
        if candidate.is_file():
            return candidate
    matches = [
        (root, n)
        for root in roots
        for n in sorted(
            p.relative_to(root).with_suffix("").as_posix()
            for p in root.rglob("*.yaml")
            if not p.name.startswith("_")
        )
        if n.rsplit("/", 1)[-1] == stem
    ]
    if len(matches) == 1:
        root, match = matches[0]
        return root / f"{match}.yaml"
    if len(matches) > 1:
        raise ConfigError(f"recipe name {name!r} is ambiguous: {', '.join(n for _, n in matches)}")
    known = list_recipes()
    raise ConfigError(
        f"recipe {name!r} is neither an existing file nor a built-in recipe"
        f"{did_you_mean(stem, known)}; built-in: {', '.join(known) or '(none)'}"
    )


def read_recipe(recipe: str | Path) -> dict[str, Any]:
    """Raw dict of a recipe file (path or built-in name), with `extends:` chains merged.

    `extends: other.yaml` (relative to the recipe's folder, or a built-in recipe name) loads
    that recipe first and deep-merges this one over it, so variants only state what differs.
    """
    path = resolve_recipe_path(recipe)
    return _read_with_extends(path, seen=())


def resolve_recipe_path(recipe: str | Path) -> Path:
    """A recipe argument is an existing path, else a built-in name (`titans-seq recipes`)."""
    path = Path(recipe)
    if path.is_file():
        return path
    return builtin_recipe_path(str(recipe))


def _read_with_extends(path: Path, seen: tuple[Path, ...]) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(str(p) for p in (*seen, path))
        raise ConfigError(f"recipe `extends` chain loops: {chain}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"recipe {path} is not valid YAML: {err}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {path} must be a mapping of sections, got {type(data).__name__}")
    base_ref = data.pop("extends", None)
    if base_ref is None:
        data.setdefault("name", _default_name(path))
        return data
    base_path = path.parent / base_ref
    if not base_path.is_file():
        base_path = resolve_recipe_path(base_ref)
    merged = deep_merge(_read_with_extends(base_path, (*seen, path)), data)
    merged["name"] = data.get("name", _default_name(path))
    return merged


def _default_name(path: Path) -> str:
    """Installed recipes are named by their path under their folder (e.g. synthetic/tiny)."""
    for root in recipe_dirs():
        try:
            return path.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
        except ValueError:
            continue
    return path.stem


def deep_merge(base: dict, update: dict) -> dict:
    """`update` over `base`, recursing into mappings present in both; inputs are not modified.

    An empty mapping in `update` replaces the inherited one instead of merging into it, so a
    variant can clear options it does not want (`mixer_options: {}` after a base that set
    `chunk_size` for the memory), which merging could never express.
    """
    out = copy.deepcopy(base)
    for key, value in update.items():
        if isinstance(value, dict) and value and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """`"optim.lr=3e-4"` -> `("optim.lr", 3e-4)`; the value is read as YAML (lists, null...)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {text!r} must look like section.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def apply_overrides(raw: dict, overrides: list[str] | dict[str, Any]) -> dict:
    """Set dotted keys in a raw recipe dict (a copy is returned)."""
    out = copy.deepcopy(raw)
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides)
    for key, value in items:
        parts = key.split(".")
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                prefix = ".".join(parts[: depth + 1])
                raise ConfigError(f"cannot set {key!r}: {prefix!r} is a value, not a section")
            node = child
        node[parts[-1]] = value
    return out
