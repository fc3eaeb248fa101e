"""A matmul's or convolution's fused epilogue as one pass over its tile.

The arrays' results pop into vector registers and the epilogue's ops run there (the
TensorCore's VLIW bundle has matrix push and pop slots; the Cloud TPU guide: matmuls
fuse activations and biases on their output "at low overhead"). So an elementwise op
whose first input is the previous op's result is ``chained`` to it
(:data:`compiler.ir.ops.CHAINED_DOC`): it moves only its other inputs through the
scratchpad. A standalone vector kernel passes over the scratchpad once per op.
"""

from __future__ import annotations

from compiler import graph as g
from compiler.graph import Node, Value
from compiler.ir.ops import BinaryKind

_CHAINABLE = (g.Unary, g.Binary, g.Cast)
"""Graph ops whose result the next op of a pass can take in registers."""
_COMMUTATIVE = frozenset({BinaryKind.add, BinaryKind.mul, BinaryKind.max, BinaryKind.min})
"""Binary kinds whose operands a chained op may swap (exactly, in IEEE arithmetic)."""

STARTS_PASS = -1
"""``pass_value`` of an epilogue whose first op reads the accumulator (no cast before)."""


def _value_id(x: Value | float) -> int | None:
    return x.id if isinstance(x, Value) else None  # a Python scalar operand has none


def chain(node: Node, pass_value: int | None) -> tuple[list[Value | float], bool, int | None]:
    """``node``'s inputs (the value in registers first when the op commutes), whether it
    is chained, and the ``pass_value`` for the next op. ``pass_value`` is the id of the
    value the pass holds in registers, :data:`STARTS_PASS`, or None outside an epilogue."""
    inputs = list(node.inputs)
    if pass_value is None:
        return inputs, False, None
    spec = node.spec
    if isinstance(spec, g.Binary) and spec.kind in _COMMUTATIVE and \
            _value_id(inputs[1]) == pass_value:
        inputs = [inputs[1], inputs[0]]
    chained = _value_id(inputs[0]) == pass_value
    return inputs, chained, node.out.id if isinstance(spec, _CHAINABLE) else None
