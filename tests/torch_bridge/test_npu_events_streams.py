"""torch.npu.Event and Stream as torch_openreg tests its device module: events time
regions in simulated device time (the clock torch_bridge.profile() reports), streams
exist and share the device's one timeline."""

from __future__ import annotations

import math

import pytest
import torch

import torch_bridge


def _work(x: torch.Tensor) -> torch.Tensor:
    y = (x @ x).relu() + 1.0
    return torch.linalg.qr(y).Q  # QR runs on the host: timed, on the same timeline


class TestEvent:
    def test_elapsed_time_is_the_profiled_simulated_time(self) -> None:
        x = torch.randn(64, 64).to("npu")
        start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
        with torch_bridge.profile() as prof:
            start.record()
            _work(x)
            end.record()
        end.synchronize()
        profiled_ms = prof.result.total_cycles / torch.npu.get_config().clock_hz * 1e3
        # the region crossed one host fallback, QR of 64x64 f32 (16 KiB) by its out=
        # variant: input, Q and R buffers up the host link, Q and R down; on atom each
        # crossing is 1000 latency + bytes/64, and the host does 100 FLOP/cycle
        (qr,) = [e.event for e in prof.result.events if e.event.kind == "host"]
        up, down = 1000 + 3 * 16384 // 64, 1000 + 2 * 16384 // 64
        assert prof.result.cycles("host") == up + down + math.ceil(qr.flops / 100)
        assert start.elapsed_time(end) == pytest.approx(profiled_ms, rel=0.01)
        assert end.cycles - start.cycles == torch.npu.elapsed_cycles() - start.cycles

    def test_as_a_cuda_user_times_a_loop(self) -> None:
        x = torch.randn(32, 32, device="npu")
        start = torch.npu.Event(enable_timing=True)
        end = torch.npu.Event(enable_timing=True)
        start.record(torch.npu.current_stream())
        for _ in range(3):
            x = torch.tanh(x @ x)
        end.record()
        torch.npu.synchronize()
        one = start.elapsed_time(end)
        # six device ops, each at least atom's load (64 setup + 300 DRAM latency),
        # vector or matrix pass (8 or more) and store (64 + 300) chain; on 4 KiB operands
        # (64 cycles of data per DMA) an op takes under twice that. 1 ms = 1e6 cycles.
        chain = 64 + 300 + 8 + 64 + 300
        assert 6 * chain <= one * 1e6 < 2 * 6 * chain
        end2 = torch.npu.Event(enable_timing=True)
        for _ in range(3):
            x = torch.tanh(x @ x)
        end2.record()
        assert start.elapsed_time(end2) == pytest.approx(2 * one, rel=0.05)

    def test_query_and_errors(self) -> None:
        e = torch.npu.Event(enable_timing=True)
        assert not e.query()
        e.record()
        assert e.query()
        untimed = torch.npu.Event()
        untimed.record()
        with pytest.raises(RuntimeError, match="enable_timing=True"):
            untimed.elapsed_time(e)
        with pytest.raises(RuntimeError, match="must be recorded"):
            e.elapsed_time(torch.npu.Event(enable_timing=True))

    def test_a_new_config_starts_a_new_timeline(self) -> None:
        before = torch.npu.get_config()
        e = torch.npu.Event(enable_timing=True)
        e.record()
        try:
            torch.npu.set_config("tiny")
            later = torch.npu.Event(enable_timing=True)
            later.record()
            with pytest.raises(RuntimeError, match="different device timelines"):
                e.elapsed_time(later)
        finally:
            torch.npu.set_config(before)


class TestStream:
    def test_default_and_current(self) -> None:
        default = torch.npu.default_stream()
        assert torch.npu.current_stream() is default and default.query()
        s = torch.npu.Stream()
        with torch.npu.stream(s):
            assert torch.npu.current_stream() is s
            y = torch.ones(4, device="npu") * 2
        assert torch.npu.current_stream() is default
        s.wait_stream(default)
        default.wait_stream(s)
        s.synchronize()
        assert torch.equal(y.cpu(), torch.full((4,), 2.0))

    def test_record_event_on_a_stream_and_as_a_context(self) -> None:
        s = torch.npu.Stream()
        with s:
            assert torch.npu.current_stream() is s
            e = s.record_event()
        assert e.query() and torch.npu.current_stream() is torch.npu.default_stream()
        torch.npu.default_stream().wait_event(e)


def test_memory_summary_lists_current_and_peak() -> None:
    x = torch.empty(1024, device="npu")
    text = torch.npu.memory_summary()
    lines = text.splitlines()
    assert lines[0].startswith("npu:0 memory (") and "bytes of DRAM" in lines[0]
    allocated = next(line for line in lines if line.startswith("allocated")).split()
    assert int(allocated[1].replace(",", "")) == torch.npu.memory_allocated()
    del x


class TestAccelerator:
    """torch.accelerator's synchronize and memory calls answer from torch.npu for npu
    (unwrapped, torch 2.13 raises or fails an internal assert for a Python backend)."""

    def test_synchronize_and_memory(self) -> None:
        assert torch.accelerator.current_accelerator().type == "npu"
        torch.accelerator.synchronize()
        torch.accelerator.synchronize("npu:0")
        x = torch.empty(256, device="npu")
        assert torch.accelerator.memory_allocated() == torch.npu.memory_allocated() >= 1024
        assert torch.accelerator.max_memory_allocated("npu") == torch.npu.max_memory_allocated()
        assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == \
            torch.npu.memory_allocated()
        free, total = torch.accelerator.get_memory_info()
        assert total == torch.npu.get_config().dram.capacity_bytes and free <= total
        torch.accelerator.reset_peak_memory_stats()
        torch.accelerator.empty_cache()
        del x

    def test_installed_once(self) -> None:
        from torch_bridge import accelerator

        wrapped = torch.accelerator.synchronize
        accelerator.install()
        assert torch.accelerator.synchronize is wrapped

    def test_generic_stream_and_event_objects(self) -> None:
        s = torch.Stream(device="npu")
        assert "device_type=npu" in repr(s) and s.query()
        e = torch.Event(device="npu")
        e.record()
        assert e.query()


def test_device_capability_is_not_a_cuda_one() -> None:
    assert torch.npu.get_device_capability() == (0, 0)
    assert torch.npu.is_bf16_supported()


def test_device_calls_as_a_cuda_user_writes_them() -> None:
    dev = torch.device("npu")
    assert torch.npu.is_available() and torch.npu.device_count() == 1
    torch.npu.set_device(0)
    torch.npu.manual_seed(0)
    props = torch.npu.get_device_properties(0)
    assert props.total_memory == torch.npu.get_config().dram.capacity_bytes
    assert (props.major, props.minor) == torch.npu.get_device_capability()
    assert props.name == torch.npu.get_device_name(0)
    state = torch.npu.get_rng_state()
    a = torch.rand(3, device=dev)
    torch.npu.set_rng_state(state)
    assert torch.equal(a.cpu(), torch.rand(3, device=dev).cpu())
    torch.npu.reset_peak_memory_stats()
    torch.npu.reset_max_memory_allocated()
    x = torch.randn(128, 128, device=dev)
    s = torch.npu.Stream()
    start, end = torch.npu.Event(enable_timing=True), torch.npu.Event(enable_timing=True)
    with torch.npu.stream(s):
        start.record()
        y = x @ x
        end.record()
    torch.npu.current_stream().wait_stream(s)
    end.synchronize()
    torch.npu.synchronize()
    # x @ x, 128x128 f32 on atom: 4 cores take 32 rows each. A core's one DMA engine
    # loads its A rows and all of B (16 + 64 KiB at 64 B/cycle, after 64 setup + 300 DRAM
    # latency); its last matmul (K = 64 of 128) waits for them: ws with (Sr, Sc, T) =
    # (64, 128, 32) on a 64x32 array is (2*64 + 32 + 32 - 2) * 1 * 4 = 760; then the
    # store of 16 KiB (64 + 300 + 256). Overlap cannot beat that chain; twice it bounds it.
    floor = (64 + 300 + 80 * 1024 // 64) + 760 + (64 + 300 + 16 * 1024 // 64)
    assert floor <= start.elapsed_time(end) * 1e6 < 2 * floor
    assert torch.npu.max_memory_allocated() >= torch.npu.memory_allocated() >= 2 * x.nbytes
    assert torch.npu.memory_stats()["allocated_bytes.all.peak"] == torch.npu.max_memory_allocated()
    free, total = torch.npu.mem_get_info()
    assert free + torch.npu.memory_reserved() == total
    torch.npu.empty_cache()
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu(), rtol=1e-4, atol=1e-3)
