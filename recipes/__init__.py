"""The built-in training recipes (YAML, shipped as package data).

Recipes are named by their path under this folder without `.yaml`
(`synthetic/associative_recall_lmm`); a unique file stem works too (`associative_recall_lmm`).
Files whose name starts with `_` are shared bases for `extends:` and are not listed. The
folder is registered in the `titans_seq.recipe_dirs` entry-point group (pyproject.toml), as
any installed package can register its own; `titans_seq.training.recipe_files` finds them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def recipes_root() -> Path:
    """The folder holding the built-in recipes (inside the installed package)."""
    return Path(str(resources.files(__name__)))
