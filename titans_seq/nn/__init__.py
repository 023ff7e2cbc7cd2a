"""Small reusable layers shared by mixers and heads."""

from .conv import CausalDepthwiseConv1d
from .mlp import SwiGLU
from .norm import RMSNorm
from .rotary import RotaryEmbedding, apply_rotary

__all__ = ["CausalDepthwiseConv1d", "RMSNorm", "RotaryEmbedding", "SwiGLU", "apply_rotary"]
