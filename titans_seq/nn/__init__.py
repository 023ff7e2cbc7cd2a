"""Small reusable layers shared by mixers and heads."""

from .norm import RMSNorm

__all__ = ["RMSNorm"]
