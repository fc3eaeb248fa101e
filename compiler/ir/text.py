"""The text form of scheduled programs (``.rbln``): a printer and a parser.

``parse_program(print_program(p)) == p`` for every program whose engine names are
well formed (see ``ENGINE`` below). The text is line oriented: one header, one line per
DRAM tensor, one line per command, in the order they appear in the :class:`Program`.
Example::

    program mm_128 target=tpu-v3
    dram %A : f32[128,256] in
    dram %C : f32[128,128] out
    0: core0.dma0 load   %A[0:128, 0:128] -> sram0[0x000000] f32[128,128]    # aten.mm
    4: core0.mxu0 matmul sram0[0x000000] f32[128,128], sram0[0x010000] f32[128,128] -> sram0[0x040000] f32[128,128] acc after 0,1
    7: core0.vpu  binary add sram0[0x000000] f32[4,8], 0.5 -> sram0[0x000100] f32[4,8] after 4
    8: host       host_op aten.cumsum.default (%X) -> (%Y) cycles=1200 after 7
    9: hdma       host_transfer to_device %X[0:4, 0:8]

Grammar (``{x}`` repeats zero or more times, ``[x]`` is optional; whitespace between
tokens is free, but a construct never spans lines)::

    file      := { blank | comment } header { tensor | command | blank | comment }
    header    := "program" NAME [ "target" "=" NAME ]
    tensor    := "dram" TENSOR ":" type ROLE                 ROLE := in | out | inout | temp
    command   := INT ":" ENGINE op [ "after" INT { "," INT } ] [ "#" SOURCE ]
    type      := DTYPE "[" [ INT { "," INT } ] "]"             DTYPE := f32 | f16 | bf16 | ...
    sram      := SPACE "[" INT "]" type [ "strides" "=" "(" INT { "," INT } ")" ]
                                                               SPACE := sram<N> | shared
    dram      := TENSOR "[" [ slice { "," slice } ] "]"
    slice     := INT ":" INT [ ":" INT ]                       (step printed only if != 1)
    value     := sram | NUMBER                                 (NUMBER is a Scalar)
    tensors   := "(" [ TENSOR { "," TENSOR } ] ")"
    op := "load" dram "->" sram
        | "store" sram "->" dram
        | "copy" sram "->" sram
        | "gather" dram "[" sram "]" "->" sram               (table rows picked by indices)
        | "matmul" sram "," sram "->" sram [ "acc" ] [ dequant ]
    dequant := "dequant" sram spec    (b dequantized on the way in; sram: the groups' scales,
                                       and zeros)
    spec    := "group" "=" INT "phase" "=" INT ( "halves" | "pairs" | "bytes" )
                 (int4 codes two a byte, or one-byte values)
        | "unary" UNARY_KIND sram "->" sram
        | "binary" BINARY_KIND value "," value "->" sram
        | "select" sram "," value "," value "->" sram
        | "cast" sram "->" sram
        | "reduce" REDUCE_KIND sram "->" sram "axis" "=" INT
        | "transpose" sram "->" sram "perm" "=" "(" [ INT { "," INT } ] ")"
        | "vcopy" sram "->" sram
        | "dequantize" sram "," sram "->" sram spec   (weights, their scales -> float tile)
        | "host_transfer" ( "to_device" | "to_host" ) dram
        | "host_op" NAME tensors "->" tensors "cycles" "=" INT

Tokens: ``NAME`` is a word (letters, digits, ``_`` and ``.``, with inner ``-``/``+``)
or a double-quoted string with JSON escapes; the printer quotes any name that is not a
plain word. ``TENSOR`` is ``%`` followed by a NAME. ``INT`` is decimal or ``0x`` hex,
optionally signed (SRAM offsets print as hex). ``NUMBER`` is anything Python's
``float`` accepts (``0.5``, ``-1e-05``, ``inf``, ``nan``); scalars print with ``repr``
so they round-trip exactly. ``ENGINE`` is ``core<N>.dma<M>``, ``core<N>.mxu<M>``,
``core<N>.vpu[<M>]``, ``tdma``, ``hdma`` or ``host``; whether the engine exists on a
given NPU is the verifier's business, not the parser's.

Comments: a line whose first non-blank character is ``#`` is ignored, as are blank
lines. A ``#`` comment after a command is that command's ``source`` (surrounding
blanks stripped); a source that would not survive that (edge blanks, control
characters, a leading ``"``) is printed as a quoted string and parsed back from it.
A comment after the header or a tensor line is ignored.

Parse errors raise :class:`~archsim.errors.ParseError` with 1-based line and column
and what was expected, e.g. ``expected '->' after load source, got 'sram0'``.
Duplicate tensor names are parse errors; everything that needs a hardware
configuration (engines, capacities, shapes, ordering) is left to
:mod:`compiler.ir.verify`.

The parser is in :mod:`compiler.ir.text_line` (lines and operands) and
:mod:`compiler.ir.text_parse` (ops and programs); the tokens both sides share are in
:mod:`compiler.ir.text_lex`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Scalar, Shape, Slice, SramRef
from compiler.ir.ops import (
    Binary,
    Cast,
    Command,
    Copy,
    Dequant,
    Dequantize,
    Gather,
    HostOp,
    HostTransfer,
    Load,
    MatMul,
    Op,
    Program,
    Reduce,
    MulAdd,
    Select,
    Store,
    Transpose,
    Unary,
    VCopy,
    VectorMatMul,
)
from compiler.ir.text_lex import _NAME_RE
from compiler.ir.text_parse import load_program, parse_program

__all__ = [
    "format_dram_ref", "format_shape", "format_sram_ref", "format_type", "load_program",
    "parse_program", "print_program", "save_program",
]

# ---------------------------------------------------------------- printing


def _name(text: str) -> str:
    """A name as one token: bare when it is a plain word, else a JSON string."""
    if _NAME_RE.fullmatch(text):
        return text
    return json.dumps(text)


def format_shape(shape: Shape) -> str:
    return "[" + ",".join(str(n) for n in shape) + "]"


def format_type(dtype: DType, shape: Shape) -> str:
    """``f32[128,128]``."""
    return f"{dtype.value}{format_shape(shape)}"


def _format_offset(offset: int) -> str:
    sign = "-" if offset < 0 else ""
    return f"{sign}0x{abs(offset):06x}"


def format_sram_ref(ref: SramRef) -> str:
    """``sram0[0x000100] f32[4,8]``, or ``... f32[4,8] strides=(16,1)`` for a view."""
    text = f"{ref.space}[{_format_offset(ref.offset)}] {format_type(ref.dtype, ref.shape)}"
    if ref.strides is None:
        return text
    return f"{text} strides=({','.join(str(s) for s in ref.strides)})"


def _format_slice(s: Slice) -> str:
    if s.step == 1:
        return f"{s.start}:{s.stop}"
    return f"{s.start}:{s.stop}:{s.step}"


def format_dram_ref(ref: DramRef) -> str:
    """``%A[0:128, 0:256:2]``."""
    return f"%{_name(ref.tensor)}[" + ", ".join(_format_slice(s) for s in ref.slices) + "]"


def _format_value(value: SramRef | Scalar) -> str:
    if isinstance(value, Scalar):
        return repr(float(value.value))
    return format_sram_ref(value)


def _format_tensors(names: Sequence[str]) -> str:
    return "(" + ", ".join(f"%{_name(n)}" for n in names) + ")"


def _operands(op: Op) -> str:
    """The text after the mnemonic."""
    try:
        printer = _PRINTERS[type(op)]
    except KeyError:
        raise TypeError(f"cannot print op class {type(op).__name__}: "
                        f"compiler.ir.text has no printer for it") from None
    return printer(op)


def _format_matmul(op: MatMul | VectorMatMul) -> str:
    return (f"{format_sram_ref(op.a)}, {format_sram_ref(op.b)} -> {format_sram_ref(op.out)}"
            + (" acc" if op.accumulate else "") + _format_dequant(op))


def _format_dequant(op: MatMul | VectorMatMul) -> str:
    """`` dequant SCALES group=G phase=P halves|pairs|bytes`` for weights dequantized
    on the way in."""
    if op.dequant is None or op.scales is None:
        return ""
    return f" dequant {format_sram_ref(op.scales)} {_format_spec(op.dequant)}"


def _format_spec(d: Dequant) -> str:
    return f"group={d.group} phase={d.phase} {d.nibbles or 'bytes'}"


def _chained(op: Unary | Binary | MulAdd | Cast) -> str:
    return " chained" if op.chained else ""


_PRINTERS: dict[type[Op], Callable[[Op], str]] = {
    Load: lambda op: f"{format_dram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    Store: lambda op: f"{format_sram_ref(op.src)} -> {format_dram_ref(op.dst)}",
    Copy: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    Gather: lambda op: (f"{format_dram_ref(op.table)} [{format_sram_ref(op.indices)}] -> "
                        f"{format_sram_ref(op.dst)}"),
    MatMul: lambda op: _format_matmul(op),
    VectorMatMul: lambda op: _format_matmul(op),
    Unary: lambda op: (f"{op.kind.value} {format_sram_ref(op.src)} -> "
                       f"{format_sram_ref(op.dst)}" + _chained(op)),
    Binary: lambda op: (f"{op.kind.value} {_format_value(op.a)}, {_format_value(op.b)} -> "
                        f"{format_sram_ref(op.dst)}" + _chained(op)),
    MulAdd: lambda op: (f"{format_sram_ref(op.acc)}, {format_sram_ref(op.a)}, "
                        f"{_format_value(op.b)} -> {format_sram_ref(op.dst)}" + _chained(op)),
    Select: lambda op: (f"{format_sram_ref(op.cond)}, {_format_value(op.a)}, "
                        f"{_format_value(op.b)} -> {format_sram_ref(op.dst)}"),
    Cast: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}" + _chained(op),
    Reduce: lambda op: (f"{op.kind.value} {format_sram_ref(op.src)} -> "
                        f"{format_sram_ref(op.dst)} axis={op.axis}"),
    Transpose: lambda op: (f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)} "
                           f"perm=({','.join(str(p) for p in op.perm)})"),
    VCopy: lambda op: f"{format_sram_ref(op.src)} -> {format_sram_ref(op.dst)}",
    Dequantize: lambda op: (f"{format_sram_ref(op.src)}, {format_sram_ref(op.scales)} -> "
                            f"{format_sram_ref(op.dst)} {_format_spec(op.dequant)}"),
    HostTransfer: lambda op: (("to_device " if op.to_device else "to_host ")
                              + format_dram_ref(op.ref)),
    HostOp: lambda op: (f"{_name(op.name)} {_format_tensors(op.inputs)} -> "
                        f"{_format_tensors(op.outputs)} cycles={op.cycles}"),
}


def _format_source(source: str) -> str:
    if source.isprintable() and source == source.strip() and not source.startswith('"'):
        return source
    return json.dumps(source)


def _command_body(cmd: Command, widths: tuple[int, int, int]) -> str:
    id_width, engine_width, mnemonic_width = widths
    engine = _name(cmd.engine)
    mnemonic = type(cmd.op).mnemonic
    body = (f"{cmd.id:>{id_width}}: {engine:<{engine_width}} {mnemonic:<{mnemonic_width}} "
            f"{_operands(cmd.op)}")
    if cmd.deps:
        body += " after " + ",".join(str(d) for d in cmd.deps)
    return body


_COMMENT_COLUMN_MAX = 100
_MNEMONIC_WIDTH_MAX = len("matmul")


def print_program(program: Program) -> str:
    """The text form of ``program``. Ids, engines and mnemonics are padded to
    columns and source comments aligned (at most at column 100, so one long command
    does not push every comment far right)."""
    header = f"program {_name(program.name)}"
    if program.target:
        header += f" target={_name(program.target)}"
    lines = [header]
    for t in program.tensors:
        lines.append(f"dram %{_name(t.name)} : {format_type(t.dtype, t.shape)} {t.role}")
    commands = program.commands
    widths = (max((len(str(c.id)) for c in commands), default=1),
              max((len(_name(c.engine)) for c in commands), default=1),
              min(max((len(type(c.op).mnemonic) for c in commands), default=1),
                  _MNEMONIC_WIDTH_MAX))
    bodies = [_command_body(c, widths) for c in commands]
    column = min(max((len(b) for b in bodies), default=0), _COMMENT_COLUMN_MAX)
    for cmd, body in zip(program.commands, bodies):
        if cmd.source:
            body = f"{body:<{column}}   # {_format_source(cmd.source)}"
        lines.append(body)
    return "\n".join(lines) + "\n"


def save_program(program: Program, path: str | os.PathLike[str]) -> None:
    Path(path).write_text(print_program(program), encoding="utf-8")
