"""The verifier: is a scheduled program valid for a hardware configuration?

``verify(program, config)`` returns quietly or raises one
:class:`~archsim.errors.VerifyError` holding *every* problem found. Each problem names
the command and the field at fault, e.g.::

    command 5 (core0.mxu0 matmul): field b: shape f32[64,32] does not match a's k=48

What is checked, in the order problems are listed:

1. DRAM tensors: unique names, known roles, non-negative dimensions.
2. Each command: its engine exists on the NPU and may run the op; its deps name
   other, existing commands; its SRAM operands lie in an existing space, inside its
   capacity, aligned to the dtype, and in a space the engine can reach (a core's
   matrix and vector engines only their own scratchpad; ``tdma`` only shared SRAM;
   a core's DMA engines any scratchpad over the NoC, and shared SRAM); its DRAM boxes
   fit their tensors and do not write ``in`` tensors; shapes and dtypes agree as the
   op requires (table ``OP_CHECKS`` of :mod:`compiler.ir.verify_ops`).
3. Command ids are unique. If they are not, the ordering checks below are skipped:
   deps would be ambiguous.
4. Deadlock: engines run their queues in order, so a command waits for its deps *and*
   for the command ahead of it on its engine. A cycle in that wait-for graph can never
   run; each cycle found is reported with the commands on it.
5. SRAM races: two commands touching overlapping SRAM bytes, at least one writing,
   must be ordered by happens-before (deps and queue order, transitively). Commands
   are visited in a topological order; each SRAM space keeps, per byte interval, the
   last writer and the latest reader per engine since that write (enough, because one
   engine's reads are ordered). Skipped when the program deadlocks (there is no order
   to check). The wait-for graph and its deadlocks live in
   :mod:`compiler.ir.verify_order`, the race replay in :mod:`compiler.ir.verify_races`.

Most commands of a real program have no problem, and most of what decides that
repeats from command to command (engines, buffers, tile shapes). So each command is
first *screened* (:class:`_Screen`) with verdicts remembered per such repeated key,
and only commands that may have a problem are *explained* by the checks below, which
write the messages.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from archsim.config.model import NpuConfig
from archsim.config.names import SHARED, TDMA, sram_space
from archsim.errors import VerifyError
from compiler.ir.collector import paused
from compiler.ir.access import (
    DRAM_REF_FIELDS,
    SRAM_FIELDS,
    dram_refs,
    sram_operands,
)
from compiler.ir.operands import ROLES, DramRef, DramTensor, Shape, SramRef
from compiler.ir.ops import ALL_OPS, ENGINE_OPS, Command, Op, Program, engine_core, engine_kind
from compiler.ir.text import format_dram_ref, format_shape, format_type
from compiler.ir.verify_ops import OP_CHECKS, Machine, range_text, write_to_input
from compiler.ir.verify_order import WaitGraph, format_region
from compiler.ir.verify_races import race_problems

__all__ = ["find_problems", "verify"]


def verify(program: Program, config: NpuConfig) -> None:
    """Raise :class:`VerifyError` listing every problem of ``program`` on ``config``."""
    problems = find_problems(program, config)
    if problems:
        raise VerifyError(problems, program.name)


def find_problems(program: Program, config: NpuConfig) -> list[str]:
    """Every problem of ``program`` on ``config``, as messages (empty if valid)."""
    with paused():
        return _find_problems(program, config)


def _find_problems(program: Program, config: NpuConfig) -> list[str]:
    machine = Machine.from_config(config)
    tensors = program.tensor_map
    commands = program.commands
    problems = _tensor_problems(program.tensors)
    ids = {cmd.id for cmd in commands}
    screen = _Screen(machine, tensors, ids)
    for cmd in commands:
        if not screen.passes(cmd):
            prefix = _describe(cmd)
            problems += [f"{prefix}: {p}" for p in _command_problems(cmd, machine, tensors, ids)]
    if len(ids) < len(commands):
        return problems + _duplicate_id_problems(commands)
    graph = WaitGraph.build(commands)
    order, cycles = graph.topological_order()
    if cycles:
        return problems + [graph.describe_cycle(cycle) for cycle in cycles]
    return problems + race_problems(commands, graph, order, _describe)


@functools.lru_cache(maxsize=1024)
def _engine_info(engine: str) -> tuple[str, int | None]:
    """``(engine_kind, engine_core)``, cached: a program names few engines many times."""
    return engine_kind(engine), engine_core(engine)


def _describe(cmd: Command) -> str:
    return f"command {cmd.id} ({cmd.engine} {getattr(cmd.op, 'mnemonic', '?')})"


_SRAM_SPACE_RE = re.compile(r"sram([0-9]+)")


# ---------------------------------------------------------------- tensors and ids


def _tensor_problems(tensors: Sequence[DramTensor]) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            problems.append(f"tensor %{t.name}: declared more than once")
        seen.add(t.name)
        if t.role not in ROLES:
            problems.append(f"tensor %{t.name}: unknown role {t.role!r} "
                            f"(expected one of {', '.join(ROLES)})")
        if any(n < 0 for n in t.shape):
            problems.append(f"tensor %{t.name}: negative dimension in shape "
                            f"{format_shape(t.shape)}")
    return problems


def _duplicate_id_problems(commands: Sequence[Command]) -> list[str]:
    positions: dict[int, list[int]] = {}
    for position, cmd in enumerate(commands):
        positions.setdefault(cmd.id, []).append(position)
    return [
        f"command {cid}: id used by {len(where)} commands (at positions "
        f"{', '.join(str(p) for p in where)}); ordering checks skipped until ids are unique"
        for cid, where in positions.items() if len(where) > 1
    ]


# ---------------------------------------------------------------- one command


def _command_problems(cmd: Command, machine: Machine, tensors: dict[str, DramTensor],
                      ids: set[int]) -> Iterator[str]:
    """Problems of one command, each starting with the field at fault."""
    op = cmd.op
    if type(op) not in ALL_OPS:
        yield f"op: unknown op class {type(op).__name__}"
        return
    yield from _engine_problems(cmd.engine, op, machine)
    yield from _dep_problems(cmd, ids)
    for field, ref in sram_operands(op):
        yield from (f"field {field}: {p}" for p in _sram_problems(ref, cmd.engine, machine))
    for field, ref, is_write in dram_refs(op):
        yield from (f"field {field}: {p}" for p in _dram_problems(ref, is_write, tensors))
    yield from OP_CHECKS[type(op)](op, machine, tensors)


# ---------------------------------------------------------------- screening

_REGION_PARTS = ("space", "offset", "shape", "dtype", "strides")
"""What an SRAM operand's problems (and its part in the op's checks) depend on: the
strides too, as they decide the bytes it spans (a strided view past the end of its
space must not pass on the verdict of a dense one at the same offset)."""


@dataclass(frozen=True)
class _Fields:
    """The fields of an op class, by the part they play in its checks."""

    sram: tuple[str, ...]
    """Fields that may hold an SRAM operand, each once."""
    dram: tuple[tuple[str, bool], ...]
    """Fields holding a DRAM box, with whether the op writes it."""
    other: tuple[str, ...]
    """Every other field (kinds, axes, flags, host tensors)."""
    key: Callable[[Op], tuple[object, ...]]
    """The region parts of every SRAM operand and the other fields, in one call (it
    raises AttributeError when an operand is a Scalar). An optional operand (a field
    whose default is None, a matmul's ``scales``) is in it whole: a SramRef is its
    region parts, and None then costs no exception."""
    optional: tuple[str, ...] = ()
    """The SRAM fields that may be None (their default)."""

    @classmethod
    def of(cls, op_type: type[Op]) -> "_Fields":
        sram = SRAM_FIELDS[op_type]
        dram = DRAM_REF_FIELDS.get(op_type, ())
        dram_names = {name for name, _ in dram}
        other = tuple(f.name for f in dataclasses.fields(op_type)
                      if f.name not in sram and f.name not in dram_names)
        optional = tuple(f.name for f in dataclasses.fields(op_type)
                         if f.name in sram and f.default is None)
        parts = [f"{field}.{part}" for field in sram if field not in optional
                 for part in _REGION_PARTS]
        # two names at least, so the getter always returns a tuple
        return cls(sram, dram, other,
                   operator.attrgetter("__class__", *parts, *optional, *other), optional)

    def slow_key(self, op: Op) -> tuple[object, ...]:
        """``key`` for an op with a Scalar operand (None stands for the Scalar)."""
        parts: list[object] = [type(op)]
        for field in self.sram:
            if field in self.optional:
                continue
            ref = getattr(op, field)
            parts += ([getattr(ref, part) for part in _REGION_PARTS]
                      if isinstance(ref, SramRef) else [None] * len(_REGION_PARTS))
        return (*parts, *(getattr(op, field) for field in (*self.optional, *self.other)))


_FIELDS: dict[type[Op], _Fields] = {op_type: _Fields.of(op_type) for op_type in ALL_OPS}


class _Screen:
    """A quick, exact answer to "is this command free of problems?", so that only the
    commands with problems are explained (by :func:`_command_problems`).

    Apart from its deps and the bounds of its DRAM boxes, whether a command has a
    problem depends only on its engine, its op class, the space, offset, shape, dtype
    and strides of its SRAM operands, the tensor and shape of its DRAM boxes and the op's
    other fields. Programs repeat those a lot (the same buffers, tiles and engines), so
    the verdict is remembered per such *key*: most commands cost a key and a lookup.
    """

    def __init__(self, machine: Machine, tensors: dict[str, DramTensor],
                 ids: set[int]) -> None:
        self.machine = machine
        self.tensors = tensors
        self.ids = ids
        self.verdicts: dict[tuple[object, ...], bool] = {}

    def passes(self, cmd: Command) -> bool:
        """True only if ``cmd`` has no problem."""
        op = cmd.op
        fields = _FIELDS.get(type(op))
        if fields is None:
            return False  # an unknown op class
        deps = cmd.deps
        if deps and (cmd.id in deps or not self.ids.issuperset(deps)):
            return False
        try:
            key = (cmd.engine, self._operand_key(op, fields))
            verdict = self.verdicts.get(key)
        except (TypeError, _BadBox):  # an unhashable field (a list for a shape), a bad box
            return False
        if verdict is None:
            verdict = self.verdicts[key] = not any(
                _command_problems(cmd, self.machine, self.tensors, self.ids))
        return verdict

    def _operand_key(self, op: Op, fields: _Fields) -> tuple[object, ...]:
        """What the command's problems depend on in its op: :attr:`_Fields.key` and
        the tensor and shape of each DRAM box. Raises :class:`_BadBox` if a box has
        a problem (its slices are not part of the key)."""
        try:
            key = fields.key(op)
        except AttributeError:  # a Scalar operand
            key = fields.slow_key(op)
        if not fields.dram:
            return key
        boxes = []
        for field, is_write in fields.dram:
            ref = getattr(op, field)
            shape = _box_shape(ref, is_write, self.tensors)
            if shape is None:
                raise _BadBox
            boxes += (ref.tensor, shape)
        return (key, *boxes)


class _BadBox(Exception):
    """A DRAM box with a problem (see :func:`_box_shape`)."""


def _box_shape(ref: DramRef, is_write: bool, tensors: dict[str, DramTensor]
               ) -> Shape | None:
    """The shape of a DRAM box in which :func:`_dram_problems` finds nothing (its tensor
    exists and is not an input being written; every slice has a positive step and lies
    inside it), else None."""
    tensor = tensors.get(ref.tensor)
    if tensor is None or (is_write and tensor.role == "in"):
        return None
    if len(ref.slices) != len(tensor.shape):
        return None
    shape = []
    for s, size in zip(ref.slices, tensor.shape):
        start, stop, step = s.start, s.stop, s.step
        if step <= 0 or not 0 <= start <= stop <= size:
            return None
        shape.append((stop - start + step - 1) // step)  # Slice.length, as start <= stop
    return tuple(shape)


def _engine_problems(engine: str, op: Op, machine: Machine) -> Iterator[str]:
    if engine not in machine.engines:
        yield (f"engine: unknown engine {engine!r} "
               f"({machine.name} has {machine.describe_engines()})")
    kind, _ = _engine_info(engine)
    allowed = ENGINE_OPS.get(kind, ())
    if kind and type(op) not in allowed:
        names = ", ".join(o.mnemonic for o in allowed)
        yield f"op: {op.mnemonic} cannot run on a {kind} engine ({kind} engines run {names})"


def _dep_problems(cmd: Command, ids: set[int]) -> Iterator[str]:
    for dep in cmd.deps:
        if dep == cmd.id:
            yield "deps: depends on itself"
        elif dep not in ids:
            yield f"deps: depends on unknown command {dep}"


def _sram_problems(ref: SramRef, engine: str, machine: Machine) -> Iterator[str]:
    yield from _reach_problems(ref.space, engine)
    capacity = machine.capacity(ref.space)
    if capacity is None:
        yield _missing_space(ref.space, machine)
        return
    if any(n < 0 for n in ref.shape):
        yield f"negative dimension in shape {format_type(ref.dtype, ref.shape)}"
        return
    offset, itemsize = ref.offset, ref.dtype.itemsize
    if offset < 0:
        yield f"negative offset {offset} in {ref.space}"
        return
    if ref.strides is not None and (len(ref.strides) != len(ref.shape) or
                                    any(s < 0 for s in ref.strides)):
        yield (f"strides {ref.strides} of {format_type(ref.dtype, ref.shape)}: expected one "
               f"non-negative stride per dimension")
        return
    nbytes = ref.span_bytes
    if offset + nbytes > capacity:
        yield (f"region {format_region(ref.space, offset, offset + nbytes)} ({nbytes} bytes) "
               f"exceeds {ref.space} capacity of {capacity} bytes")
    if offset % itemsize:
        yield (f"offset 0x{offset:06x} is not aligned to the {itemsize}-byte "
               f"size of {ref.dtype}")


def _missing_space(space: str, machine: Machine) -> str:
    if space == SHARED:
        return "shared SRAM does not exist on this NPU (shared_sram.size_bytes is 0)"
    if _SRAM_SPACE_RE.fullmatch(space):
        return (f"SRAM space {space} does not exist ({machine.name} has "
                f"{range_text('sram', machine.cores)})")
    return f"unknown SRAM space {space!r} (expected sram<N> or shared)"


def _reach_problems(space: str, engine: str) -> Iterator[str]:
    """Which engine may touch which SRAM space (core DMA engines reach everything)."""
    kind, core = _engine_info(engine)
    if kind in ("mxu", "vpu"):
        own = sram_space(core)
        if space != own:
            yield f"{engine} can only access its own core's scratchpad {own}, not {space}"
    elif kind == TDMA and space != SHARED:
        yield f"tdma moves data only between DRAM and shared SRAM, not {space}"


def _dram_problems(ref: DramRef, is_write: bool, tensors: dict[str, DramTensor]
                   ) -> Iterator[str]:
    tensor = tensors.get(ref.tensor)
    if tensor is None:
        yield f"unknown DRAM tensor %{ref.tensor}"
        return
    if is_write and tensor.role == "in":
        yield write_to_input(tensor.name)
    if len(ref.slices) != len(tensor.shape):
        yield (f"{format_dram_ref(ref)} has {len(ref.slices)} slices but %{tensor.name} "
               f"has rank {len(tensor.shape)}")
        return
    for dim, (s, size) in enumerate(zip(ref.slices, tensor.shape)):
        if s.step <= 0:
            yield f"slice {dim} of {format_dram_ref(ref)} has step {s.step}; steps must be > 0"
        elif not 0 <= s.start <= s.stop <= size:
            yield (f"slice {dim} of {format_dram_ref(ref)} is out of bounds for "
                   f"%{tensor.name} dim {dim} of size {size}")
