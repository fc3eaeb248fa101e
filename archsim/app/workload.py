"""What to run: one :class:`Workload` type for every front door.

A workload is one of

- a **built-in model** or a **sized workload** of :mod:`archsim.app.catalog`
  (``gpt2``, ``llama-7b``, ``gemm_2048x2048x2048``);
- a **model file**: a ``.py`` file defining ``model`` and ``example_inputs`` (or
  ``get_model()``/``get_inputs()``);
- a **program**: a saved ``.rbln`` file or a scheduled :class:`~compiler.ir.ops.Program`;
- a **module**: an ``nn.Module`` with its example inputs (``archsim.estimate``,
  :mod:`serving`);
- a **transformers config**: a ``config.json``, a directory holding one, or a model
  bundled with ``archsim llm`` (``llama-2-7b``): transformers' ``*ForCausalLM`` built
  from it on ``meta``, one forward pass over ``--batch`` x ``--seq`` token ids,
  performance-only (the same model ``archsim llm`` serves).

:meth:`Workload.parse` reads the ``MODEL`` argument of the command line, refusing the
options that cannot apply to what it names.
"""

from __future__ import annotations

import enum
import runpy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import TYPE_CHECKING, Any

from archsim.app.catalog import BUILTINS, SIZES, check_sizes, examples, family_of
from archsim.errors import ArchsimError, ModelFileError
from serving.spec import check_positions

if TYPE_CHECKING:
    from compiler.ir.ops import Program

DTYPES = ("f32", "f16", "bf16")
"""Model dtypes a workload can be built or converted in."""
INTEGER_DTYPES = ("i8",)
"""Operand dtypes of integer workloads (``gemm --dtype i8``: ``torch._int_mm``)."""


class Kind(enum.Enum):
    BUILTIN = "built-in model"
    SIZED = "sized workload"
    FILE = "model file"
    PROGRAM = "program"
    MODULE = "module"
    TRANSFORMERS = "transformers config"


@dataclass(frozen=True)
class Workload:
    kind: Kind
    name: str
    """The built-in or sized name, the file's path, or a label ('' keeps the program's)."""
    module: Any = None
    """The ``nn.Module`` of a module workload."""
    inputs: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Keyword arguments of the forward call (model files and modules)."""
    program: Program | None = None
    batch: int | None = None
    seq: int | None = None
    layers: int | None = None
    dtype: str | None = None
    """Built-in models: built in it; model files and modules: converted to it; None: as
    they are (built-in models: f32 functional, the arrays' native dtype otherwise)."""

    # ------------------------------------------------------------- constructors

    @classmethod
    def builtin(cls, name: str, *, batch: int | None = None, seq: int | None = None,
                layers: int | None = None, dtype: str | None = None) -> Workload:
        """A built-in model (:data:`~archsim.app.catalog.BUILTINS`) or a sized workload
        (``gemm_512x512x512``); sizes that the model does not take are refused."""
        given = {"batch": batch, "seq": seq, "layers": layers}
        entry = BUILTINS.get(name)
        _check_dtype(dtype, repr(name), integer=True)  # unknown: i8 listed (built-in gemm)
        if dtype in INTEGER_DTYPES and (entry is None or not entry.int8_op):
            raise _not_integer(dtype, repr(name))
        if entry is not None:
            _refuse(name, [s for s in SIZES if given[s] is not None and s not in entry.takes],
                    f"it takes {_flags(entry.takes)}")
            if seq is not None and entry.positions:
                check_positions(name, (seq,), entry.positions, "--seq")
            return cls(Kind.BUILTIN, name, batch=batch, seq=seq, layers=layers, dtype=dtype)
        if family_of(name) is not None:
            _refuse(name, [s for s in SIZES if given[s] is not None],
                    "its sizes are in its name")
            check_sizes(name)
            return cls(Kind.SIZED, name, dtype=dtype)
        raise ArchsimError(f"unknown model {name!r}: give a built-in workload "
                           f"({', '.join(BUILTINS)}), a sized workload ({examples()}), "
                           f"a .py file, a .rbln program or a transformers config.json")

    @classmethod
    def file(cls, path: str | Path, *, kwargs: Mapping[str, Any] | None = None,
             dtype: str | None = None) -> Workload:
        """A ``.py`` file defining ``model`` and ``example_inputs``; ``dtype`` converts
        the model's floating-point weights and inputs."""
        _check_dtype(dtype, "a model file")
        if not Path(path).is_file():
            raise ArchsimError(f"no such model file: {path}")
        return cls(Kind.FILE, str(path), kwargs=MappingProxyType(dict(kwargs or {})),
                   dtype=dtype)

    @classmethod
    def of_program(cls, program: str | Path | Program) -> Workload:
        """A scheduled program, or the path of a saved ``.rbln`` one."""
        if isinstance(program, (str, Path)):
            if not Path(program).is_file():
                raise ArchsimError(f"no such program file: {program}")
            return cls(Kind.PROGRAM, str(program))
        return cls(Kind.PROGRAM, "", program=program)

    @classmethod
    def of_module(cls, module: Any, inputs: Any, kwargs: Mapping[str, Any] | None = None, *,
                  name: str = "", dtype: str | None = None) -> Workload:
        """``module(*inputs, **kwargs)``: inputs a tensor or a tuple of them (any device,
        ``meta`` for shapes only)."""
        _check_dtype(dtype, "a module")
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
        return cls(Kind.MODULE, name, module=module, inputs=inputs,
                   kwargs=MappingProxyType(dict(kwargs or {})), dtype=dtype)

    @classmethod
    def transformers(cls, name_or_path: str | Path, *, batch: int | None = None,
                     seq: int | None = None, layers: int | None = None,
                     dtype: str | None = None) -> Workload:
        """transformers' causal LM of a ``config.json`` (or a directory holding one, or
        a model bundled with ``archsim llm``), run on ``batch`` x ``seq`` token ids;
        ``layers`` replaces the config's layer count."""
        from serving.spec import read_model_config

        _check_dtype(dtype, "a transformers config")
        read_model_config(name_or_path)  # refused now if it cannot be read
        return cls(Kind.TRANSFORMERS, str(name_or_path), batch=batch, seq=seq,
                   layers=layers, dtype=dtype)

    @classmethod
    def parse(cls, model: str, *, batch: int | None = None, seq: int | None = None,
              layers: int | None = None, dtype: str | None = None,
              kwargs: Mapping[str, Any] | None = None) -> Workload:
        """The command line's ``MODEL`` with its options: a ``.rbln`` program, a ``.py``
        file, or a name of the catalog. Options that cannot apply are refused."""
        sizes = [s for s, v in (("batch", batch), ("seq", seq), ("layers", layers))
                 if v is not None]
        if model.endswith(".rbln"):
            _refuse(model, sizes + ["dtype"] * (dtype is not None) + ["kwarg"] * bool(kwargs),
                    "a program's shapes and dtypes are scheduled into it")
            return cls.of_program(model)
        if model.endswith(".py"):
            _refuse(model, sizes, "a model file's shapes are those of its example_inputs")
            return cls.file(model, kwargs=kwargs, dtype=dtype)
        if kwargs:
            raise ArchsimError(f"--kwarg applies to a model file (.py), not to {model!r}")
        if _is_transformers_config(model):
            return cls.transformers(model, batch=batch, seq=seq, layers=layers, dtype=dtype)
        return cls.builtin(model, batch=batch, seq=seq, layers=layers, dtype=dtype)

    # ------------------------------------------------------------- helpers

    def load_file(self) -> tuple[Any, tuple[Any, ...]]:
        """A model file's ``(model, example_inputs)``, as the file defines them."""
        return _from_python_file(Path(self.name))

    def load_program(self) -> Program:
        if self.program is not None:
            return self.program
        from compiler.ir.text import load_program

        return load_program(Path(self.name))

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickles for sweeps on other processes: a program travels as its ``.rbln``
        text (a used Program caches read-only mappings, which do not pickle); a module
        does not travel."""
        if self.kind is Kind.MODULE:
            raise ArchsimError("a module workload runs in its own process only; give a "
                               "built-in model, a model file or a program")
        if self.program is None:
            return _rebuild, (self.kind, self.name, dict(self.kwargs), self.batch, self.seq,
                              self.layers, self.dtype, None)
        from compiler.ir.text import print_program

        return _rebuild, (self.kind, self.name, {}, None, None, None, None,
                          (print_program(self.program), self.program.name))


def _rebuild(kind: Kind, name: str, kwargs: dict[str, Any], batch: int | None,
             seq: int | None, layers: int | None, dtype: str | None,
             program_text: tuple[str, str] | None) -> Workload:
    program = None
    if program_text is not None:
        from compiler.ir.text import parse_program

        program = parse_program(program_text[0], source=program_text[1])
    return Workload(kind, name, kwargs=MappingProxyType(kwargs), program=program,
                    batch=batch, seq=seq, layers=layers, dtype=dtype)


def _is_transformers_config(model: str) -> bool:
    """A ``config.json``, a directory holding one, or a model bundled with ``archsim
    llm`` (a built-in workload of the same name wins)."""
    from serving.spec import bundled_models

    path = Path(model)
    return (model.endswith(".json") or (path / "config.json").is_file()
            or (model not in BUILTINS and model in bundled_models()))


def _flags(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"--{n}" for n in names) if names else "no size options"


def _refuse(model: str, options: list[str], why: str) -> None:
    if options:
        raise ArchsimError(f"{_flags(options)} cannot apply to {model!r}: {why}")


def _check_dtype(dtype: str | None, what: str, integer: bool = False) -> None:
    """``dtype`` for the workload ``what`` names; ``integer``: the integer dtypes are
    among its choices (built-in models: ``--help`` lists i8 with the float dtypes)."""
    if dtype in INTEGER_DTYPES and not integer:
        raise _not_integer(dtype, what)
    known = DTYPES + INTEGER_DTYPES if integer else DTYPES
    if dtype is not None and dtype not in known:
        raise ArchsimError(f"unknown dtype {dtype!r}: expected one of {', '.join(known)}")


def _not_integer(dtype: str, what: str) -> ArchsimError:
    takes = [n for n, e in BUILTINS.items() if e.int8_op]
    return ArchsimError(f"--dtype {dtype} runs integer matmuls: built-in "
                        f"{', '.join(takes)} only, not {what} (a model's dtype is one of "
                        f"{', '.join(DTYPES)})")


def _from_python_file(path: Path) -> tuple[Any, tuple[Any, ...]]:
    try:
        compile(path.read_bytes(), str(path), "exec")
    except SyntaxError as exc:  # also a file that is not UTF-8
        raise ModelFileError(f"{path}:{exc.lineno}: not valid Python: {exc.msg}") from None
    namespace = _call_file_code(path, "while loading the model file", runpy.run_path,
                                str(path))
    model = namespace.get("model")
    inputs = namespace.get("example_inputs")
    if model is None and callable(namespace.get("get_model")):
        model = _call_file_code(path, "by get_model()", namespace["get_model"])
    if inputs is None and callable(namespace.get("get_inputs")):
        inputs = _call_file_code(path, "by get_inputs()", namespace["get_inputs"])
    if model is None or inputs is None:
        raise ArchsimError(f"{path}: define 'model' (an nn.Module) and 'example_inputs' (a "
                           f"tuple of tensors), or functions get_model() and get_inputs()")
    return model, tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _call_file_code(path: Path, what: str, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)``, code of the model file at ``path``: what it raises becomes one
    line naming the file's line and the exception, as a syntax error does (an
    ArchsimError it raises, e.g. from archsim's own API, passes as it is)."""
    try:
        return call(*args)
    except ArchsimError:
        raise
    except (Exception, SystemExit) as exc:  # SystemExit: sys.exit() while loading
        line = _line_in(path, exc.__traceback__)
        where = f"{path}:{line}" if line else str(path)
        message = str(exc).strip().splitlines()
        detail = f"{type(exc).__name__}: {message[0]}" if message else type(exc).__name__
        raise ModelFileError(f"{where}: {detail} (raised {what})") from exc


def _line_in(path: Path, tb: TracebackType | None) -> int | None:
    """The line of the innermost frame of ``tb`` in the file ``path`` (None: none is)."""
    line = None
    target = str(path.resolve())
    while tb is not None:
        if str(Path(tb.tb_frame.f_code.co_filename).resolve()) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


__all__ = ["DTYPES", "Kind", "Workload"]
