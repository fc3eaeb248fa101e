"""The recorder behind :func:`compiler.triton.interpret.tracing`: wrappers around the
interpreter's builder methods that note each operation on data.

A value is *data* when it was loaded from memory or computed from data; only such
operations are recorded, each with the tensor arguments it was read from (its
*sources*). Data used as a loop bound, a branch condition, an address or a mask is
*consulted*: with the launch's tensor contents (``memory``) the interpreter runs on the
real values and the trace is specialized to them, as the device would run it; without
(a shape-only trace) :class:`NeedsData` names the arguments whose values are needed.
Operations on data with no vector lowering are recorded as ``opaque`` (with their value
when it is known) and refused only if a stored result depends on them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from archsim.errors import TritonError
from compiler.ir.dtypes import DType
from compiler.triton.addressing import AddressError, locate
from compiler.triton.trace import Const, Operand, ProgramTrace, Pointer, TraceOp, ir_dtype

_COMPARE = {"LT": "lt", "LE": "le", "GT": "gt", "GE": "ge", "EQ": "eq", "NE": "ne"}

BINARY: dict[str, str] = {
    "create_fadd": "add", "create_add": "add", "create_fsub": "sub", "create_sub": "sub",
    "create_fmul": "mul", "create_mul": "mul", "create_fdiv": "div",
    "create_precise_divf": "div", "create_maxnumf": "max", "create_maximumf": "max",
    "create_maxsi": "max", "create_maxui": "max", "create_minnumf": "min",
    "create_minimumf": "min", "create_minsi": "min", "create_minui": "min",
    "create_and": "and", "create_or": "or",
    **{f"create_{p}cmp{s}{c}": k for p in ("i", "f") for s in ("S", "U", "O") for c, k in
       _COMPARE.items()},
}
UNARY: dict[str, str] = {
    "create_exp": "exp", "create_exp2": "exp2", "create_log": "log", "create_log2": "log2",
    "create_sqrt": "sqrt", "create_precise_sqrt": "sqrt", "create_rsqrt": "rsqrt",
    "create_fabs": "abs", "create_iabs": "abs", "create_fneg": "neg", "create_sin": "sin",
    "create_cos": "cos", "create_erf": "erf",
}
CASTS = frozenset({
    "create_fp_to_fp", "create_si_to_fp", "create_ui_to_fp", "create_fp_to_si",
    "create_fp_to_ui", "create_fp_ext", "create_fp_trunc", "create_int_cast",
})
SHAPES = frozenset({"create_reshape", "create_expand_dims", "create_broadcast",
                    "create_splat"})
ADDRESSES = frozenset({"create_addptr", "create_int_to_ptr", "create_make_tensor_descriptor"})
REFUSED_BEFORE_CALL = {
    "create_descriptor_gather": "a tensor-descriptor gather",
    "create_descriptor_scatter": "a tensor-descriptor scatter",
}
REDUCTIONS = {"_sum_combine": "sum", "_elementwise_max": "max", "_elementwise_min": "min"}
SCANS = {"_sum_combine": "sum", "_prod_combine": "prod"}
"""``tl.associative_scan`` combine functions with a lowering (tl.cumsum, tl.cumprod)."""


PLAIN = {"and": "a bitwise and (&) of integers", "or": "a bitwise or (|) of integers",
         "sdiv": "integer division (// or tl.cdiv)", "udiv": "integer division (// or "
         "tl.cdiv)", "srem": "a remainder (%)", "urem": "a remainder (%)", "frem":
         "a remainder (%)", "shl": "a bit shift", "lshr": "a bit shift", "ashr":
         "a bit shift", "xor": "a bitwise xor", "umulhi": "a high-half multiply"}
"""Triton builder operations with no vector lowering, in the words of kernel source."""


class NeedsData(TritonError):
    """A shape-only trace met data used as control flow or an address: the launch must
    be traced again with its tensors' contents (``arguments`` names the ones needed)."""

    def __init__(self, message: str, arguments: tuple[str, ...]) -> None:
        super().__init__(message)
        self.arguments = arguments


class Recorder:
    def __init__(self, kernel: str, filename: str) -> None:
        self.kernel = kernel
        self.filename = filename
        self.pointers: tuple[Pointer, ...] = ()
        self.programs: list[ProgramTrace] = []
        self._ids: dict[int, int] = {}
        self._sources: dict[int, frozenset[str]] = {}
        self._alive: list[Any] = []
        self._next = 0
        self._depth = 0
        self.memory: dict[str, np.ndarray | None] | None = None
        """Per tensor argument, its contents as bytes (None: shape-only); read-only until
        the kernel stores to it (then a private copy)."""
        self.consulted: dict[str, set[str]] = {}
        """Argument -> what its values decided (loop bounds, branches, addresses...)."""
        self.helpers: set[Any] = set()
        """Code objects of the ``@triton.jit`` helpers the kernel calls (for lines)."""

    # -- values ----------------------------------------------------------------------
    def start_program(self, pid: tuple[int, int, int]) -> None:
        self.programs.append(ProgramTrace(pid))
        self._ids.clear()
        self._sources.clear()
        self._alive.clear()

    def is_data(self, handle: Any) -> bool:
        return id(handle) in self._ids

    def sources(self, handle: Any) -> frozenset[str]:
        return self._sources.get(id(handle), frozenset())

    def _define(self, handle: Any, sources: frozenset[str] = frozenset()) -> int:
        vid = self._next
        self._next += 1
        self._ids[id(handle)] = vid
        self._sources[id(handle)] = sources
        self._alive.append(handle)  # keeps id() unique while the program runs
        return vid

    def consult(self, handle: Any, construct: str) -> None:
        """``handle`` decides ``construct`` (a loop bound, a branch, an address): fine
        with the launch's data, which the trace is then specialized to; a shape-only
        trace needs the data (:class:`NeedsData`)."""
        if not self.is_data(handle):
            return
        names = tuple(sorted(self.sources(handle)))
        if self.memory is None or any(self.memory.get(n) is None for n in names):
            listed = ", ".join(names) or "a loaded value"
            raise NeedsData(
                f"{self.where()}: {construct} depends on the values of {listed}, read from "
                f"memory when the kernel runs; a performance-only launch (meta tensors) "
                f"has no values: launch it on npu tensors that hold the data", names)
        for name in names:
            self.consulted.setdefault(name, set()).add(construct)

    def _operand(self, handle: Any) -> Operand:
        vid = self._ids.get(id(handle))
        if vid is not None:
            return vid
        dtype = ir_dtype(handle.dtype.scalar if hasattr(handle.dtype, "scalar") else
                         handle.dtype)
        if dtype is None:
            self.refuse(f"an operand of type {handle.dtype}")
        if np.asarray(handle.data).dtype == np.bool_:
            dtype = DType.bool
        return Const(np.array(handle.data, copy=True), dtype)

    def _emit(self, kind: str, handle: Any, args: tuple[Operand, ...],
              sources: frozenset[str] = frozenset(), **attrs: Any) -> None:
        out = self._define(handle, sources) if handle is not None else None
        shape = tuple(handle.data.shape) if handle is not None else ()
        dtype = ir_dtype(handle.dtype.scalar) if handle is not None else None
        if handle is not None and handle.data.dtype == np.bool_:
            dtype = DType.bool  # the interpreter types comparisons as their operands
        elif handle is not None and dtype is None:  # unsigned: the IR has none
            self.refuse(f"a value of type {handle.dtype.scalar}")
        self.programs[-1].ops.append(TraceOp(kind, out, args, shape, dtype, attrs,
                                             self.line(), self.where()))

    # -- errors ----------------------------------------------------------------------
    def line(self) -> int:
        return self.site()[1]

    def site(self) -> tuple[str, int, str]:
        """(file, line, function) of the construct being traced: the innermost frame of
        the kernel or of a ``@triton.jit`` helper it calls (not Triton's own library)."""
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_name == self.kernel and code.co_filename == self.filename:
                return code.co_filename, frame.f_lineno, code.co_name
            if code in self.helpers:
                return code.co_filename, frame.f_lineno, code.co_name
            frame = frame.f_back
        return self.filename, 0, self.kernel

    def where(self) -> str:
        filename, line, function = self.site()
        inside = "" if function == self.kernel else f", in {function}"
        return f"kernel {self.kernel} ({filename}:{line}{inside})"

    def refuse(self, construct: str) -> None:
        raise TritonError(f"{self.where()}: {construct} cannot be lowered to the NPU")


    # -- wrappers --------------------------------------------------------------------
    def wrap(self, name: str, method: Callable[..., Any], itp: Any) -> Callable[..., Any]:
        if name == "set_grid_idx":
            def set_grid_idx(x: int, y: int, z: int) -> None:
                method(x, y, z)
                self.start_program((x, y, z))
            return set_grid_idx
        if name == "create_masked_load":
            return lambda ptrs, mask, other, *rest, **kw: self._load(itp, ptrs, mask, other)
        if name == "create_masked_store":
            return lambda ptrs, value, mask, *rest, **kw: self._store(ptrs, value, mask)
        if name in REFUSED_BEFORE_CALL or name.startswith("create_atomic"):
            # these would touch memory at the stand-in addresses: refuse first
            what = "an atomic operation" if "atomic" in name else REFUSED_BEFORE_CALL[name]

            def refused(*args: Any, **kwargs: Any) -> Any:
                self.refuse(what)
            return refused

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            try:
                result = method(*args, **kwargs)
            finally:
                self._depth -= 1
            if self._depth == 0:
                self.on_call(name, args, result)
            return result
        return wrapped

    def wrap_reduce(self, apply: Callable[..., Any]) -> Callable[..., Any]:
        def reduce(op: Any, inputs: Any) -> Any:
            result = apply(op, inputs)  # calls back with a tuple: record only that call
            if not isinstance(inputs, tuple) or \
                    not any(self.is_data(x.handle) for x in inputs):
                return result
            first = inputs[0]
            combine = getattr(op.combine_fn, "fn", op.combine_fn)
            kind = REDUCTIONS.get(getattr(combine, "__name__", ""))
            if kind is None or len(inputs) > 1:
                self.refuse(f"a reduction with combine function "
                            f"{getattr(op.combine_fn, '__name__', op.combine_fn)!r} "
                            f"(sum, max and min are supported)")
            out = result[0] if isinstance(result, tuple) else result
            self._emit("reduce", out.handle, (self._operand(first.handle),),
                       self.sources(first.handle), reduce=kind,
                       axis=op.axis, keep_dims=op.keep_dims)
            return result
        return reduce

    def wrap_scan(self, apply: Callable[..., Any]) -> Callable[..., Any]:
        """``tl.cumsum``/``tl.cumprod`` on data are recorded; any other scan of data is
        refused (the interpreter computes scans in numpy, outside the builder: unhooked,
        a scan of loaded values would be kept as the constant it had on stand-in data)."""
        def scan(op: Any, inputs: Any) -> Any:
            if not isinstance(inputs, tuple) or \
                    not any(self.is_data(x.handle) for x in inputs):
                return apply(op, inputs)  # calls back with a tuple: record only that call
            combine = getattr(op.combine_fn, "fn", op.combine_fn)
            name = getattr(combine, "__name__", str(combine))
            kind = SCANS.get(name)
            if kind is None or len(inputs) > 1:
                self.refuse(f"tl.associative_scan with combine function {name!r} "
                            f"(tl.cumsum and tl.cumprod are supported)")
            first = inputs[0]
            result = apply(op, inputs)
            self._emit("scan", result[0].handle, (self._operand(first.handle),),
                       self.sources(first.handle), scan=kind, axis=op.axis,
                       reverse=bool(op.reverse))
            return result
        return scan

    def on_call(self, name: str, args: tuple[Any, ...], result: Any) -> None:
        handles = [a for a in args if hasattr(a, "data") and hasattr(a, "dtype")]
        data = [h for h in handles if self.is_data(h)]
        if not data:
            return
        sources = frozenset().union(*(self.sources(h) for h in data))
        if name in ("create_and", "create_or") and result.data.dtype != np.bool_:
            self._opaque(name, handles, result, data, sources)  # bitwise on integers
        elif name in BINARY:
            self._emit("binary", result, tuple(self._operand(h) for h in args[:2]), sources,
                       op=BINARY[name])
        elif name in UNARY:
            self._emit("unary", result, (self._operand(args[0]),), sources, op=UNARY[name])
        elif name in CASTS:
            self._emit("cast", result, (self._operand(args[0]),), sources)
        elif name in SHAPES:
            self._emit("reshape" if name in ("create_reshape", "create_expand_dims") else
                       "broadcast", result, (self._operand(handles[0]),), sources)
        elif name == "create_trans":
            self._emit("trans", result, (self._operand(args[0]),), sources,
                       perm=tuple(args[1]))
        elif name == "create_select":
            self._emit("select", result, tuple(self._operand(h) for h in args[:3]), sources)
        elif name == "create_fma":
            self._emit("fma", result, tuple(self._operand(h) for h in args[:3]), sources)
        elif name == "create_clampf":
            self._emit("clamp", result, tuple(self._operand(h) for h in args[:3]), sources)
        elif name == "create_dot":
            self._emit("dot", result, tuple(self._operand(h) for h in args[:3]), sources,
                       depth=int(args[0].data.shape[-1]))
        elif name in ADDRESSES:
            for handle in data:
                self.consult(handle, "an address (a gather or scatter through an index "
                                     "tensor)")
        elif name.startswith("create_atomic"):
            self.refuse("an atomic operation")
        elif result is not None and hasattr(result, "data") and hasattr(result, "dtype"):
            self._opaque(name, handles, result, data, sources)
        else:
            self.refuse(f"tl operation {name.removeprefix('create_')} on loaded values")

    def _opaque(self, name: str, handles: list[Any], result: Any, data: list[Any],
                sources: frozenset[str]) -> None:
        """An operation with no vector lowering: its value when the trace has data."""
        value = None if self.memory is None else np.array(result.data, copy=True)
        self._emit("opaque", result, tuple(self._operand(h) for h in handles), sources,
                   op=name.removeprefix("create_"), value=value,
                   loaded_from=tuple(sorted(sources)))

    def _load(self, itp: Any, ptrs: Any, mask: Any, other: Any) -> Any:
        mask_data = mask if isinstance(mask, np.ndarray) else mask.data
        self.consult(ptrs, "a load address")
        if not isinstance(mask, np.ndarray):
            self.consult(mask, "a load mask")
        dtype_tt = ptrs.get_element_ty()
        shape = ptrs.data.shape
        fill = 0.0
        if other is not None:
            if self.is_data(other):
                self.refuse("a masked load whose `other` value is loaded data")
            values = np.asarray(other.data).reshape(-1)
            if values.size and not np.all(values == values[0]):
                self.refuse("a masked load with a non-uniform `other`")
            fill = float(values[0]) if values.size else 0.0
        np_dtype = itp._get_np_dtype(dtype_tt)
        data = np.zeros(shape, dtype=np_dtype)
        access = self._access(ptrs, mask_data, dtype_tt)
        if self.memory is not None:
            if other is not None:
                data[...] = np.broadcast_to(np.asarray(other.data).astype(np_dtype), shape)
            self._read(np.asarray(ptrs.data), np.broadcast_to(mask_data, shape), data)
        result = itp.TensorHandle(data, dtype_tt)
        pointer = _pointer_of(access)
        self._emit("load", result, (), frozenset({pointer} if pointer else ()),
                   access=access, fill=fill)
        return result

    def _store(self, ptrs: Any, value: Any, mask: Any) -> None:
        mask_data = mask if isinstance(mask, np.ndarray) else mask.data
        self.consult(ptrs, "a store address")
        if not isinstance(mask, np.ndarray):
            self.consult(mask, "a store mask")
        access = self._access(ptrs, mask_data, value.dtype.scalar)
        if self.memory is not None:
            self._write(np.asarray(ptrs.data), np.broadcast_to(mask_data, ptrs.data.shape),
                        np.broadcast_to(np.asarray(value.data), ptrs.data.shape))
        operand = self._operand(value)
        shape = tuple(np.shape(value.data))
        self.programs[-1].ops.append(TraceOp("store", None, (operand,), shape,
                                             ir_dtype(value.dtype.scalar),
                                             {"access": access}, self.line(),
                                             self.where()))

    def finish(self) -> None:
        """After the launch: operations with no vector lowering that a store needs take
        the value they had at launch (their inputs are consulted); shape-only, there is
        none (:class:`NeedsData`)."""
        from compiler.triton.plan import dead_ops

        for program in self.programs:
            dead = dead_ops(program.ops)
            for i, op in enumerate(program.ops):
                if op.kind != "opaque" or i in dead:
                    continue
                what = PLAIN.get(op.attrs["op"], f"the Triton operation `{op.attrs['op']}`")
                names = op.attrs["loaded_from"]
                if self.memory is None or any(self.memory.get(n) is None for n in names):
                    listed = ", ".join(names) or "memory"
                    raise NeedsData(
                        f"{op.where}: {what} of values loaded from {listed}, feeding a "
                        f"stored result, is computed from the values read when the kernel "
                        f"runs; a performance-only launch (meta tensors) has no values: "
                        f"launch it on npu tensors that hold the data", names)
                for name in names:
                    self.consulted.setdefault(name, set()).add(f"{what} computed at launch")

    # -- the launch's data (stores land in a copy, later loads see them) ---------------
    def _elements(self, addresses: np.ndarray, mask: np.ndarray, itemsize: int
                  ) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Per tensor argument touched: (name, positions in the block, element index)."""
        flat = addresses.reshape(-1).astype(np.int64)
        keep = np.flatnonzero(np.asarray(mask, dtype=bool).reshape(-1))
        out = []
        for p in self.pointers:
            inside = keep[(flat[keep] >= p.base) & (flat[keep] < p.end)]
            if inside.size:
                out.append((p.name, inside, (flat[inside] - p.base) // itemsize))
        return out

    def _read(self, addresses: np.ndarray, mask: np.ndarray, out: np.ndarray) -> None:
        assert self.memory is not None
        flat = out.reshape(-1)
        for name, where, index in self._elements(addresses, mask, out.itemsize):
            if self.memory[name] is not None:  # unknown contents read as zeros
                flat[where] = self.memory[name].view(out.dtype)[index]

    def _write(self, addresses: np.ndarray, mask: np.ndarray, values: np.ndarray) -> None:
        assert self.memory is not None
        flat = values.reshape(-1)
        for name, where, index in self._elements(addresses, mask, values.itemsize):
            if self.memory[name] is None:
                continue
            if not self.memory[name].flags.writeable:  # the launch's own tensor: copy
                self.memory[name] = self.memory[name].copy()
            self.memory[name].view(values.dtype)[index] = flat[where]

    def _access(self, ptrs: Any, mask: np.ndarray, dtype_tt: Any) -> Any:
        itemsize = max(1, dtype_tt.primitive_bitwidth // 8)
        try:
            return locate(np.asarray(ptrs.data), mask, itemsize, self.pointers)
        except AddressError as exc:
            self.refuse(f"a load or store whose block is not a box: {exc}")


def _pointer_of(access: Any) -> str | None:
    return None if access is None else access.pointer
