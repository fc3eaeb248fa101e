"""Decode-shaped attention over an int8 or fp8 KV cache (``Attention.kv_scales``).

The cache moves at one byte an element and reaches the arrays as stored: a one-byte
operand is widened in an array's input path only as the stationary ``b`` of a float
matmul, so each array's K chunk arrives transposed by the DMA ([D, chunk], as the flash
kernel loads it) and the scores are computed as ``S = Q K^T`` [M, chunk]; with one
query row that is already the kernel's ``S^T`` layout, with more the vector engine
transposes each chunk. Each key's scale (one per token and head) multiplies its score
row, ``S^T * k_scale``, and its probability row before ``P V``, ``P^T * v_scale``, so V
is stationary as stored too: two [Tk, M] passes, never a dequantized [Tk, D] tile.
"""

from __future__ import annotations

from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Binary, BinaryKind, Cast, MatMul, Transpose
from compiler.kernels.attention_decode_step import DecodeStep
from compiler.kernels.attention_layout import stored_box
from compiler.kernels.matmul import load_transposed
from compiler.kernels.vector import load_box, sub

F32 = DType.f32


def quantized_shapes(tk: int, rows: int, d: int, dv: int, kv_dtype: DType,
                     scale_dtype: DType) -> dict[str, tuple[tuple[int, ...], DType]]:
    """A buffer set's cache tiles: K^T chunks and V as stored, each key's scales (as
    stored and in f32), and with several query rows the chunks' [M, chunk] scores."""
    shapes = {"kt": ((d, tk), kv_dtype), "vi": ((tk, dv), kv_dtype),
              "ks": ((tk, 1), scale_dtype), "vs": ((tk, 1), scale_dtype),
              "ksf": ((tk, 1), F32), "vsf": ((tk, 1), F32)}
    if rows > 1:
        shapes["sc"] = ((rows, tk), F32)
    return shapes


class QuantizedDecodeStep(DecodeStep):
    v_name = "vi"

    def _kt_chunk(self, c0: int, c1: int) -> SramRef:
        d = self.node.inputs[1].shape[-1]
        return sub(self.buf("kt", (d, self.nk)), (d, c1 - c0), d * c0)

    def load_kv(self, lead: tuple[tuple[int, int], ...]) -> None:
        ctx, node = self.ctx, self.node
        k, v = node.inputs[1:3]
        stored = node.spec.heads_after_seq
        d, dv = k.shape[-1], v.shape[-1]
        for _, c0, c1 in self.parts:  # each array's chunk transposed by the DMA
            keys = (self.keys[0] + c0, self.keys[0] + c1)
            load_transposed(ctx, k, lead + (keys, (0, d)), self._kt_chunk(c0, c1),
                            self.core, self.source)
        load_box(ctx, v, stored_box(lead + (self.keys, (0, dv)), stored[2]),
                 self.buf("vi", (self.nk, dv)), self.core, self.source, "load")
        for name, scale in (("k", node.inputs[-2]), ("v", node.inputs[-1])):
            load_box(ctx, scale, lead + (self.keys, (0, 1)), self.buf(f"{name}s", (self.nk, 1)),
                     self.core, self.source, "load")

    def issue_qk(self) -> None:
        """``S = Q K^T`` per chunk: into ``S^T`` directly for one query row, else into
        the chunk's [M, chunk] scores (transposed by :meth:`scale_scores`)."""
        if self.qk_issued:
            return
        self.qk_issued = True
        for name in ("k", "v"):
            self.vec(Cast(self.buf(f"{name}s", (self.nk, 1)),
                          self.buf(f"{name}sf", (self.nk, 1))))
        d, rows = self.node.inputs[0].shape[-1], self.plan.rows
        q = self.buf("q", (rows, d), True)
        target = "s" if rows == 1 else "sc"
        out = self.buf(target, (rows, self.nk))
        for mxu, c0, c1 in self.parts:
            self.ctx.em.emit(mxu, MatMul(q, self._kt_chunk(c0, c1),
                                         sub(out, (rows, c1 - c0), rows * c0)), self.source)

    def scale_scores(self, s: SramRef) -> None:
        rows = self.plan.rows
        if rows > 1:
            scores = self.buf("sc", (rows, self.nk))
            for _, c0, c1 in self.parts:
                self.vec(Transpose(sub(scores, (rows, c1 - c0), rows * c0),
                                   sub(s, (c1 - c0, rows), rows * c0), (1, 0)))
        self.vec(Binary(BinaryKind.mul, s, self.buf("ksf", (self.nk, 1)), s))
        super().scale_scores(s)

    def scale_probs(self, p: SramRef) -> None:
        self.vec(Binary(BinaryKind.mul, p, self.buf("vsf", (self.nk, 1)), p))
