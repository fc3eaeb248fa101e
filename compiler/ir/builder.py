"""A small helper for writing programs in Python (tests, lowerings, examples).

>>> b = ProgramBuilder("copy")
>>> x = b.tensor("x", (8, 8), DType.f32, "in")
>>> tile = SramRef("sram0", 0, (8, 8), DType.f32)
>>> load = b.add("core0.dma0", Load(b.ref("x", (0, 8), (0, 8)), tile))
>>> program = b.build()
"""

from __future__ import annotations

from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, DramTensor, Shape, Slice
from compiler.ir.ops import Command, Op, Program


class ProgramBuilder:
    def __init__(self, name: str, target: str = "") -> None:
        self.name = name
        self.target = target
        self._tensors: dict[str, DramTensor] = {}
        self._commands: list[Command] = []

    def tensor(self, name: str, shape: Shape, dtype: DType, role: str = "temp") -> DramTensor:
        t = DramTensor(name, tuple(shape), dtype, role)
        self._tensors[name] = t
        return t

    def ref(self, tensor: str, *ranges: tuple[int, ...]) -> DramRef:
        """A box of ``tensor``; each range is ``(start, stop)`` or ``(start, stop, step)``.
        With no ranges, the whole tensor."""
        if not ranges:
            ranges = tuple((0, n) for n in self._tensors[tensor].shape)
        return DramRef(tensor, tuple(Slice(*r) for r in ranges))

    def add(self, engine: str, op: Op, deps: tuple[int, ...] | list[int] = (),
            source: str = "") -> int:
        """Append a command; returns its id."""
        cid = len(self._commands)
        self._commands.append(Command(cid, engine, op, tuple(deps), source))
        return cid

    def build(self) -> Program:
        return Program(self.name, tuple(self._tensors.values()), tuple(self._commands),
                       self.target)
