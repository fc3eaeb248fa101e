"""The closed set of operations a scheduled command performs.

One frozen class per operation with typed fields; families share a base. Vector op
kinds are small enums with named groups, one line each. Shapes and dtypes are checked
by :mod:`compiler.ir.verify`, not here, so a bad program can still be built, printed
and reported on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from archsim.config.names import ENGINE_PATTERN, engine_core, engine_kind  # noqa: F401
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Scalar, SramRef

# ---------------------------------------------------------------- vector op kinds


class UnaryKind(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs in Python

    neg = "neg"
    abs = "abs"
    relu = "relu"
    exp = "exp"
    log = "log"
    sqrt = "sqrt"
    rsqrt = "rsqrt"
    reciprocal = "reciprocal"
    tanh = "tanh"
    sigmoid = "sigmoid"
    gelu = "gelu"            # exact (erf) GELU
    gelu_tanh = "gelu_tanh"  # tanh approximation
    silu = "silu"
    sin = "sin"
    cos = "cos"
    erf = "erf"
    square = "square"
    logical_not = "logical_not"
    tan = "tan"
    acos = "acos"
    asin = "asin"
    atan = "atan"
    sinh = "sinh"
    cosh = "cosh"
    asinh = "asinh"
    acosh = "acosh"
    atanh = "atanh"
    expm1 = "expm1"
    log1p = "log1p"
    log2 = "log2"
    log10 = "log10"
    exp2 = "exp2"
    sign = "sign"
    trunc = "trunc"
    floor = "floor"
    ceil = "ceil"
    round = "round"          # half to even, as torch.round
    frac = "frac"


class BinaryKind(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs in Python

    add = "add"
    sub = "sub"
    mul = "mul"
    div = "div"
    max = "max"
    min = "min"
    pow = "pow"
    eq = "eq"
    ne = "ne"
    lt = "lt"
    le = "le"
    gt = "gt"
    ge = "ge"
    logical_and = "and"
    logical_or = "or"
    atan2 = "atan2"
    copysign = "copysign"
    remainder = "remainder"  # the sign of the divisor, as Python's % and torch.remainder
    fmod = "fmod"            # the sign of the dividend, as C's fmod
    hypot = "hypot"
    logaddexp = "logaddexp"


class ReduceKind(enum.Enum):
    __hash__ = object.__hash__  # members are singletons; Enum's own hash runs in Python

    sum = "sum"
    max = "max"
    min = "min"
    mean = "mean"


# Op classes used for vector-engine timing (config.core.vector.costs.<class>).
TRANSCENDENTAL: frozenset[UnaryKind] = frozenset({
    UnaryKind.exp, UnaryKind.log, UnaryKind.sqrt, UnaryKind.rsqrt, UnaryKind.reciprocal,
    UnaryKind.tanh, UnaryKind.sigmoid, UnaryKind.gelu, UnaryKind.gelu_tanh, UnaryKind.silu,
    UnaryKind.sin, UnaryKind.cos, UnaryKind.erf, UnaryKind.tan, UnaryKind.acos,
    UnaryKind.asin, UnaryKind.atan, UnaryKind.sinh, UnaryKind.cosh, UnaryKind.asinh,
    UnaryKind.acosh, UnaryKind.atanh, UnaryKind.expm1, UnaryKind.log1p, UnaryKind.log2,
    UnaryKind.log10, UnaryKind.exp2,
})
KEEPS_DTYPE: frozenset[UnaryKind] = frozenset({
    UnaryKind.neg, UnaryKind.abs, UnaryKind.relu, UnaryKind.square, UnaryKind.sign,
    UnaryKind.trunc, UnaryKind.floor, UnaryKind.ceil, UnaryKind.round,
})
"""Unary ops that keep an integer input's dtype (the others compute in float, as torch
promotes integers for them)."""
DIVIDE: frozenset[BinaryKind] = frozenset({
    BinaryKind.div, BinaryKind.pow, BinaryKind.atan2, BinaryKind.remainder, BinaryKind.fmod,
    BinaryKind.hypot, BinaryKind.logaddexp,
})
"""Binary ops timed in the vector unit's divide class (iterative or transcendental)."""
FLOAT_ONLY: frozenset[BinaryKind] = frozenset({
    BinaryKind.div, BinaryKind.atan2, BinaryKind.copysign, BinaryKind.hypot,
    BinaryKind.logaddexp,
})
"""Binary ops that compute in float on integer operands (as torch promotes them)."""
COMPARISON: frozenset[BinaryKind] = frozenset({
    BinaryKind.eq, BinaryKind.ne, BinaryKind.lt, BinaryKind.le, BinaryKind.gt, BinaryKind.ge,
    BinaryKind.logical_and, BinaryKind.logical_or,
})


# ---------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class Op:
    """Base of every operation."""

    mnemonic = "op"


# -- data movement (DMA engines: coreN.dmaM, tdma) --------------------------------


@dataclass(frozen=True, slots=True)
class Load(Op):
    """DRAM box -> SRAM region (same element count; copied in row-major order)."""

    src: DramRef
    dst: SramRef
    mnemonic = "load"


@dataclass(frozen=True, slots=True)
class Store(Op):
    """SRAM region -> DRAM box (same element count; row-major order)."""

    src: SramRef
    dst: DramRef
    mnemonic = "store"


@dataclass(frozen=True, slots=True)
class Copy(Op):
    """SRAM -> SRAM between spaces or within one (scratchpads, shared SRAM)."""

    src: SramRef
    dst: SramRef
    mnemonic = "copy"


@dataclass(frozen=True, slots=True)
class Gather(Op):
    """Indexed DMA: rows of a DRAM box picked by an SRAM index vector.

    ``table`` is a 2-D box (rows x cols) of a DRAM tensor; ``indices`` an integer
    (i32 or i64) SRAM vector [n] of row numbers relative to the box's first row;
    ``dst`` is [n, cols] in the table's dtype. ``dst[i, :] = table_box[indices[i], :]``.
    Each row is its own contiguous DRAM run (an embedding lookup, index_select).
    """

    table: DramRef
    indices: SramRef
    dst: SramRef
    mnemonic = "gather"


DMA_OPS: tuple[type[Op], ...] = (Load, Store, Copy, Gather)

# -- matrix engine (coreN.mxuM) ----------------------------------------------------


NIBBLES = ("halves", "pairs")
"""The nibble layouts of packed int4 codes (:class:`Dequant`)."""

WIDENED_WEIGHTS = (DType.i8, DType.e4m3, DType.e5m2)
"""One-byte weights a float matmul reads as stored and widens to its input dtype (in the
arrays' input path, or on the vector unit): weight-only int8, and fp8 values with their
scales (:class:`Dequant`)."""


def weight_only(a: DType, b: DType) -> bool:
    """One-byte ``b`` weights a float ``a`` (16 or 32 bits) multiplies after widening
    them (weight-only int8; not an fp8 x fp8 matmul on an array without an fp8 mode)."""
    return a.is_float and a.itemsize >= 2 and b in WIDENED_WEIGHTS


@dataclass(frozen=True, slots=True)
class Dequant:
    """How an array's input path turns a narrow ``b`` into the weights it multiplies:
    ``value * scale + zero`` in f32, with the scale (and the zero, when ``scales`` holds
    two numbers a column, else 0) of the value's group of ``group`` k rows (row
    ``(phase + k) // group`` of the op's ``scales``), rounded to ``a``'s dtype.

    ``nibbles`` empty: ``b`` is ``[k, n]`` one-byte values as stored (i8, e4m3, e5m2).
    ``halves`` or ``pairs``: ``b`` is bytes ``[blocks, k, h]`` of int4 codes two a byte,
    as torch's CPU int4 kernel packs them (each block of ``2h`` columns keeps its k rows
    together), and the value is ``code - 8``. Within a block, at column ``r``, halves put
    the code in the low nibble of byte ``r`` for ``r < h`` and in the high nibble of
    byte ``r - h`` after; pairs put it in nibble ``r % 2`` of byte ``r // 2``."""

    group: int
    phase: int = 0
    """k rows of the first group that precede the tile (its k offset in the group)."""
    nibbles: str = ""

    @property
    def vector_passes(self) -> int:
        """Element operations per weight when the vector unit dequantizes
        (:class:`Dequantize`): int4, a byte's two nibbles split (half an op a weight
        each), widened, scaled, offset by the zero and rounded (5); one-byte values
        widened, scaled and rounded (3)."""
        return 5 if self.nibbles else 3

    @property
    def unpack_ops(self) -> int:
        """Element operations per weight before a :class:`VectorMatMul` multiplies it:
        int4, a byte's two nibbles split and widened (2); one-byte values widened (1).
        The scale and zero are not applied per weight there (see that op)."""
        return 2 if self.nibbles else 1

    def byte_of(self, r: int, h: int) -> tuple[int, int]:
        """(byte, nibble) of a block of ``h`` bytes holding the block's column ``r``."""
        if self.nibbles == "halves":
            nibble, c = divmod(r, h)
        else:
            c, nibble = divmod(r, 2)
        return c, nibble


@dataclass(frozen=True, slots=True)
class Product(Op):
    """The fields of a matmul, on the arrays (:class:`MatMul`) or on the vector units
    (:class:`VectorMatMul`)."""

    a: SramRef
    b: SramRef
    out: SramRef
    accumulate: bool = False
    scales: SramRef | None = None
    dequant: Dequant | None = None

    @property
    def columns(self) -> int:
        """``n``: output columns (two per byte of packed int4 ``b``)."""
        if self.dequant is not None and self.dequant.nibbles:
            return 2 * self.b.shape[0] * self.b.shape[-1]
        return self.b.shape[-1]


@dataclass(frozen=True, slots=True)
class MatMul(Product):
    """``out (+)= a @ b`` with a: [m, k], b: [k, n], out: [m, n] in the accumulator dtype.
    ``a`` may have more leading dims (``[..., k]``, rows = their product), so a strided
    view can stream rows that skip some.

    With ``dequant`` (and ``scales``: ``[groups, n, 1 or 2]``, each group's scale and
    zero per column), ``b`` is narrow weights dequantized in the array's input path
    (:class:`Dequant`): read at their stored size (packed int4: ``[blocks, k, h]``
    bytes for ``n = 2 h blocks``, half a byte a weight)."""

    mnemonic = "matmul"


# -- vector engine (coreN.vpu) -------------------------------------------------------

CHAINED_DOC = """``chained``: the op continues a pass over a tile (a matmul's fused epilogue,
run on results popped into registers): its first input is the value the pass holds in
registers, and the pass's one write was paid by the op that started it. It costs its
ALU time and the scratchpad reads of its other inputs."""


@dataclass(frozen=True, slots=True)
class Unary(Op):
    kind: UnaryKind
    src: SramRef
    dst: SramRef
    chained: bool = False  # see CHAINED_DOC
    mnemonic = "unary"


@dataclass(frozen=True, slots=True)
class Binary(Op):
    """Elementwise with numpy broadcasting; either input may be a :class:`Scalar`."""

    kind: BinaryKind
    a: SramRef | Scalar
    b: SramRef | Scalar
    dst: SramRef
    chained: bool = False  # ``a`` comes in registers (CHAINED_DOC)
    mnemonic = "binary"


@dataclass(frozen=True, slots=True)
class MulAdd(Op):
    """``dst = acc + a * b`` with numpy broadcasting of ``a`` and ``b`` (a depthwise
    convolution's tap: image times its weight, added to the sum so far): one vector
    instruction a element, as a fused multiply-add unit issues it, where a multiply
    and an add take two. The product is rounded to ``dst``'s dtype before the add,
    as the two ops would round it."""

    acc: SramRef
    a: SramRef
    b: SramRef | Scalar
    dst: SramRef
    chained: bool = False  # ``acc`` comes in registers (CHAINED_DOC)
    mnemonic = "muladd"


@dataclass(frozen=True, slots=True)
class Select(Op):
    """``dst = where(cond, a, b)`` with broadcasting; a or b may be a Scalar."""

    cond: SramRef
    a: SramRef | Scalar
    b: SramRef | Scalar
    dst: SramRef
    mnemonic = "select"


@dataclass(frozen=True, slots=True)
class Cast(Op):
    """Convert ``src`` to ``dst.dtype`` (same shape)."""

    src: SramRef
    dst: SramRef
    chained: bool = False  # see CHAINED_DOC
    mnemonic = "cast"


@dataclass(frozen=True, slots=True)
class Reduce(Op):
    """Reduce along ``axis``; ``dst`` keeps that axis with length 1."""

    kind: ReduceKind
    src: SramRef
    dst: SramRef
    axis: int
    mnemonic = "reduce"


@dataclass(frozen=True, slots=True)
class Transpose(Op):
    """``dst = src.transpose(perm)``."""

    src: SramRef
    dst: SramRef
    perm: tuple[int, ...]
    mnemonic = "transpose"


@dataclass(frozen=True, slots=True)
class VCopy(Op):
    """Copy within the vector engine (same element count, may reshape or broadcast
    ``src`` to ``dst.shape``)."""

    src: SramRef
    dst: SramRef
    mnemonic = "vcopy"


@dataclass(frozen=True, slots=True)
class Dequantize(Op):
    """``dst [k, n]`` := narrow weights ``src`` dequantized as ``dequant`` says
    (:class:`Dequant`, with ``src`` and ``scales`` laid out as a dequantizing
    :class:`MatMul`'s ``b`` and ``scales``), rounded to ``dst``'s float dtype, in one pass
    of the vector unit: what the arrays' input path does on chips whose arrays take only
    their native inputs (``core.matrix.dequant: vector``), a tile at a time before its
    matmul."""

    src: SramRef
    scales: SramRef
    dst: SramRef
    dequant: Dequant
    mnemonic = "dequantize"


@dataclass(frozen=True, slots=True)
class VectorMatMul(Product):
    """``out (+)= a @ b`` on the vector unit, as a :class:`MatMul` with the same fields
    and numbers' shapes: a matmul of few rows (a decode GEMV) run as multiply-adds, the
    share of a weight-only matmul's columns the vector unit takes beside the arrays
    when their weight intake binds (``compiler.kernels.matmul_vector``).

    With ``dequant``, each weight is unpacked and widened once (``Dequant.unpack_ops``)
    and each of the ``m`` rows multiply-adds it into a per-group sum; a group's scale
    and zero are applied to its sums, not to its weights: ``sum((c - 8) s + z) x =
    s sum(c x) + (z - 8 s) sum(x)``, two multiply-adds a group, column and row. The
    weights are never rounded to ``a``'s dtype (none is written): the numbers are f32
    weights and f32 sums."""

    mnemonic = "vmatmul"


VECTOR_OPS: tuple[type[Op], ...] = (Unary, Binary, MulAdd, Select, Cast, Reduce, Transpose,
                                    VCopy, Dequantize, VectorMatMul)

# -- host link (hdma) and host (host) -------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostTransfer(Op):
    """Bytes of a DRAM tensor crossing the host link. ``to_device`` is host -> DRAM.
    Functionally a no-op: DRAM tensors already hold the caller's inputs."""

    ref: DramRef
    to_device: bool
    mnemonic = "host_transfer"


@dataclass(frozen=True, slots=True)
class HostOp(Op):
    """Work the NPU cannot do, run on the host CPU for ``cycles`` device cycles.

    ``name`` keys the function that computes it in functional mode (e.g. an aten op
    name); ``inputs``/``outputs`` are whole DRAM tensors.
    """

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    cycles: int
    mnemonic = "host_op"


HOST_OPS: tuple[type[Op], ...] = (HostTransfer, HostOp)

ALL_OPS: tuple[type[Op], ...] = (*DMA_OPS, MatMul, *VECTOR_OPS, *HOST_OPS)

MATMUL_OPS: tuple[type[Op], ...] = (MatMul, VectorMatMul)
"""Ops whose FLOPs are a matmul's, on the arrays or on the vector units: they read
``out`` when they accumulate, and their FLOPs are the run's matmul FLOPs."""


# ---------------------------------------------------------------- commands / program


@dataclass(frozen=True, slots=True)
class Command:
    """One entry of an engine's in-order queue.

    ``deps`` are ids of commands that must finish before this one starts; ``source``
    names the user-level op it came from (aten op / graph node), for attribution.
    """

    id: int
    engine: str
    op: Op
    deps: tuple[int, ...] = ()
    source: str = ""


@dataclass(frozen=True)
class Program:
    """A scheduled program: DRAM tensors and commands (queue order = list order per
    engine)."""

    name: str
    tensors: tuple[DramTensor, ...]
    commands: tuple[Command, ...]
    target: str = ""

    def tensor(self, name: str) -> DramTensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)

    @cached_property
    def tensor_map(self) -> dict[str, DramTensor]:
        """Tensors by name (computed once; do not mutate)."""
        return {t.name: t for t in self.tensors}

    @cached_property
    def sram_high_water(self) -> Mapping[str, int]:
        """Per SRAM space, the highest byte address any command touches: the
        scratchpad the schedule needs (computed once)."""
        from compiler.ir.access import sram_high_water

        return MappingProxyType(sram_high_water(c.op for c in self.commands))


# Which operations each engine kind may run.
ENGINE_OPS: dict[str, tuple[type[Op], ...]] = {
    "dma": DMA_OPS,
    "tdma": DMA_OPS,
    "mxu": (MatMul,),
    "vpu": VECTOR_OPS,
    "hdma": (HostTransfer,),
    "host": (HostOp,),
}
