"""Before lowering a program: when each value dies, and which operations fold into
others (an accumulating ``acc += tl.dot(a, b)``, a tile loaded only to be transposed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from compiler.triton.trace import Const, ProgramTrace


@dataclass
class ProgramPlan:
    dying: dict[int, list[int]] = field(default_factory=dict)
    """Op index -> values whose last use it is (or whose definition, if never used)."""
    skip: set[int] = field(default_factory=set)
    """Ops done by an earlier one, or that no store needs."""
    accumulate: dict[int, tuple[int, int]] = field(default_factory=dict)
    """Dot index -> (accumulator value, value the folded add defines)."""
    transposed: dict[int, tuple[tuple[int, ...], int]] = field(default_factory=dict)
    """Load index -> (perm, value the folded transpose defines)."""


def plan_program(program: ProgramTrace) -> ProgramPlan:
    ops = program.ops
    defined: dict[int, int] = {}
    uses: dict[int, list[int]] = {}
    for i, op in enumerate(ops):
        if op.out is not None:
            defined[op.out] = i
        for arg in op.args:
            if not isinstance(arg, Const):
                uses.setdefault(arg, []).append(i)
    plan = ProgramPlan()
    plan.skip |= dead_ops(ops)
    for i, op in enumerate(ops):
        if op.kind == "dot":
            _fold_add(plan, ops, i, defined, uses)
        elif op.kind == "load":
            _fold_transpose(plan, ops, i, uses)
    for vid, at in defined.items():
        last = max(uses.get(vid, [at]))
        plan.dying.setdefault(last, []).append(vid)
    return plan


def dead_ops(ops: list) -> set[int]:
    """Operations no store depends on: index arithmetic on loaded values (a block
    number times a stride, a sequence length's block count) that only decided addresses
    or control flow, which the trace already resolved. Loads stay: the device reads an
    index before it can use it."""
    live: set[int] = set()
    defined = {op.out: i for i, op in enumerate(ops) if op.out is not None}
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.kind == "store" or i in live:
            live.add(i)
            live.update(defined[a] for a in op.args if not isinstance(a, Const)
                        and a in defined)
    return {i for i, op in enumerate(ops) if i not in live and op.kind != "load"}


def _zero(arg: object) -> bool:
    return isinstance(arg, Const) and arg.uniform and arg.value == 0.0


def _fold_add(plan: ProgramPlan, ops: list, i: int, defined: dict[int, int],
              uses: dict[int, list[int]]) -> None:
    """``x + dot(a, b, 0)`` where x dies there: the matrix engine accumulates into x."""
    dot = ops[i]
    if not _zero(dot.args[2]) or uses.get(dot.out, []).__len__() != 1:
        return
    j = uses[dot.out][0]
    add = ops[j]
    if add.kind != "binary" or add.attrs.get("op") != "add":
        return
    others = [a for a in add.args if a != dot.out]
    if len(others) != 1 or isinstance(others[0], Const):
        return
    x = others[0]
    if defined.get(x, i) >= i or add.shape != dot.shape or uses[x][-1] != j:
        return
    if any(i < u < j for u in uses[x]):
        return
    plan.accumulate[i] = (x, add.out)
    plan.skip.add(j)


def _fold_transpose(plan: ProgramPlan, ops: list, i: int, uses: dict[int, list[int]]
                    ) -> None:
    """A tile loaded only to be transposed is loaded transposed (strided DMA writes)."""
    load = ops[i]
    users = uses.get(load.out, [])
    if len(users) == 1 and ops[users[0]].kind == "trans":
        j = users[0]
        plan.transposed[i] = (ops[j].attrs["perm"], ops[j].out)
        plan.skip.add(j)
