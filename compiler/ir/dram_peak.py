"""How much DRAM a program needs at once, against the chip's capacity.

Each DRAM tensor is live from the first command that touches it to the last (tensors
the caller provides from the start, tensors it reads back to the end); the peak is the
largest total of live bytes at any command, the footprint a runtime that frees dead
tensors would need. A model whose weights alone exceed the device is refused here,
before any simulation, rather than "running" on memory it does not have.
"""

from __future__ import annotations

import weakref

from archsim.config.model import NpuConfig
from archsim.errors import DeviceMemoryError
from compiler.ir.access import dram_tensors
from compiler.ir.ops import Program

_last: tuple[weakref.ref[Program], tuple[int, int]] | None = None
"""The last program's peak: the compiler checks a program, and
:func:`archsim.repeated.extend` checks the same one again with the layers it left out
(on a 70B estimate each walk of its 300k commands took 0.4 to 0.8 s)."""


def dram_peak(program: Program) -> tuple[int, int]:
    """(peak live bytes, index of the command where it is reached); remembered for the
    last program asked about (programs are immutable)."""
    global _last
    if _last is not None and _last[0]() is program:
        return _last[1]
    peak = _dram_peak(program)
    _last = (weakref.ref(program), peak)
    return peak


def _dram_peak(program: Program) -> tuple[int, int]:
    count = len(program.commands)
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, command in enumerate(program.commands):
        for name in dram_tensors(command.op):
            first.setdefault(name, i)
            last[name] = i
    delta = [0] * (count + 1)
    for tensor in program.tensors:
        start = 0 if tensor.role in ("in", "inout") else first.get(tensor.name)
        end = count - 1 if tensor.role in ("out", "inout") else last.get(tensor.name)
        if start is None or end is None:
            continue  # never touched
        delta[start] += tensor.nbytes
        delta[end + 1] -= tensor.nbytes
    peak, at, live = 0, 0, 0
    for i in range(count):
        live += delta[i]
        if live > peak:
            peak, at = live, i
    return peak, at


def check_dram_capacity(program: Program, config: NpuConfig, extra_bytes: int = 0,
                        extra: str = "") -> None:
    """Raise :class:`DeviceMemoryError` when the program needs more DRAM than the chip
    has (``dram.capacity_bytes``), saying how much and where. ``extra_bytes`` are live
    throughout besides the program's own (``extra`` says what they are: the weights of
    layers a partial simulation left out)."""
    peak, at = dram_peak(program)
    peak += extra_bytes
    capacity = config.dram.capacity_bytes
    if peak <= capacity:
        return
    where = program.commands[at].source if program.commands else ""
    also = f"; {extra}" if extra else ""
    need, have = _sizes(peak, capacity)
    raise DeviceMemoryError(
        f"{program.name} needs {need} of DRAM at once (at command {at}"
        f"{f', {where}' if where else ''}{also}) but {config.name} has {have} "
        f"(dram.capacity_bytes): use a smaller model or batch, a preset with more DRAM, "
        f"--set dram.capacity_bytes=..., or split it over chips (archsim llm --tp/--pp)",
        program.name)


def check_inputs_fit(name: str, input_bytes: int, config: NpuConfig) -> None:
    """The same refusal before compiling, when the program's inputs alone (its weights,
    live throughout) exceed the DRAM: a model far too big for the chip is told so,
    not that some kernel's tile does not fit a small scratchpad first."""
    capacity = config.dram.capacity_bytes
    if input_bytes > capacity:
        need, have = _sizes(input_bytes, capacity)
        raise DeviceMemoryError(
            f"{name} needs {need} of DRAM for its inputs and weights alone "
            f"but {config.name} has {have} (dram.capacity_bytes): use a smaller "
            f"model or batch, a preset with more DRAM, --set dram.capacity_bytes=..., or "
            f"split it over chips (archsim llm --tp/--pp)", name)


def _sizes(needed: int, capacity: int) -> tuple[str, str]:
    """Both sizes in the unit that fits each (1000 B had read 0.00 GiB), exact bytes
    where the rounded figures would read the same."""
    need, have = _size(needed), _size(capacity)
    if need == have:
        need, have = f"{need} ({needed:,} B)", f"{have} ({capacity:,} B)"
    return need, have


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:,} B"
