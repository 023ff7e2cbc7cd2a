"""Causal attention over [persistent prefix ‖ cached past ‖ new tokens] at stream positions.

from titans_seq.attention import causal_attention
y = causal_attention(q, k, v, window=128, position=state_position)
"""

from .functional import BACKENDS, causal_attention, masked_attention, resolve_backend
from .masks import attention_mask, first_visible_position, is_plain_causal, is_visible
from .reference import reference_attention

__all__ = [
    "BACKENDS",
    "attention_mask",
    "causal_attention",
    "first_visible_position",
    "is_plain_causal",
    "is_visible",
    "masked_attention",
    "reference_attention",
    "resolve_backend",
]
