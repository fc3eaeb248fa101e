"""The tensor-level graph IR between the FX frontend and the kernels.

A :class:`Graph` is a list of :class:`Node` in topological order. Each node applies one
primitive (:class:`Spec` subclasses below, a closed set) to values and python scalars.
Aten ops are lowered into these primitives by :mod:`compiler.lowerings`; kernels
schedule them. Every value is a dense row-major tensor; a :class:`View` produces an
alias of its input's storage (no data movement).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from compiler.ir.dtypes import DType
from compiler.ir.ops import BinaryKind, ReduceKind, UnaryKind

Shape = tuple[int, ...]

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """A tensor produced by a node (or a graph input / constant)."""

    shape: Shape
    dtype: DType
    name: str
    producer: "Node | None" = None
    id: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return f"%{self.name}:{self.dtype}{list(self.shape)}"


Operand = Any  # Value | float | int | bool


# ---------------------------------------------------------------- primitive specs


@dataclass(frozen=True)
class Spec:
    """Base of every primitive."""


TOKEN = "token"
"""The input kind of an effect token: an empty tensor that orders effectful ops
(``with_effects``), carries no data and is fed by the program itself."""


@dataclass(frozen=True)
class Input(Spec):
    kind: str  # "user_input" | "parameter" | "buffer" | "constant_tensor" | TOKEN
    target: str = ""


@dataclass(frozen=True)
class Constant(Spec):
    """A compile-time tensor (folded mask, arange...); data kept by the graph."""


@dataclass(frozen=True)
class Splat(Spec):
    """A tensor filled with one scalar (full, zeros_like, scalar_tensor)."""

    value: float


@dataclass(frozen=True)
class Unary(Spec):
    kind: UnaryKind


@dataclass(frozen=True)
class Binary(Spec):
    """Operands may be Values or python scalars (numpy broadcasting)."""

    kind: BinaryKind


@dataclass(frozen=True)
class Select(Spec):
    """where(cond, a, b)."""


@dataclass(frozen=True)
class Cast(Spec):
    """Convert to the output value's dtype."""


@dataclass(frozen=True)
class Broadcast(Spec):
    """Copy the input broadcast to the output shape (expand, materialized)."""


@dataclass(frozen=True)
class Permute(Spec):
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Slice(Spec):
    """out = x[..., start:stop:step, ...] along ``dim``."""

    dim: int
    start: int
    stop: int
    step: int


@dataclass(frozen=True)
class RotateHalf(Spec):
    """Rotary's lane permutation along the last dim (``rotate_half`` of transformers'
    Llama, GPT-NeoX, Mistral...): with ``h`` half its length, ``out[..., :h] =
    -x[..., h:]`` and ``out[..., h:] = x[..., :h]``. The lowering of
    ``cat((-x[..., h:], x[..., :h]), -1)`` (:func:`compiler.lowerings.movement.lower_cat`);
    the vector kernel computes it in the scratchpad with the last axis whole, so a
    rotary embedding ``x * cos + rotate_half(x) * sin`` is one pass over ``x``."""


@dataclass(frozen=True)
class Reduce(Spec):
    """Reduce along ``axes``; the output keeps them with length 1."""

    kind: ReduceKind
    axes: tuple[int, ...]


@dataclass(frozen=True)
class View(Spec):
    """Alias with another shape (same element order)."""


@dataclass(frozen=True)
class Dequantization:
    """Weights a matmul dequantizes on the way in (:class:`compiler.ir.ops.Dequant`),
    with a scale (and a zero) per ``group`` k rows and output column.

    ``nibbles`` ``halves`` or ``pairs``: int4 codes packed as torch's CPU int4 kernel
    packs them, ``N`` rows in blocks of ``block``, each block's bytes ``[K, block / 2]``.
    Empty: one-byte values (int8, fp8) as stored."""

    group: int
    nibbles: str = ""
    block: int = 0


@dataclass(frozen=True)
class MatMul(Spec):
    """Batched ``a @ b`` (a: [..., M, K], b: [..., K, N] or [..., N, K] if trans_b),
    batch dims broadcast. f32 accumulation, output in the output value's dtype.

    ``dequant``: inputs ``(a, b, scales)``, ``b`` narrow weights dequantized in the
    arrays' input path with ``scales [K / group, N, 1 or 2]`` (a scale, and a zero):
    packed int4 bytes ``[N / block, K, block / 2]``, or one-byte values ``[K, N]``
    (``[N, K]`` with ``trans_b``)."""

    trans_b: bool = False
    dequant: Dequantization | None = None


@dataclass(frozen=True)
class Cat(Spec):
    dim: int


@dataclass(frozen=True)
class Gather(Spec):
    """Indexed DMA from a dense 2-D table [R, C] with i32/i64 indices.

    Rows (default): indices [n], output [n, C], ``out[i] = table[indices[i]]``.
    ``per_column`` (torch.gather on dim 0): indices [n, m] with m <= C, output [n, m],
    ``out[i, j] = table[indices[i, j], j]``.
    """

    per_column: bool = False


@dataclass(frozen=True)
class Pad(Spec):
    """Constant padding of the last two dims: (top, bottom, left, right)."""

    pads: tuple[int, int, int, int]
    value: float


@dataclass(frozen=True)
class Conv2d(Spec):
    """NCHW conv; weight [O, C/groups, kh, kw]; ``padding`` (rows, cols) of zeros on
    each side, by addressing (the padded input is never stored), ``padding_end`` the
    bottom and right ones where they differ (a zero pad folded in:
    :class:`compiler.passes.PadIntoConvPass`). With ``channels_last_in`` the input value
    is the image stored NHWC, with ``channels_last_out`` the output value is
    (:mod:`compiler.layout`)."""

    stride: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    padding: tuple[int, int] = (0, 0)
    channels_last_in: bool = False
    channels_last_out: bool = False
    padding_end: tuple[int, int] | None = None

    @property
    def pads_end(self) -> tuple[int, int]:
        """Zero rows below the image and columns right of it."""
        return self.padding if self.padding_end is None else self.padding_end

    def image_shape(self, value: Value, stored_nhwc: bool) -> tuple[int, int, int, int]:
        """An image operand's (N, C, H, W), whichever order it is stored in."""
        if stored_nhwc:
            n, h, w, c = value.shape
            return (n, c, h, w)
        n, c, h, w = value.shape
        return (n, c, h, w)


@dataclass(frozen=True)
class Pool2d(Spec):
    """max / avg (sum then scale) pooling on an NCHW input, ``padding`` (rows, cols) on
    each side by addressing: ``-inf`` for max, zeros for avg (the padded input is never
    stored)."""

    kind: str  # "max" | "avg"
    kernel: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    divisor: float
    padding: tuple[int, int] = (0, 0)

    @property
    def fill(self) -> float:
        """The padding's value: what no window's result can be for it."""
        return float("-inf") if self.kind == "max" else 0.0


@dataclass(frozen=True)
class HostCall(Spec):
    """An aten op run on the host CPU. ``fn`` maps input arrays to output arrays."""

    op_name: str
    fn: Any = field(compare=False, hash=False)
    flops: int = 0


@dataclass(frozen=True)
class TritonCall(Spec):
    """A traced Triton launch (:mod:`compiler.triton`): the node's inputs are its tensor
    arguments in ``pointers`` order, its outputs the new contents of ``written``."""

    trace: Any = field(compare=False, hash=False)
    pointers: tuple[str, ...] = ()
    written: tuple[str, ...] = ()


ELEMENTWISE: tuple[type[Spec], ...] = (Unary, Binary, Select, Cast, Broadcast)
"""Specs the vector kernel fuses freely (plus Reduce and RotateHalf with their axes whole,
Permute and Slice as leaves)."""


@dataclass(eq=False)
class Node:
    spec: Spec
    inputs: tuple[Operand, ...]
    outputs: tuple[Value, ...]
    source: str = ""

    @property
    def out(self) -> Value:
        return self.outputs[0]

    def value_inputs(self) -> tuple[Value, ...]:
        return tuple(x for x in self.inputs if isinstance(x, Value))

    def __repr__(self) -> str:
        args = ", ".join(repr(x) for x in self.inputs)
        outs = ", ".join(repr(v) for v in self.outputs)
        return f"{outs} = {type(self.spec).__name__}{self._attrs()}({args})  # {self.source}"

    def _attrs(self) -> str:
        fields = {k: v for k, v in vars(self.spec).items() if k != "fn"}
        return "" if not fields else "[" + ", ".join(f"{k}={v}" for k, v in fields.items()) + "]"


@dataclass(eq=False)
class Graph:
    nodes: list[Node] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    constants: dict[int, Any] = field(default_factory=dict)
    """Value id -> numpy array for Constant values."""
    weights: set[int] = field(default_factory=set)
    """Ids of inputs that are parameters, buffers or lifted constants (not user data)."""
    output_perms: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """Output position -> the dim order its tensor is stored in (the caller gets
    ``stored.permute(inverse)``: a channels-last result)."""

    def add(self, spec: Spec, inputs: tuple[Operand, ...], out_types: list[tuple[Shape, DType]],
            name: str, source: str = "") -> Node:
        outs = tuple(Value(tuple(s), d, name if i == 0 else f"{name}_{i}")
                     for i, (s, d) in enumerate(out_types))
        node = Node(spec, tuple(inputs), outs, source or name)
        for v in outs:
            v.producer = node
        self.nodes.append(node)
        return node

    def users(self) -> dict[int, list[Node]]:
        """Value id -> consuming nodes."""
        result: dict[int, list[Node]] = {}
        for node in self.nodes:
            for v in node.value_inputs():
                result.setdefault(v.id, []).append(node)
        return result

    def __str__(self) -> str:
        lines = [f"inputs: {self.inputs}"]
        lines += [repr(n) for n in self.nodes]
        lines.append(f"outputs: {self.outputs}")
        return "\n".join(lines)


def base_of(value: Value) -> Value:
    """Follow View aliases to the value owning the storage."""
    while value.producer is not None and isinstance(value.producer.spec, View):
        value = value.producer.inputs[0]
    return value


@dataclass(frozen=True)
class Attention(Spec):
    """softmax(q @ k^T * scale + mask) @ v with q [..., Sq, D], k [..., Sk, D],
    v [..., Sk, Dv]; inputs (q, k, v[, mask]); key/value heads may be fewer (GQA).
    ``heads_after_seq[i]``: input i is stored [B, S, H, D] (heads split off the hidden
    dim, not yet moved in front of the sequence); the kernel reads its heads in place.
    ``out_heads_after_seq``: the output is stored [B, S, H, Dv] (the heads merged back
    next to each other, as the next projection reads them); the kernel writes each
    head there. ``causal``: query i sees keys j <= i + ``causal_offset`` (0 is SDPA's
    ``is_causal``; Sk - Sq has the queries at the end of the key sequence)."""

    scale: float
    causal: bool
    heads_after_seq: tuple[bool, bool, bool] = (False, False, False)
    out_heads_after_seq: bool = False
    causal_offset: int = 0
    kv_scales: bool = False
    """k and v are int8 (a quantized KV cache) and two more inputs follow: ``k_scale``
    and ``v_scale`` [..., Sk, 1], each key's scale; the kernel dequantizes each K/V tile
    as it loads it (the cache is read at one byte an element)."""


def attention_mask(node: Node) -> Value | None:
    """An Attention node's mask input (after q, k, v; before any K/V scales)."""
    count = len(node.inputs) - (2 if node.spec.kv_scales else 0)
    return node.inputs[3] if count > 3 else None
