"""DRAM capacity: a program needing more DRAM at once than the chip has is refused with
a DeviceMemoryError before it is simulated; the peak counts only tensors alive together."""

from __future__ import annotations

import pytest
import torch

import archsim
from archsim.errors import DeviceMemoryError
from compiler.ir.dram_peak import _dram_peak, check_dram_capacity, check_inputs_fit, dram_peak
from compiler.ir.text import parse_program


CHAIN = """program p
dram %A : f32[1024] in
dram %B : f32[2048] temp
dram %C : f32[512] out
 0: host host_op aten.a (%A) -> (%B) cycles=1
 1: host host_op aten.b (%B) -> (%C) cycles=1 after 0
 2: host host_op aten.c (%C) -> (%C) cycles=1 after 1
"""
"""A (4 KiB in) -> B (8 KiB temp) -> C (2 KiB out), each dead after its last use."""


class Stack(torch.nn.Module):
    def __init__(self, layers: int, width: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width, bias=False)
                                          for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_a_model_larger_than_the_device_is_refused_with_what_it_needs() -> None:
    """160 layers of 8192 x 8192 f16 weights (20 GiB) on a 16 GiB TPU v3 core."""
    with torch.device("meta"):
        model = Stack(160, 8192).half()
    x = torch.empty(1, 8192, dtype=torch.half, device="meta")
    with pytest.raises(DeviceMemoryError, match=r"needs 20.00 GiB of DRAM at once .* but "
                                                r"tpu-v3 has 16.00 GiB \(dram.capacity_bytes\)"):
        archsim.estimate(model, (x,), config="tpu-v3")


def test_a_program_whose_weights_alone_overflow_is_refused_before_compiling() -> None:
    """A 16384 x 20000 f32 projection (1.22 GiB of weights) on `tiny`'s 1 GiB: refused
    for its weights before any kernel's tiling is tried (as `archsim run llama-7b -c
    tiny` is, whose first error was a norm's row not fitting the 32 KiB scratchpad)."""
    with torch.device("meta"):
        model = torch.nn.Linear(16384, 20000, bias=False)
    x = torch.empty(1, 16384, device="meta")
    with pytest.raises(DeviceMemoryError, match=r"needs 1.22 GiB of DRAM for its inputs and "
                                                r"weights alone but tiny has 1.00 GiB"):
        archsim.estimate(model, (x,), config="tiny")


def test_a_program_whose_tensors_alive_together_overflow_is_refused_at_its_peak() -> None:
    """Inputs that fit (``CHAIN``'s 4 KiB of A) but a peak that does not (A and B, 12 KiB,
    at command 0, against 8 KiB)."""
    program = parse_program(CHAIN)
    config = archsim.load_config("tiny").with_overrides({"dram.capacity_bytes": 8192})
    check_inputs_fit("p", 4096, config)
    with pytest.raises(DeviceMemoryError, match=r"p needs 12.00 KiB of DRAM at once \(at "
                                                r"command 0.* but tiny has 8.00 KiB "):
        check_dram_capacity(program, config)
    # sizes that round alike are given in bytes too (they read "0.00 GiB" both)
    with pytest.raises(DeviceMemoryError, match=r"p needs 8.00 KiB \(8,193 B\) of DRAM for "
                                                r"its inputs and weights alone but tiny has "
                                                r"8.00 KiB \(8,192 B\)"):
        check_inputs_fit("p", 8193, config)


def test_the_cli_names_the_model_not_the_graph_and_a_size_that_reads(capsys) -> None:
    # It read "graph_b6ff8e77 needs 0.00 GiB ... but atom has 0.00 GiB".
    from archsim.cli import main

    assert main(["run", "gemm_64x64x64", "-c", "atom", "--perf-only",
                 "--set", "dram.capacity_bytes=1000"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    # its inputs: two 64 x 64 f32 matrices, 32 KiB
    assert err.startswith("archsim: error: gemm_64x64x64 needs 32.00 KiB of DRAM for its "
                          "inputs and weights alone but atom has 1,000 B "
                          "(dram.capacity_bytes)"), err


def test_the_peak_counts_tensors_alive_together() -> None:
    """A (4 KiB in) -> B (8 KiB temp) -> C (2 KiB out), each dead after its last use:
    A and B are live at command 0 (12 KiB, the peak); at command 1 A is dead and B and C
    hold 10 KiB; the sum of all three (14 KiB) is never live at once."""
    program = parse_program(CHAIN)
    assert dram_peak(program) == (4096 + 8192, 0)



def test_the_peak_is_remembered_only_for_the_same_program() -> None:
    """The remembered peak of one program is never the answer for another with the same
    name and tensors (here B is never touched, so the peak is A and C's 6 KiB), and
    asking again about the first gives its own peak."""
    text = """program p
dram %A : f32[1024] in
dram %B : f32[2048] temp
dram %C : f32[512] out
 0: host host_op aten.a (%A) -> ({out}) cycles=1
 1: host host_op aten.b ({out}) -> (%C) cycles=1 after 0
"""
    first = parse_program(text.format(out="%B"))
    second = parse_program(text.format(out="%C"))
    assert dram_peak(first) == dram_peak(first) == _dram_peak(first) == (4096 + 8192, 0)
    assert dram_peak(second) == _dram_peak(second) == (4096 + 2048, 0)
    assert dram_peak(first) == (4096 + 8192, 0)
