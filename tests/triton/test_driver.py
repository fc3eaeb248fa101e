"""Triton's host-side API on the npu: the active driver answers with the preset,
``do_bench`` and ``@triton.autotune`` time launches on the simulator, and ``warmup``
returns a kernel launchable as Triton's compiled kernels are."""

import logging

import torch
import triton
import triton.language as tl

import torch_bridge  # noqa: F401  (the npu device)
from torch_bridge import runtime


@triton.jit
def copy_scaled_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 1024})]


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def tuned_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_the_active_driver_answers_with_the_presets_numbers():
    config = runtime.get_config()
    active = triton.runtime.driver.active
    props = active.utils.get_device_properties(active.get_current_device())
    assert props["multiprocessor_count"] == config.cores
    assert props["max_shared_mem"] == config.core.scratchpad.size_bytes
    assert active.get_current_target().backend == "npu"
    assert active.get_active_torch_device() == torch.device("npu", 0)


def _launch(block, x, out):
    n = x.numel()
    return lambda: copy_scaled_kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)


def test_do_bench_returns_the_simulated_time():
    x, out = torch.randn(8192, device="npu"), torch.empty(8192, device="npu")
    before = torch.npu.elapsed_cycles()
    ms = triton.testing.do_bench(_launch(1024, x, out))
    cycles = torch.npu.elapsed_cycles() - before
    assert ms == runtime.get_config().cycles_to_seconds(cycles) * 1e3
    assert triton.testing.do_bench(_launch(1024, x, out), quantiles=[0.5, 0.2]) == [ms, ms]


def test_autotune_picks_the_config_with_the_lowest_simulated_time(caplog):
    """8192 floats: BLOCK=1024 is one program per core of atom's 8; BLOCK=64 is 128
    programs, 16 per core, each paying a load's and a store's fixed DMA and DRAM
    latency in turn, so 1024 is the faster, as do_bench says."""
    torch.manual_seed(2)
    x, out = torch.randn(8192), torch.empty(8192, device="npu")
    xn = x.to("npu")
    times = {b: triton.testing.do_bench(_launch(b, xn, out)) for b in (64, 1024)}
    assert times[1024] < times[64]
    with caplog.at_level(logging.WARNING, logger="archsim.triton"):
        tuned_copy_kernel[lambda meta: (triton.cdiv(8192, meta["BLOCK"]),)](xn, out, 8192)
    assert tuned_copy_kernel.best_config.kwargs == {"BLOCK": 1024}
    assert "autotune tuned_copy_kernel: chose BLOCK=1024 by simulated time" in caplog.text
    torch.testing.assert_close(out.cpu(), x * 2.0)


def test_warmup_returns_a_kernel_launchable_like_tritons():
    x = torch.randn(100)
    out = torch.empty(100, device="npu")
    warmed = copy_scaled_kernel.warmup(x.to("npu"), out, 100, BLOCK=64, grid=(2,))
    assert warmed.programs == 2
    warmed[(2,)](x.to("npu"), out, 100)
    torch.testing.assert_close(out.cpu(), x * 2.0)


@triton.jit
def persistent_softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, rows, cols,
                              BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Each program walks rows program_id, program_id + num_programs, ..."""
    for row in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=STAGES):
        offs = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + offs, mask=offs < cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_stride + offs, e / tl.sum(e, axis=0), mask=offs < cols)


def test_tutorial_style_occupancy_sizing_launches_one_program_per_core():
    """Triton tutorial 02's host code: warm up, ask the compiled kernel for registers
    and shared memory, size the grid by occupancy, launch with every argument."""
    props = triton.runtime.driver.active.utils.get_device_properties(0)
    x = torch.randn(100, 81)
    xn, y = x.to("npu"), torch.empty(100, 81, device="npu")
    warps = 8
    kernel = persistent_softmax_kernel.warmup(y, xn, 81, 81, 100, 81, BLOCK=128, STAGES=2,
                                              num_warps=warps, grid=(1,))
    kernel._init_handles()
    occupancy = min(props["max_num_regs"] // (kernel.n_regs * props["warpSize"] * warps),
                    props["max_shared_mem"] // kernel.metadata.shared)
    programs = min(props["multiprocessor_count"] * occupancy, 100)
    assert programs == runtime.get_config().cores
    kernel[(programs, 1, 1)](y, xn, 81, 81, 100, 81, 128, 2)
    torch.testing.assert_close(y.cpu(), torch.softmax(x, 1))
