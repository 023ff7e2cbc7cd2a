"""Task name -> `Task` registry, so that domains plug into `titans-seq train` without edits here.

A recipe's `task:` is looked up, in order, among:
1. tasks registered in this process (`@register_task("name")`);
2. installed tasks: the `titans_seq.tasks` entry-point group (`name = "pkg.module:TaskClass"`),
   where titans-seq declares its own (pyproject.toml); they are imported on first use, so
   that `titans-seq recipes` does not import every domain;
3. an import path `"pkg.module:TaskClass"` written directly in the recipe.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib import metadata

from ...errors import ConfigError, did_you_mean
from .base import Task

_TASKS: dict[str, Task] = {}

ENTRY_POINT_GROUP = "titans_seq.tasks"


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: register a `Task` subclass under `name` (an instance is stored)."""

    def decorate(cls: type[Task]) -> type[Task]:
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"register_task({name!r}) expects a Task subclass, got {cls!r}")
        if name in _TASKS and type(_TASKS[name]) is not cls:
            raise ValueError(f"a task named {name!r} is already registered ({type(_TASKS[name])})")
        cls.name = name
        _TASKS[name] = cls()
        return cls

    return decorate


def list_tasks() -> list[str]:
    """Names usable as a recipe's `task:` (registered, built-in and installed plugins)."""
    names = set(_TASKS) | {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def get_task(name: str) -> Task:
    """The task instance for a recipe's `task:` value (see the module docstring)."""
    if name in _TASKS:
        return _TASKS[name]
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            loaded = ep.load()
            if name in _TASKS:  # the module registered it with @register_task on import
                return _TASKS[name]
            return _instantiate(loaded, name)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as err:
            raise ValueError(
                f"task {name!r}: cannot import {attr} from {module_name}: {err}"
            ) from None
        return _instantiate(obj, name)
    known = list_tasks()
    raise ConfigError(
        f"task: unknown task {name!r}{did_you_mean(name, known)}; available: {', '.join(known)}"
    )


def _instantiate(obj, name: str) -> Task:
    """Instantiate a plugin/import-path task once; later look-ups reuse the instance."""
    task = obj() if isinstance(obj, type) else obj
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r} resolves to {obj!r}, which is not a titans_seq Task")
    if not task.name:
        task.name = name
    _TASKS[name] = task
    return task
