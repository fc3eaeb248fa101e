"""A traced Triton launch to scheduled commands.

Program instance ``p`` runs on core ``p % cores``. Per program, in trace order: loads
and stores become DMA boxes (clipped at masked edges, the rest of the tile filled with
the load's ``other``), ``tl.dot`` matrix-engine work accumulating in place, the rest
vector work. Tiles live in the core's scratchpad from definition to last use
(:mod:`compiler.triton.alloc`); reshapes alias, broadcasts stay lazy (vector operands
broadcast), and a loaded tile used only transposed is loaded transposed by the DMA.
Ordering comes from the emitter's dependency analysis, as for every other kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from archsim.config.model import NpuConfig
from archsim.config.names import mxu_engine, vpu_engine
from archsim.errors import TritonError
from compiler.emit import Emitter
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Scalar, SramRef, sram_space
from compiler.ir.ops import (Binary, BinaryKind, Load, UnaryKind, VCopy)
from compiler.triton.addressing import Access, boxes
from compiler.triton.alloc import Block, NextFit
from compiler.triton.plan import ProgramPlan, plan_program
from compiler.triton.trace import Const, KernelTrace, Operand, ProgramTrace, TraceOp

BINARY_KINDS = {k.value: k for k in BinaryKind}
UNARY_KINDS = {k.value: k for k in UnaryKind}
COMPARISONS = frozenset({"lt", "le", "gt", "ge", "eq", "ne"})
LN2 = math.log(2.0)


def dense_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


@dataclass
class Lowering:
    """Emits one traced launch into ``em``; ``tensors`` maps argument names to DRAM
    tensor names. ``read``/``written`` collect the arguments the kernel touches."""

    trace: KernelTrace
    em: Emitter
    config: NpuConfig
    tensors: dict[str, str]
    source: str
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)
    written: set[str] = field(default_factory=set)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Argument name -> shape of its DRAM tensor, when that is not the argument's own
    (a graph stores a ``[2, 8, 64]`` value as the ``[16, 64]`` matmul it views; the
    kernel addresses elements, so any shape of the same storage will do)."""

    def run(self) -> None:
        cores = self.config.cores
        pads = [NextFit(self.config.core.scratchpad.size_bytes,
                        f"kernel {self.trace.name} on core {c}") for c in range(cores)]
        shapes = {p.name: self.shapes.get(p.name, p.shape) for p in self.trace.pointers}
        load = [0] * cores
        for program in self.trace.programs:
            core = min(range(cores), key=lambda c: (load[c], c))
            load[core] += _work(program)
            _ProgramLowering(self, program, core, pads[core], shapes).run()


class _ProgramLowering:
    def __init__(self, owner: Lowering, program: ProgramTrace, core: int, pad: NextFit,
                 shapes: dict[str, tuple[int, ...]]) -> None:
        self.o = owner
        self.program = program
        self.core = core
        self.pad = pad
        self.shapes = shapes
        self.space = sram_space(core)
        self.vpu = vpu_engine(core)
        self.refs: dict[int, SramRef] = {}
        self.logical: dict[int, tuple[int, ...]] = {}
        self.blocks: dict[int, Block] = {}
        self.plan: ProgramPlan = plan_program(program)
        self.op: TraceOp | None = None

    # -- errors, engines ---------------------------------------------------------------
    def refuse(self, construct: str) -> None:
        line = self.op.line if self.op else 0
        where = self.op.where if self.op and self.op.where else \
            f"kernel {self.o.trace.name} ({self.o.trace.filename}:{line})"
        raise TritonError(f"{where}: {construct} cannot be lowered to the NPU")

    def emit(self, engine: str, op: object) -> int:
        return self.o.em.emit(engine, op, self.o.source)

    def mxu(self) -> str:
        arrays = self.o.config.core.matrix.arrays
        return mxu_engine(self.core, self.o.em.next_rr(f"{self.core}.mxu", arrays))

    # -- tiles -------------------------------------------------------------------------
    def alloc(self, shape: tuple[int, ...], dtype: DType) -> SramRef:
        shape = shape or (1,)
        block = self.pad.alloc(math.prod(shape) * dtype.itemsize)
        return SramRef(self.space, block.offset, shape, dtype), block

    def define(self, vid: int, ref: SramRef, block: Block, shape: tuple[int, ...]) -> None:
        self.refs[vid] = ref
        self.logical[vid] = shape or (1,)
        self.blocks[vid] = block
        block.refs += 1

    def new(self, vid: int, shape: tuple[int, ...], dtype: DType) -> SramRef:
        ref, block = self.alloc(shape, dtype)
        self.define(vid, ref, block, shape)
        return ref

    def alias(self, vid: int, src: int, ref: SramRef, shape: tuple[int, ...]) -> None:
        self.define(vid, ref, self.blocks[src], shape)

    def release(self, vid: int) -> None:
        block = self.blocks.pop(vid)
        block.refs -= 1
        if block.refs == 0:
            self.pad.free(block)

    def dense(self, operand: Operand, dtype: DType | None = None) -> SramRef:
        """An operand as a tile of exactly its logical shape (broadcasts materialized)."""
        if isinstance(operand, Const):
            return self.const_tile(operand, dtype)
        ref, shape = self.refs[operand], self.logical[operand]
        if ref.shape == shape:
            return ref
        if math.prod(ref.shape) == math.prod(shape) and ref.strides is None:
            return SramRef(ref.space, ref.offset, shape, ref.dtype)
        out, block = self.alloc(shape, ref.dtype)
        self.emit(self.vpu, VCopy(ref, out))
        self.refs[operand] = out  # later uses read the materialized tile
        self.release(operand)
        self.define(operand, out, block, shape)
        return out

    def vector_operand(self, operand: Operand, dtype: DType) -> SramRef | Scalar:
        if isinstance(operand, Const):
            return Scalar(operand.value) if operand.uniform else self.const_tile(operand, dtype)
        return self.refs[operand]

    def const_tile(self, const: Const, dtype: DType | None = None) -> SramRef:
        dtype = dtype or const.dtype
        shape = tuple(const.array.shape) or (1,)
        ref, block = self.alloc(shape, dtype)
        self.pending_free.append(block)
        return self.fill_const(const, ref)

    def fill_const(self, const: Const, ref: SramRef) -> SramRef:
        """Write ``const`` into ``ref``: a vector fill, or a DMA from a constant tensor."""
        dtype, shape = ref.dtype, ref.shape
        if const.uniform:
            self.emit(self.vpu, Binary(BinaryKind.add, Scalar(const.value), Scalar(0.0), ref))
            return ref
        array = const.array.reshape(shape).astype(dtype.storage if dtype is not DType.bf16
                                                  else np.float32)
        key = f"{self.o.trace.name}_const{len(self.o.constants)}"
        for name, existing in self.o.constants.items():
            if existing.shape == array.shape and existing.dtype == array.dtype and \
                    np.array_equal(existing, array):
                key = name
                break
        else:
            self.o.em.tensor(key, shape, dtype, "in")
            self.o.constants[key] = array
        self.emit(self.o.em.dma(self.core, "load"),
                  Load(DramRef(key, tuple(_full(shape))), ref))
        return ref

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> None:
        for index, op in enumerate(self.program.ops):
            self.op = op
            self.pending_free: list[Block] = []
            if index not in self.plan.skip:
                HANDLERS[op.kind](self, index, op)
            for block in self.pending_free:
                self.pad.free(block)
            for vid in self.plan.dying.get(index, ()):
                if vid in self.blocks:
                    self.release(vid)
        for vid in list(self.blocks):
            self.release(vid)

    # -- memory ---------------------------------------------------------------------------
    def sub_view(self, tile: SramRef, box: tuple[tuple[int, int], ...],
                 perm: tuple[int, ...] | None) -> SramRef:
        """The part ``box`` (block axes) of ``tile`` (which holds the block transposed by
        ``perm``) as a view in block-axis order."""
        strides = self._axis_strides(tile, perm)
        first = sum(lo * s for (lo, _), s in zip(box, strides))
        shape = tuple(hi - lo for lo, hi in box)
        view = SramRef(tile.space, tile.offset + first * tile.dtype.itemsize, shape,
                       tile.dtype, strides)
        return SramRef(view.space, view.offset, shape, tile.dtype) if _is_dense(view) else view

    @staticmethod
    def _axis_strides(tile: SramRef, perm: tuple[int, ...] | None) -> tuple[int, ...]:
        tile_strides = dense_strides(tile.shape)
        if perm is None:
            return tile_strides
        return tuple(tile_strides[perm.index(j)] for j in range(len(perm)))

    def dram_pieces(self, access: Access, tile: SramRef, perm: tuple[int, ...] | None
                    ) -> list[tuple[DramRef, SramRef]]:
        """(DRAM box, SRAM view) pairs moving ``access`` to/from ``tile``; with ``perm``
        the tile holds the block transposed."""
        name = self.o.tensors[access.pointer]
        shape = self.shapes[access.pointer]
        axis_strides = self._axis_strides(tile, perm)
        out = []
        for slices, axes, sub in boxes(access, shape):
            first = sum((access.box[j][0] + sub[j][0]) * axis_strides[j]
                        for j in range(len(axes)))
            dram = DramRef(name, slices)
            strides = [0] * len(shape)
            for j, dim in enumerate(axes):
                if dim >= 0:
                    strides[dim] = axis_strides[j]
            offset = tile.offset + first * tile.dtype.itemsize
            view = SramRef(tile.space, offset, dram.shape, tile.dtype, tuple(strides))
            if _is_dense(view):
                view = SramRef(tile.space, offset, dram.shape, tile.dtype)
            out.append((dram, view))
        return out


def _work(program: ProgramTrace) -> int:
    """A program's work, roughly: elements touched, a dot's times its depth. Programs go
    in grid order to the core with the least work so far, as a block scheduler would
    dispatch them (a causal attention's late query blocks do more than its early ones)."""
    total = 0
    for op in program.ops:
        elements = math.prod(op.shape) if op.shape else 1
        total += elements * op.attrs.get("depth", 1)
    return total


def _full(shape: tuple[int, ...]) -> list:
    from compiler.ir.operands import Slice

    return [Slice(0, n) for n in shape]


def _is_dense(view: SramRef) -> bool:
    kept = [(n, s) for n, s in zip(view.shape, view.strides or ()) if n > 1]
    expected = 1
    for n, s in reversed(kept):
        if s != expected:
            return False
        expected *= n
    return True


from compiler.triton.handlers import HANDLERS  # noqa: E402  (the table needs the class)
