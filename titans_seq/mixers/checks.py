"""Option checks of the mixers (the generic ones live in `titans_seq.checks`)."""

from __future__ import annotations

from ..checks import check_int
from ..errors import ConfigError


def resolve_head_dim(dim: int, heads: int, head_dim: int | None) -> int:
    """The per-head width d: `head_dim`, or dim // heads when None (heads must divide dim)."""
    check_int("heads", heads, 1)
    if head_dim is None:
        if dim % heads:
            raise ConfigError(
                f"heads={heads} does not divide dim={dim}; pass head_dim explicitly or choose "
                "heads dividing dim"
            )
        return dim // heads
    check_int("head_dim", head_dim, 1)
    return head_dim
