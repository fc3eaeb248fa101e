"""Per-op lowerings, one module per family; importing this package fills the table."""

from compiler.lowerings import (  # noqa: F401  (imported for their registrations)
    attention,
    bessel,
    composite,
    conv,
    cumulative,
    elementwise,
    indexing,
    losses,
    matmul,
    movement,
    norm,
    norms,
    reorder,
    reduce_more,
    reduction,
    special,
)
from compiler.lowerings.registry import LOWERINGS, lowering

__all__ = ["LOWERINGS", "lowering"]
