"""Per-op lowerings, one module per family; importing this package fills the table."""

from compiler.lowerings import (  # noqa: F401  (imported for their registrations)
    attention,
    batch_norm,
    composite,
    conv,
    elementwise,
    extras,
    matmul,
    movement,
    norm,
    padding,
    pooling,
    reduction,
    sampling,
    scatter,
    search,
    sorting,
    upsample,
)
from compiler.lowerings.registry import LOWERINGS, lowering

__all__ = ["LOWERINGS", "lowering"]
