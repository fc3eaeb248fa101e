"""Effectful ops (``with_effects``): ``torch.linalg.inv`` checks its result with
``aten._linalg_check_errors`` and ``aten._print`` prints; torch wraps both in the
``with_effects`` higher-order op with an empty effect token threaded through. The
compiler runs the wrapped op on the host, as any op without a kernel: ``archsim run``
of a model inverting a matrix failed with "node with_effects: with_effects has no
lowering", naming neither op."""

from __future__ import annotations

import pytest
import torch

import compiler
from archsim.app.numerics import split_outputs
from archsim.errors import UnsupportedOpError
from compiler.ir.ops import HostOp, HostTransfer
from compiler.options import CompileOptions
from compiler_helpers import config


class Inverse(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(x @ x.T + torch.eye(32))


class Printing(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.ops.aten._print("archsim effect")
        return x * 2


def test_an_inverse_runs_its_error_check_on_the_host() -> None:
    torch.manual_seed(0)
    x = torch.randn(32, 32)
    exported = compiler.export_model(Inverse(), (x,))
    compiled = compiler.compile_graph(exported, config("atom"))
    assert compiled.fallbacks == ("linalg_inv_ex: aten.linalg_inv_ex.default",
                                  "with_effects: aten._linalg_check_errors.default")
    outputs, _ = compiled.run(x)  # the user's input only: the token feeds itself
    (got,), _ = split_outputs(exported, outputs)
    torch.testing.assert_close(got, Inverse()(x))


def test_an_effect_token_crosses_no_link() -> None:
    """The print reads and writes only the token (no elements): one host op of the
    host's shortest time, 1 cycle, and no transfer (each would pay the link's
    latency, 1,000 cycles on atom, for no bytes)."""
    exported = compiler.export_model(Printing(), (torch.randn(4, 4),))
    compiled = compiler.compile_graph(exported, config("atom"))
    effect = [c.op for c in compiled.program.commands if c.source == "with_effects"]
    assert [type(op) for op in effect] == [HostOp]
    assert effect[0].cycles == 1
    assert not any(isinstance(c.op, HostTransfer) for c in compiled.program.commands)


def test_without_host_fallback_the_error_names_the_wrapped_op() -> None:
    exported = compiler.export_model(Printing(), (torch.randn(4, 4),))
    with pytest.raises(UnsupportedOpError, match=r"^node with_effects: no lowering for "
                       r"aten\._print\.default \(an effectful op, in with_effects\) and "
                       r"host fallback is off$"):
        compiler.compile_graph(exported, config("atom"), CompileOptions(host_fallback=False))
