"""The ``torch.compile`` backend named ``archsim`` (entry point ``torch_dynamo_backends``).

Placeholder until ``compiler.compile_graph`` exists: the captured FX graph runs
eagerly, so npu inputs go through the npu kernels and host fallback op by op (and are
recorded on the device timeline); CPU inputs run on CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def archsim_backend(gm: torch.fx.GraphModule,
                    example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """Return a callable running ``gm``; for now its own eager ``forward``."""
    return gm.forward


__all__ = ["archsim_backend"]
