"""Per-op lowerings, one module per family; importing this package fills the table."""

from compiler.lowerings import (  # noqa: F401  (imported for their registrations)
    attention,
    batch_norm,
    bessel,
    composite,
    conv,
    cumulative,
    elementwise,
    extras,
    grouped_mm,
    indexing,
    int4,
    losses,
    matmul,
    movement,
    norm,
    norms,
    padding,
    pooling,
    reduce_more,
    reduction,
    reorder,
    sampling,
    scatter,
    search,
    sorting,
    special,
    upsample,
)
from compiler.lowerings.registry import LOWERINGS, NAMED_LOWERINGS, lowering

__all__ = ["LOWERINGS", "NAMED_LOWERINGS", "lowering"]
