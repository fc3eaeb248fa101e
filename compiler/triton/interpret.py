"""Running a Triton kernel through Triton's interpreter to record what it does.

Everything happens inside :func:`tracing`, a scope that patches Triton's interpreter
(never process-wide interpret mode, which breaks fake tensors): the interpreter's
builder methods are wrapped to record the operations on data
(:mod:`compiler.triton.record`) and tensor arguments are stand-ins at synthetic
addresses. A trace is shape-only unless given the launch's ``memory`` (each tensor
argument's bytes): shape-only, loads read zeros and touch no memory, so a launch on meta
tensors of a 70B model's shapes traces like one on real tensors, and a kernel whose
addresses or control flow depend on data stops with
:class:`compiler.triton.record.NeedsData`; with memory, loads read the real values
(stores write a copy) and such a kernel is traced for the values of this launch.

``x if c else y`` on a loaded ``c`` is a select (both sides computed, as a compiled
Triton kernel does), not a branch: the interpreter's AST rewrite is extended so, once
and process-wide (rewritten functions are cached process-wide); outside archsim's
traces the rewritten expression behaves exactly as Python's.

Tested against Triton 3.8.0 (the version the ``triton`` extra pins): the interpreter's
classes are internal and change between releases.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from archsim.errors import TritonError
from compiler.triton.record import Recorder
from compiler.triton.trace import KernelTrace, Pointer

PIN = "3.8.0"
"""The Triton version the interpreter hooks are written against."""

TRANSPARENT = frozenset({"create_load", "create_store", "create_descriptor_load",
                         "create_descriptor_store"})
"""Builder methods that only forward to the masked load/store, which are recorded."""

_ACTIVE: list[Recorder] = []
"""The recorder of the trace under way (``if_expression`` asks it what is data)."""

_SPACING = 1 << 44
"""Stand-in tensors sit this many bytes apart (16 TiB), so every address names one."""


def require_triton() -> Any:
    """Import triton, or say how to install it."""
    try:
        import triton
    except ImportError:
        raise TritonError(f'Triton kernels need Triton: pip install -e ".[triton]" '
                          f'(installs triton=={PIN})') from None
    if triton.__version__ != PIN:
        raise TritonError(f"archsim traces kernels with Triton {PIN}; found "
                          f"{triton.__version__} (pip install triton=={PIN})")
    return triton


class StandIn:
    """What a kernel sees of a tensor argument: an address and a dtype, no data."""

    def __init__(self, tensor: Any, base: int) -> None:
        self.dtype = tensor.dtype
        self.shape = tuple(tensor.shape)
        self._base = base

    def data_ptr(self) -> int:
        return self._base


def _pointer(name: str, tensor: Any, base: int) -> Pointer:
    from compiler.torch_types import TORCH_TO_IR

    if not tensor.is_contiguous():
        raise TritonError(f"argument {name}: a {list(tensor.shape)} tensor with strides "
                          f"{list(tensor.stride())} is not contiguous; pass "
                          f"{name}.contiguous()")
    dtype = TORCH_TO_IR.get(tensor.dtype)
    if dtype is None:
        raise TritonError(f"argument {name}: dtype {tensor.dtype} is not supported "
                          f"(supported: {', '.join(str(d) for d in TORCH_TO_IR)})")
    return Pointer(name, base, tuple(tensor.shape) or (1,), dtype)


def trace(jit_fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
          grid: Any, memory: dict[str, np.ndarray] | None = None) -> KernelTrace:
    """Trace one launch ``jit_fn[grid](*args, **kwargs)``; tensors may be on any device
    (meta included): only their shapes, dtypes and strides are read, plus, with
    ``memory`` (argument name -> its contents as a numpy array), their values."""
    triton = require_triton()
    from triton.runtime import interpreter as itp

    _select_on_data(itp)
    fn = getattr(jit_fn, "fn", jit_fn)
    interpreted = itp.InterpretedFunction(fn)
    names = interpreted.arg_names
    pointers: list[Pointer] = []
    stand_ins: dict[int, StandIn] = {}

    def stand_in(name: str, value: Any) -> Any:
        if not hasattr(value, "data_ptr") or not hasattr(value, "shape"):
            return value
        key = id(value)
        if key not in stand_ins:
            base = (len(pointers) + 1) * _SPACING
            pointers.append(_pointer(name, value, base))
            stand_ins[key] = StandIn(value, base)
        return stand_ins[key]

    args = tuple(stand_in(n, a) for n, a in zip(names, args))
    kwargs = {k: stand_in(k, v) for k, v in kwargs.items()}
    recorder = Recorder(fn.__name__, fn.__code__.co_filename)
    recorder.pointers = tuple(pointers)
    if memory is not None:
        recorder.memory = {p.name: None if memory.get(p.name) is None else
                           _bytes(memory[p.name]) for p in pointers}

    class _ShapeOnly(itp.GridExecutor):
        def _init_args_hst(self, args_dev: Any, kwargs: Any) -> Any:
            return list(args_dev), dict(kwargs)

        def _restore_args_dev(self, *unused: Any) -> None:
            pass

    with tracing(itp, recorder):
        executor = _ShapeOnly(interpreted.rewrite(), names, grid)
        try:
            with np.errstate(all="ignore"):
                executor(*args, **kwargs)
            recorder.finish()
        except itp.InterpreterError as exc:
            cause = exc.__cause__
            while cause is not None and not isinstance(cause, TritonError) and \
                    isinstance(cause, itp.InterpreterError):
                cause = cause.__cause__
            if isinstance(cause, TritonError):
                raise cause from None
            raise TritonError(f"kernel {fn.__name__}: the interpreter failed: "
                              f"{cause!r}") from cause
    del triton
    consulted = {name: tuple(sorted(what)) for name, what in recorder.consulted.items()}
    return KernelTrace(fn.__name__, fn.__code__.co_filename, tuple(pointers),
                       itp.interpreter_builder.grid_dim, recorder.programs, consulted)


def _bytes(array: np.ndarray) -> np.ndarray:
    """An argument's contents as bytes, read-only (a store copies it first:
    :meth:`Recorder._write`), so tracing a decode step does not copy the KV cache."""
    view = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    view = view.view()
    view.flags.writeable = False
    return view


def _select_on_data(itp: Any) -> None:
    """Rewrite ``x if c else y`` in interpreted kernels into :func:`if_expression` (once;
    the interpreter caches rewritten functions process-wide, and the rewrite behaves as
    Python's own expression whenever ``c`` is not a tensor)."""
    import ast

    rewriter = itp.FunctionRewriter
    if getattr(rewriter.ast_transformer, "archsim_selects", False):
        return
    base = type(rewriter.ast_transformer)

    class _WithSelects(base):  # type: ignore[misc, valid-type]
        archsim_selects = True

        def visit_Assign(self, node: ast.Assign) -> ast.AST:
            node.value = self.visit(node.value)  # the base class does not descend here
            return super().visit_Assign(node)

        def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
            self.generic_visit(node)

            def thunk(body: ast.expr) -> ast.Lambda:
                return ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                                     kw_defaults=[], defaults=[]), body=body)
            call = ast.Call(func=ast.Name(id="_archsim_if_expression", ctx=ast.Load()),
                            args=[node.test, thunk(node.body), thunk(node.orelse)],
                            keywords=[])
            return ast.copy_location(call, node)

    rewriter.ast_transformer = _WithSelects()
    itp._archsim_if_expression = if_expression
    itp.InterpretedFunction.rewritten_fn.clear()


def if_expression(test: Any, body: Callable[[], Any], orelse: Callable[[], Any]) -> Any:
    """``body() if test else orelse()``; on a tensor ``test``, ``tl.where`` of both."""
    from triton.language import core
    from triton.runtime.interpreter import interpreter_semantic as sem

    recorder = _ACTIVE[-1] if _ACTIVE else None
    if not isinstance(test, core.tensor) or recorder is None or \
            not recorder.is_data(test.handle):
        return body() if test else orelse()
    x, y = body(), orelse()
    return sem.where(test, sem.to_tensor(x), sem.to_tensor(y))


def interpret(jit_fn: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run a launch with Triton's own interpreter on CPU tensors, in a scope (the
    reference archsim's numbers are checked against; it computes bf16 on raw bits)."""
    require_triton()
    from triton.runtime import interpreter as itp

    saved: list[tuple[Any, str, Any, bool]] = []
    with _patched(saved):
        _nested_calls(itp, lambda obj, name, value: _patch(saved, obj, name, value))
        with np.errstate(all="ignore"):
            itp.InterpretedFunction(getattr(jit_fn, "fn", jit_fn))[grid](*args, **kwargs)


def _patch(saved: list[tuple[Any, str, Any, bool]], obj: Any, name: str, value: Any) -> None:
    had = name in vars(obj)
    saved.append((obj, name, vars(obj).get(name), had))
    setattr(obj, name, value)


@contextmanager
def _patched(saved: list[tuple[Any, str, Any, bool]]) -> Iterator[None]:
    try:
        yield
    finally:
        for obj, name, value, had in reversed(saved):
            if had:
                setattr(obj, name, value)
            else:
                delattr(obj, name)


@contextmanager
def tracing(itp: Any, recorder: Recorder) -> Iterator[None]:
    """Patch the interpreter to record into ``recorder``; everything is restored."""
    builder = itp.interpreter_builder
    saved_options = builder.options
    saved: list[tuple[Any, str, Any, bool]] = []

    def patch(obj: Any, name: str, value: Any) -> None:
        _patch(saved, obj, name, value)

    builder.options = itp.InterpreterOptions(sanitize_overflow=False)
    try:
        with _patched(saved):
            for name in dir(type(builder)):
                if name in TRANSPARENT:
                    continue
                if name.startswith("create_") or name in ("set_grid_idx",):
                    patch(builder, name, recorder.wrap(name, getattr(builder, name), itp))
            patch(itp.ReduceOps, "apply", recorder.wrap_reduce(itp.ReduceOps.apply))
            patch(itp.ScanOps, "apply", recorder.wrap_scan(itp.ScanOps.apply))
            _nested_calls(itp, patch, recorder.helpers)
            patch(itp, "_patch_lang_tensor",
                  _tensor_patcher(itp._patch_lang_tensor, recorder, itp))
            _ACTIVE.append(recorder)
            yield
    finally:
        if _ACTIVE and _ACTIVE[-1] is recorder:
            _ACTIVE.pop()
        builder.options = saved_options


def _nested_calls(itp: Any, patch: Callable[[Any, str, Any], None],
                  helpers: set[Any] | None = None) -> None:
    """``@triton.jit`` functions called from the kernel (``tl.max`` and the rest of
    triton's standard library are among them) run interpreted too. Their language
    patches are undone before the launch's own, so nothing outlives the trace."""
    from triton.runtime.jit import JITFunction

    patch_lang = itp._patch_lang
    nested: list[Any] = []
    patched: set[Any] = set()
    functions: dict[Any, Any] = {}

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        fn = self.fn  # a JITFunction cannot be a dict key here (its hash fails)
        if fn not in patched:
            patched.add(fn)
            nested.append(patch_lang(fn))
        if fn not in functions:
            functions[fn] = itp.InterpretedFunction(fn).rewrite()
            if helpers is not None:
                helpers.add(functions[fn].__code__)
        return functions[fn](*args, **kwargs)

    def launch_scope(fn: Any) -> Any:
        scope = patch_lang(fn)
        restore = scope.restore

        def restore_all() -> None:
            while nested:
                nested.pop().restore()
            patched.clear()
            restore()
        scope.restore = restore_all
        return scope

    patch(JITFunction, "__call__", call)
    patch(itp, "_patch_lang", launch_scope)


def _tensor_patcher(original: Callable[..., None], recorder: Recorder,
                    itp: Any) -> Callable[..., None]:
    """The interpreter's own tensor patches, plus a recorded ``.T`` and refusals of data
    used as a branch condition or a loop bound."""

    def patch_tensor(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        base_bool, base_index = tensor.__bool__, tensor.__index__
        base_t = tensor.T

        def checked_bool(self: Any) -> bool:
            recorder.consult(self.handle, "a branch (if/while)")
            return base_bool(self)

        def checked_index(self: Any) -> int:
            recorder.consult(self.handle, "a loop bound or index")
            return base_index(self)

        def transposed(self: Any) -> Any:
            result = base_t.fget(self)
            rank = len(self.handle.data.shape)
            perm = tuple(range(rank - 2)) + (rank - 1, rank - 2)
            recorder.on_call("create_trans", (self.handle, perm), result.handle)
            return result

        scope.set_attr(tensor, "__bool__", checked_bool)
        scope.set_attr(tensor, "__index__", checked_index)
        scope.set_attr(tensor, "T", property(transposed))

    return patch_tensor


