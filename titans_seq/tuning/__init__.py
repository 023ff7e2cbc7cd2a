"""Hyper-parameter tuning of recipes with Optuna (`titans-seq tune`)."""

from .search_space import Param, load_search_space, parse_search_space
from .study import TuneResult, best_recipe, default_storage, tune

__all__ = [
    "Param",
    "TuneResult",
    "best_recipe",
    "default_storage",
    "load_search_space",
    "parse_search_space",
    "tune",
]
