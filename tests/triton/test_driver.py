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
    assert "autotune tuned_copy_kernel: chose BLOCK: 1024" in caplog.text
    torch.testing.assert_close(out.cpu(), x * 2.0)


def test_warmup_returns_a_kernel_launchable_like_tritons():
    x = torch.randn(100)
    out = torch.empty(100, device="npu")
    warmed = copy_scaled_kernel.warmup(x.to("npu"), out, 100, BLOCK=64, grid=(2,))
    assert warmed.programs == 2
    warmed[(2,)](x.to("npu"), out, 100)
    torch.testing.assert_close(out.cpu(), x * 2.0)
