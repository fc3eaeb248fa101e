"""Structural properties of compiled programs: SRAM within capacity, DMA traffic at
least compulsory, fusion saves DRAM round trips, the roofline bound holds, and every
optimization switch keeps programs valid."""

from __future__ import annotations

import math

import pytest
import torch

from archsim.simulator import Simulator
from compiler import CompileOptions, compile_graph, compile_op
from compiler.compile import clear_cache
from compiler.ir.verify import verify
from compiler_helpers import check_op, config

aten = torch.ops.aten
PRESETS = ["tiny", "edge", "atom", "tpu-v3", "tpu-v4", "ascend-910b"]


def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def workloads(preset: str) -> list[tuple[str, object, tuple]]:
    small = preset in ("tiny", "edge")
    n = 96 if small else 512
    return [
        ("mm", aten.mm.default, (meta(n + 3, n), meta(n, n - 5))),
        ("bmm", aten.bmm.default, (meta(4, n // 2, 64), meta(4, 64, n // 2))),
        ("add", aten.add.Tensor, (meta(n, n + 1), meta(n + 1))),
        ("softmax", aten._softmax.default, (meta(8, n, 33), -1, False)),
        ("gelu", aten.gelu.default, (meta(3, n, 17),)),
        ("mean", aten.mean.dim, (meta(4, n, 9), [1])),
        ("conv", aten.convolution.default, (meta(1, 8, 20, 20), meta(16, 8, 3, 3), None,
                                            [1, 1], [1, 1], [1, 1], False, [0, 0], 1)),
        ("permute", aten.permute.default, (meta(n, 40, 3), [2, 0, 1])),
    ]


def _io_bytes(args: tuple, out: torch.Tensor) -> tuple[int, int]:
    read = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
    return read, out.numel() * out.element_size()


def _flops(name: str, args: tuple) -> int:
    if name == "mm":
        (m, k), (_, n) = args[0].shape, args[1].shape
        return 2 * m * k * n
    if name == "bmm":
        b, m, k = args[0].shape
        return 2 * b * m * k * args[1].shape[-1]
    if name == "conv":
        return 2 * 16 * 20 * 20 * 8 * 9
    return 0


@pytest.mark.parametrize("preset", PRESETS)
def test_capacity_traffic_and_roofline(preset: str) -> None:
    cfg = config(preset)
    for name, op, args in workloads(preset):
        compiled = compile_op(op, args, {}, cfg)
        result = Simulator(cfg).run(compiled.program)
        for space, peak in result.sram_peak_bytes.items():
            capacity = (cfg.shared_sram.size_bytes if space == "shared"
                        else cfg.core.scratchpad.size_bytes)
            assert peak <= capacity, f"{preset} {name}: {space} peak {peak} > {capacity}"
        out = op(*args)
        read, written = _io_bytes(args, out)
        assert result.dram_bytes_read >= read, f"{preset} {name}: read {result.dram_bytes_read}"
        assert result.dram_bytes_written >= written, f"{preset} {name}"
        flop_bound = _flops(name, args) / cfg.peak_flops
        byte_bound = (read + written) / cfg.dram_bandwidth_bytes_per_s
        bound_cycles = math.floor(max(flop_bound, byte_bound) * cfg.clock_hz)
        assert result.total_cycles >= bound_cycles, \
            f"{preset} {name}: {result.total_cycles} cycles beat the roofline {bound_cycles}"


def _chain(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(torch.tanh(x * 2.0 + bias) - 0.5)


def _export(fn, *args):
    class Wrap(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)
    return torch.export.export(Wrap(), args).run_decompositions()


def test_fusion_saves_dram_round_trips() -> None:
    x, bias = torch.randn(64, 48), torch.randn(48)
    ep = _export(_chain, x, bias)
    cfg = config("tiny")
    # the hand-offs through DRAM, not through shared SRAM (compiler.residency)
    fused = compile_graph(ep, cfg, CompileOptions(on_chip_temps=False))
    unfused = compile_graph(ep, cfg, CompileOptions(fusion=False, on_chip_temps=False))
    (a,), fused_result = fused.run(x, bias)
    (b,), unfused_result = unfused.run(x, bias)
    torch.testing.assert_close(a, _chain(x, bias))
    torch.testing.assert_close(b, _chain(x, bias))
    stores = lambda p: sum(1 for c in p.commands if c.op.mnemonic == "store")  # noqa: E731
    assert stores(fused.program) < stores(unfused.program)
    assert fused_result.dram_bytes < unfused_result.dram_bytes
    assert len(fused.kernels) == 1 and len(unfused.kernels) == 5


def test_matmul_epilogue_is_fused() -> None:
    x, w, b = torch.randn(40, 24), torch.randn(24, 16), torch.randn(16)
    ep = _export(lambda x, w, b: torch.relu(x @ w + b), x, w, b)
    compiled = compile_graph(ep, config("tiny"))
    (out,), _ = compiled.run(x, w, b)
    torch.testing.assert_close(out, torch.relu(x @ w + b), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 1


@pytest.mark.parametrize("option", ["fusion", "double_buffering", "multicore", "multi_array",
                                    "on_chip_temps"])
def test_each_switch_keeps_programs_valid_and_correct(option: str) -> None:
    torch.manual_seed(0)
    x, w = torch.randn(70, 40), torch.randn(40, 50)
    ep = _export(lambda x, w: torch.nn.functional.gelu(x @ w).softmax(-1), x, w)
    for preset in ("tiny", "tpu-v3"):
        cfg = config(preset)
        off = compile_graph(ep, cfg, CompileOptions(**{option: False}))
        verify(off.program, cfg)
        (out,), _ = off.run(x, w)
        torch.testing.assert_close(out, torch.nn.functional.gelu(x @ w).softmax(-1),
                                   rtol=1e-4, atol=1e-4)


def test_double_buffering_and_multicore_pay_off() -> None:
    cfg = config("atom")
    a, b = meta(1024, 1024, dtype=torch.float16), meta(1024, 1024, dtype=torch.float16)
    cycles = {}
    for name, options in [("all", CompileOptions()),
                          ("no_double_buffering", CompileOptions(double_buffering=False)),
                          ("single_core", CompileOptions(multicore=False))]:
        compiled = compile_op(aten.mm.default, (a, b), {}, cfg, options)
        cycles[name] = Simulator(cfg).run(compiled.program).total_cycles
    assert cycles["all"] < cycles["no_double_buffering"]
    assert cycles["all"] * 4 < cycles["single_core"]
    single = compile_op(aten.mm.default, (a, b), {}, cfg, CompileOptions(multicore=False))
    assert {c.engine.split(".")[0] for c in single.program.commands} == {"core0"}


def test_compile_cache() -> None:
    clear_cache()
    cfg = config("tiny")
    a = compile_op(aten.mm.default, (meta(8, 8), meta(8, 8)), {}, cfg)
    b = compile_op(aten.mm.default, (meta(8, 8), meta(8, 8)), {}, cfg)
    c = compile_op(aten.mm.default, (meta(8, 9), meta(9, 8)), {}, cfg)
    d = compile_op(aten.mm.default, (meta(8, 8), meta(8, 8)), {}, config("atom"))
    # the schedule is shared; each call gets its own CompiledProgram (its own weights)
    assert a.program is b.program
    assert a.program is not c.program and a.program is not d.program


def test_commands_attributed_to_source_ops() -> None:
    compiled, result = check_op(aten.addmm.default, (torch.randn(5), torch.randn(7, 3),
                                                     torch.randn(3, 5)), "tiny")
    assert all(c.source for c in compiled.program.commands)
    assert {s.source for s in result.by_source} <= {"addmm_default"}


def test_views_sink_so_linear_and_gelu_fuse() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(24, 40)
    x = torch.randn(2, 9, 24)
    ep = _export(lambda x: torch.nn.functional.gelu(lin(x)), x)
    compiled = compile_graph(ep, config("tiny"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, torch.nn.functional.gelu(lin(x)), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 1


def test_conv_batchnorm_relu_fuse_after_weight_prep_is_hoisted() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
                                torch.nn.ReLU()).eval()
    model[1].running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 9, 9)
    ep = torch.export.export(model, (x,)).run_decompositions()
    compiled = compile_graph(ep, config("atom"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    conv_kernels = [k for k in compiled.kernels if k.rpartition(":")[2].startswith("convolution")]
    assert len(conv_kernels) == 1  # conv + bias + batch norm + relu; padding by addressing
    assert not any(k.rpartition(":")[2].startswith("relu") for k in compiled.kernels)


def test_run_without_simulation_uses_torch_reference() -> None:
    x, bias = torch.randn(8, 6), torch.randn(6)
    compiled = compile_graph(_export(_chain, x, bias), config("tiny"))
    (out,), result = compiled.run(x, bias, simulate=False)
    assert result is None
    torch.testing.assert_close(out, _chain(x, bias))


def test_linear_weights_land_transposed_by_the_dma() -> None:
    """A weight stored [out, in] reaches the arrays as [in, out] through loads whose SRAM
    side is a strided view: no vector transpose, same numbers as torch."""
    from compiler.ir.ops import Load, Transpose

    torch.manual_seed(0)
    lin = torch.nn.Linear(40, 24)
    x = torch.randn(6, 40)
    compiled = compile_graph(_export(lin, x), config("tiny"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, lin(x), rtol=1e-4, atol=1e-4)
    ops = [c.op for c in compiled.program.commands]
    assert not any(isinstance(op, Transpose) for op in ops)
    assert any(isinstance(op, Load) and op.dst.strides is not None and op.dst.strides[-2] == 1
               for op in ops)


def test_matmul_loads_run_two_steps_ahead_when_latency_shows() -> None:
    """64 x 1024 x 1024 on tpu-v3: a k-step's matmuls are shorter than the DMA latency
    plus its loads, so the tiling takes a third operand set and the loads of step s + 2
    are queued before the matmuls of step s."""
    from compiler.cost import choose_matmul_tiling
    from compiler.ir.dtypes import DType
    from compiler.ir.ops import Load, MatMul

    cfg = config("tpu-v3")
    tiling = choose_matmul_tiling(cfg, 1, 64, 1024, 1024, DType.f32, DType.f32, 1, 2, 2, 0,
                                  cfg.core.scratchpad.size_bytes)
    assert tiling.op_sets == 3
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024), torch.randn(1024, 1024)
    compiled = compile_graph(_export(lambda a, b: a @ b, a, b), cfg)
    (out,), _ = compiled.run(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-3)
    commands = compiled.program.commands
    first = next(i for i, c in enumerate(commands) if isinstance(c.op, MatMul))
    loads = [c.op for c in commands[:first] if isinstance(c.op, Load)]
    assert len(loads) == first
    # the k-steps whose operands are loaded before the first matmul: steps 0, 1 and 2
    a_name, b_name = compiled.input_names
    k_steps = {(op.src.tensor, (op.src.slices[1] if op.src.tensor == a_name
                                else op.src.slices[0]).start // tiling.kt) for op in loads}
    assert k_steps == {(t, s) for t in (a_name, b_name) for s in (0, 1, 2)}


def test_a_row_block_stays_resident_across_the_column_tiles() -> None:
    """A linear layer 512 -> 2048 on 256 rows (tpu-v3, f32): the activations are read
    from DRAM once, while every column tile streams its own weights."""
    from compiler.ir.ops import Load

    torch.manual_seed(0)
    lin = torch.nn.Linear(512, 2048)
    x = torch.randn(256, 512)
    compiled = compile_graph(_export(lin, x), config("tpu-v3"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, lin(x), rtol=1e-4, atol=1e-3)
    x_tensor = compiled.input_names[[s.kind for s in compiled.inputs].index("user_input")]
    x_bytes = sum(math.prod(c.op.dst.shape) * 4 for c in compiled.program.commands
                  if isinstance(c.op, Load) and c.op.src.tensor == x_tensor)
    assert x_bytes == x.numel() * 4


def test_swiglu_product_fuses_into_the_second_matmul() -> None:
    """silu(gate(x)) * up(x) on [batch, seq, hidden]: both products come back through
    views of 2-D matmuls; the product still joins the up projection's epilogue."""
    torch.manual_seed(0)
    gate, up = torch.nn.Linear(16, 24, bias=False), torch.nn.Linear(16, 24, bias=False)
    x = torch.randn(2, 5, 16)

    def swiglu(x):
        return torch.nn.functional.silu(gate(x)) * up(x)

    compiled = compile_graph(_export(swiglu, x), config("tiny"))
    (out,), _ = compiled.run(x)
    torch.testing.assert_close(out, swiglu(x), rtol=1e-4, atol=1e-4)
    assert len(compiled.kernels) == 2  # gate + silu, up + product
