"""A transfer's cost key holds every field its cost depends on and nothing positional
(``archsim.timing``): two loads that differ in any length, step, tensor or SRAM space
must not share a cost, and two that differ only in where the box starts must. A key
that dropped a field would let a plan reuse one transfer's cost for another's (issue
34's mutation audit: these fields survived their tests)."""

from __future__ import annotations

import dataclasses

import pytest

from archsim.host_link import Host
from archsim.timing import CommandTiming, cost_key
from compiler.ir.dtypes import DType
from compiler.ir.operands import DramRef, Slice, SramRef
from compiler.ir.ops import HostOp, HostTransfer, Load, Store

SRAM = SramRef("sram0", 0, (4, 8), DType.f32)


def _ref(*dims: tuple[int, int, int]) -> DramRef:
    return DramRef("t", tuple(Slice(start, stop, step) for start, stop, step in dims))


BOXES = {
    1: ((0, 8, 1),),
    2: ((0, 4, 1), (0, 8, 1)),
    3: ((0, 2, 1), (0, 4, 1), (0, 8, 1)),
}


def _variants(dims: tuple[tuple[int, int, int], ...]):
    """Each way of changing one field that a cost depends on: a dim's length or step."""
    for d, (start, stop, step) in enumerate(dims):
        for changed in ((start, stop + 1, step), (start, stop, step + 1)):
            yield d, dims[:d] + (changed,) + dims[d + 1:]


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("kind", ["load", "store"])
def test_every_length_and_step_is_in_the_key(kind: str, rank: int) -> None:
    def op(ref: DramRef, space: str = "sram0"):
        sram = dataclasses.replace(SRAM, space=space)
        return Load(ref, sram) if kind == "load" else Store(sram, ref)

    dims = BOXES[rank]
    base = cost_key(op(_ref(*dims)))
    for d, changed in _variants(dims):
        assert cost_key(op(_ref(*changed))) != base, f"dim {d} changed: {changed}"
    # another tensor, another SRAM space: another cost
    assert cost_key(op(DramRef("u", _ref(*dims).slices))) != base
    assert cost_key(op(_ref(*dims), space="shared")) != base
    # the same box elsewhere in the tensor (and elsewhere in SRAM): the same cost
    moved = tuple((start + 3, stop + 3, step) for start, stop, step in dims)
    assert cost_key(op(_ref(*moved))) == base


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_a_load_and_a_store_of_one_box_never_share_a_key(rank: int) -> None:
    ref = _ref(*BOXES[rank])
    assert cost_key(Load(ref, SRAM)) != cost_key(Store(SRAM, ref))


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_host_transfers_key_on_their_box_not_its_place(rank: int) -> None:
    dims = BOXES[rank]
    base = cost_key(HostTransfer(_ref(*dims), True))
    for d, changed in _variants(dims):
        assert cost_key(HostTransfer(_ref(*changed), True)) != base, f"dim {d}: {changed}"
    moved = tuple((start + 3, stop + 3, step) for start, stop, step in dims)
    assert cost_key(HostTransfer(_ref(*moved), True)) == base
    assert cost_key(HostTransfer(_ref(*dims), False)) != base  # the other direction


def test_a_host_op_costs_its_stated_cycles() -> None:
    op = HostOp("aten.qr", ("a",), ("q", "r"), 1234)
    assert Host().timing(op) == CommandTiming(fixed_cycles=1234)
    assert cost_key(op) != cost_key(dataclasses.replace(op, cycles=1235))
