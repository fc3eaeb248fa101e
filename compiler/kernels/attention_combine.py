"""Split-K attention's combine step (flash-decoding).

When an item's keys are split over cores, each split ends with its unnormalized output
``acc_i`` [M, Dv], row max ``m_i`` and row sum ``l_i`` (f32) in a DRAM scratch tensor
[items, splits, M, Dv + 2] (``acc_i`` then the two statistics as columns); one core per
item then loads the item's splits at once and computes

    m = max_i m_i;   w_i = exp(m_i - m);   O = sum_i w_i acc_i / sum_i w_i l_i

on the vector engine and stores ``O`` head by head. The DRAM dependency (the stores of
other cores before this load) is what orders it.
"""

from __future__ import annotations

from dataclasses import dataclass

from archsim.config.names import vpu_engine
from compiler.emit import DramView
from compiler.ir.dtypes import DType
from compiler.ir.operands import SramRef
from compiler.ir.ops import Binary, BinaryKind, Load, Reduce, ReduceKind, Store, Unary, \
    UnaryKind
from compiler.kernels.attention_layout import head_segments, store_rows
from compiler.kernels.common import Context, TileSteps, pipeline, unravel
from compiler.kernels.vector import sub

F32 = DType.f32


def combine_shapes(splits: int, rows: int, dv: int, dtype: DType
                   ) -> dict[str, tuple[tuple[int, ...], DType]]:
    """The combine step's buffers (per set)."""
    return {"parts": ((splits, rows, dv + 2), F32), "w": ((splits, rows, 1), F32),
            "wl": ((splits, rows, 1), F32), "wacc": ((splits, rows, dv), F32),
            "mx": ((1, rows, 1), F32), "lsum": ((1, rows, 1), F32),
            "sum": ((1, rows, dv), F32), "out": ((rows, dv), dtype)}


def combine_bytes(splits: int, rows: int, dv: int, dtype: DType) -> int:
    return sum(_numel(shape) * dt.itemsize
               for shape, dt in combine_shapes(splits, rows, dv, dtype).values())


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for x in shape:
        n *= x
    return n


@dataclass(frozen=True)
class Partials:
    """The DRAM scratch tensor of the splits' partial results."""

    name: str
    shape: tuple[int, int, int, int]

    @staticmethod
    def declare(ctx: Context, node, items: int, splits: int, rows: int, dv: int
                ) -> "Partials":
        name = f"{ctx.view(node.out).tensor}_partials"
        shape = (items, splits, rows, dv + 2)
        ctx.em.tensor(name, shape, F32, "temp")
        return Partials(name, shape)

    def _move(self, ctx: Context, core: int, box, buf: SramRef, store: bool,
              source: str) -> None:
        view = DramView(self.name, self.shape, self.shape, F32)
        for ref, offset in ctx.em.dram_pieces(view, box):
            piece = sub(buf, ref.shape, offset)
            op = Store(piece, ref) if store else Load(ref, piece)
            ctx.em.emit(ctx.em.dma(core, "store" if store else "load"), op, source)

    def store(self, ctx: Context, core: int, unit: tuple[int, int], acc: SramRef,
              m: SramRef, l_sum: SramRef, source: str) -> None:
        """A split's ``acc`` [M, Dv], ``m`` and ``l`` ([1, M] rows, stored as columns)."""
        item, split = unit
        rows, dv = self.shape[2], self.shape[3] - 2
        lead = ((item, item + 1), (split, split + 1), (0, rows))
        self._move(ctx, core, lead + ((0, dv),), acc, True, source)
        self._move(ctx, core, lead + ((dv, dv + 1),), m, True, source)
        self._move(ctx, core, lead + ((dv + 1, dv + 2),), l_sum, True, source)


def lower_combines(ctx: Context, node, partials: Partials, plan,
                   bufs: list[dict[str, list[SramRef]]], kv_shape: tuple[int, ...]) -> None:
    """One combine step per item, on core ``item % cores``, pipelined over the cores'
    buffer sets; emitted after all splits, so each load depends on the stores it reads."""
    cores = len(bufs)
    per_core: list[list[TileSteps]] = [[] for _ in range(cores)]
    counts = [0] * cores
    for item in range(plan.items):
        core = item % cores
        cset = counts[core] % plan.sets
        counts[core] += 1
        step = _Combine(ctx, node, partials, plan, core, {k: v[cset] for k, v in
                                                          bufs[core].items()},
                        item, unravel(item, kv_shape))
        per_core[core].append(TileSteps(step.load, step.compute, step.store))
    pipeline(per_core, plan.sets - 1)


class _Combine:
    def __init__(self, ctx: Context, node, partials: Partials, plan, core: int,
                 bufs: dict[str, SramRef], item: int, kv_index: tuple[int, ...]) -> None:
        self.ctx, self.node, self.partials, self.plan = ctx, node, partials, plan
        self.core, self.bufs, self.item, self.kv_index = core, bufs, item, kv_index
        self.source = node.source
        _, self.splits, self.rows, width = partials.shape
        self.dv = width - 2

    def load(self) -> None:
        box = ((self.item, self.item + 1), (0, self.splits), (0, self.rows),
               (0, self.dv + 2))
        self.partials._move(self.ctx, self.core, box, self.bufs["parts"], False,
                            self.source)

    def _column(self, first: int, width: int) -> SramRef:
        """Columns ``first...`` of the loaded [splits, M, Dv + 2] partials."""
        parts = self.bufs["parts"]
        row = self.dv + 2
        return SramRef(parts.space, parts.offset + first * 4, (self.splits, self.rows, width),
                       F32, (self.rows * row, row, 1))

    def compute(self) -> None:
        emit = self.ctx.em.emit
        vpu = vpu_engine(self.core)
        b, src = self.bufs, self.source
        m_col, l_col, acc = self._column(self.dv, 1), self._column(self.dv + 1, 1), \
            self._column(0, self.dv)
        emit(vpu, Reduce(ReduceKind.max, m_col, b["mx"], 0), src)
        emit(vpu, Binary(BinaryKind.sub, m_col, b["mx"], b["w"]), src)
        emit(vpu, Unary(UnaryKind.exp, b["w"], b["w"]), src)
        emit(vpu, Binary(BinaryKind.mul, b["w"], l_col, b["wl"]), src)
        emit(vpu, Reduce(ReduceKind.sum, b["wl"], b["lsum"], 0), src)
        emit(vpu, Binary(BinaryKind.mul, acc, b["w"], b["wacc"]), src)
        emit(vpu, Reduce(ReduceKind.sum, b["wacc"], b["sum"], 0), src)
        emit(vpu, Binary(BinaryKind.div, b["sum"], b["lsum"], b["sum"]), src)

    def store(self) -> None:
        sq = self.rows // self.plan.group
        result = sub(self.bufs["sum"], (self.rows, self.dv))
        store_rows(self.ctx, self.node, self.core, result, self.bufs["out"],
                   head_segments(self.kv_index, self.plan.group, sq), sq, self.source)
