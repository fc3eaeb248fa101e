"""Grouped matrix multiplication of mixture-of-experts layers: transformers'
``grouped_mm_fallback(input, weight, offs)`` custom op (what its MoE experts export to
when ``torch._grouped_mm`` is not taken: f32 weights under torch.export), where rows of
``input`` [S, K] are sorted by expert and expert ``e`` owns rows
``offs[e-1] <= r < offs[e]``: ``out[r] = input[r] @ weight[e]`` ([E, K, N] weights), rows
past ``offs[-1]`` zero.

The lowering is static-shape and dense over experts: one batched matmul multiplies every
row by every expert's weights ([E, S, N]), then each row keeps its own expert's product
(a compare of the row numbers with the ``offs`` bounds computed at run time, a select)
and the experts are summed (one product per row, the rest exact zeros, so the numbers
are the per-expert ``mm`` of CPU). Each expert's weights are read once, but the matmul
FLOPs are E times the routed work and the report counts them as such: nothing here
pretends the work is sparse. A routed grouped matmul (megablox-style tiles whose
weight block is picked by an index computed at run time) needs a matmul kernel that
loads its weights through an indexed DMA, which the kernels do not have yet;
materializing gathered weights instead would write every picked weight matrix to DRAM.
"""

from __future__ import annotations

from compiler import graph as g
from compiler.graph import Value
from compiler.graph_builder import GraphBuilder
from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind
from compiler.lowerings.registry import lowering_named

MAX_DENSE_ELEMENTS = 1 << 31
"""Largest [experts, rows, columns] product the dense form builds; beyond it the op
stays on the host (visibly)."""


def _weights(weight: Value) -> tuple[Value, bool]:
    """The [E, K, N] weights as a matmul operand: a transposed [E, N, K] tensor (how
    transformers stores its experts, ``weight.transpose(-2, -1)``) is used as it is
    stored, with ``trans_b``, so no transposed copy is made."""
    producer = weight.producer
    if producer is not None and isinstance(producer.spec, g.Permute) and \
            producer.spec.perm == (0, 2, 1):
        return producer.inputs[0], True
    return weight, False


def _owned_rows(b: GraphBuilder, offs: Value, rows: int) -> Value:
    """[E, S, 1]: whether row ``r`` belongs to expert ``e`` (``offs[e-1] <= r < offs[e]``)."""
    experts = offs.shape[0]
    ends = b.view(b.cast(offs, DType.i64), (experts, 1, 1))
    if experts > 1:
        zero = b.splat(0, (1, 1, 1), DType.i64)
        earlier = b.slice(ends, 0, 0, experts - 1)
        starts = b.add(g.Cat(0), (zero, earlier), (experts, 1, 1), DType.i64, "cat")
    else:
        starts = b.splat(0, (1, 1, 1), DType.i64)
    row = b.arange(rows, (1, rows, 1))
    return b.binary(BinaryKind.logical_and, b.binary(BinaryKind.ge, row, starts),
                    b.binary(BinaryKind.lt, row, ends))


@lowering_named("transformers::grouped_mm_fallback")
def lower_grouped_mm(b: GraphBuilder, x: Value, weight: Value, offs: Value) -> Value:
    if len(x.shape) != 2 or len(weight.shape) != 3 or len(offs.shape) != 1 or \
            offs.shape[0] != weight.shape[0] or offs.dtype.is_float:
        raise NotImplementedError("grouped_mm needs input [S, K], weight [E, K, N], "
                                  "integer offs [E]")
    experts, _, cols = weight.shape
    rows = x.shape[0]
    if experts * rows * cols > MAX_DENSE_ELEMENTS:
        raise NotImplementedError("grouped_mm too large for the dense form")
    operand, transposed = _weights(weight)
    products = b.matmul(b.view(x, (1,) + x.shape), operand, trans_b=transposed)  # [E, S, N]
    kept = b.select(_owned_rows(b, offs, rows), products, 0.0)
    out = b.reduce(ReduceKind.sum, kept, (0,), keepdim=False)
    return b.cast(out, x.dtype)
