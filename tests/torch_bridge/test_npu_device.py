"""The npu device mechanics, one class per mechanism; every number is checked against CPU."""

from __future__ import annotations

import copy
import io
import os
import subprocess
import sys

import pytest
import torch
from torch.testing import assert_close

import torch_bridge
from archsim.config import load_config
from torch_bridge import eager, kernels, runtime

NPU = torch.device("npu:0")


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)


class TestRegistration:
    def test_autoload_at_import_torch(self) -> None:
        proc = run_python("import torch; t = torch.randn(2, device='npu'); "
                          "print(t.device, 'torch_bridge' in __import__('sys').modules)")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["npu:0", "True"]
        assert "Warning" not in proc.stderr

    def test_autoload_disabled(self) -> None:
        proc = run_python(
            "import sys, torch\n"
            "print('torch_bridge' in sys.modules, torch._C._get_privateuse1_backend_name())\n"
            "try:\n    torch.empty(1, device='npu')\nexcept RuntimeError:\n    print('no-npu')\n",
            TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["False", "privateuseone", "no-npu"]

    def test_import_torch_bridge_registers(self) -> None:
        proc = run_python("import torch_bridge, torch; print(torch.ones(1, device='npu').device)",
                          TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "npu:0"

    def test_import_torch_bridge_before_torch_with_autoload(self) -> None:
        # torch's autoload re-enters torch_bridge while it is still initializing
        proc = run_python("import torch_bridge.shapes, archsim, torch; "
                          "print(torch.ones(1, device='npu').device, callable(archsim.estimate))")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == ["npu:0", "True"]
        assert "Warning" not in proc.stderr

    def test_register_is_idempotent(self) -> None:
        torch_bridge.register()
        torch_bridge.register()
        assert torch_bridge.is_registered()

    def test_device_module(self) -> None:
        assert torch.npu.is_available() and torch.npu.device_count() == 1
        assert torch.npu.current_device() == 0
        torch.npu.set_device("npu:0")
        with pytest.raises(RuntimeError, match="one device"):
            torch.npu.set_device(1)
        torch.npu.synchronize()
        assert torch.npu.is_bf16_supported()
        assert set(torch.npu.get_amp_supported_dtype()) == {torch.float16, torch.bfloat16}
        assert set(torch.npu.__all__) <= set(dir(torch.npu))

    def test_set_config_and_clock(self) -> None:
        try:
            config = torch.npu.set_config("tiny")
            assert torch.npu.get_config() is config and torch.npu.elapsed_cycles() == 0
            torch.ones(4, device="npu").cpu()
            # the fill: 16 B at tiny's 16 B/cycle of DRAM = 1; the copy out: the host
            # link's 100 cycles of latency + 16 B at 4 B/cycle = 104
            assert torch.npu.elapsed_cycles() == 1 + 104
            assert torch.npu.elapsed_seconds() == torch.npu.elapsed_cycles() / config.clock_hz
            torch.npu.set_config(load_config("tpu-v3"))
            assert torch.npu.get_config().name == "tpu-v3"
        finally:
            torch.npu.set_config("atom")


class TestFactories:
    @pytest.mark.parametrize("make", [
        lambda d: torch.zeros(2, 3, device=d), lambda d: torch.ones(5, device=d),
        lambda d: torch.full((2, 2), 7.5, device=d), lambda d: torch.arange(10, device=d),
        lambda d: torch.arange(1.0, 4.0, 0.5, device=d), lambda d: torch.eye(3, device=d),
        lambda d: torch.zeros(3, dtype=torch.int64, device=d),
        lambda d: torch.empty(0, device=d).fill_(1),
    ])
    def test_matches_cpu(self, make) -> None:
        npu = make("npu")
        assert npu.device == NPU
        assert_close(npu.cpu(), make("cpu"))

    @pytest.mark.parametrize("fn", [torch.rand, torch.randn])
    def test_random_reproduces_cpu_with_manual_seed(self, fn) -> None:
        torch.manual_seed(7)
        expected = fn(3, 4)
        torch.manual_seed(7)
        assert_close(fn(3, 4, device="npu").cpu(), expected)
        torch.npu.manual_seed(7)
        assert_close(fn(3, 4, device="npu").cpu(), expected)

    def test_empty_strided_and_real_data_ptr(self) -> None:
        t = torch.empty_strided((2, 3), (1, 2), device="npu")
        assert t.stride() == (1, 2) and t.data_ptr() != 0
        assert t.untyped_storage().nbytes() == 6 * 4


class TestCopies:
    def test_round_trips(self) -> None:
        cpu = torch.randn(3, 5)
        assert_close(cpu.to("npu").cpu(), cpu)
        assert_close(cpu.npu().to("cpu"), cpu)
        assert_close(cpu.to("npu", non_blocking=True).cpu(), cpu)
        assert cpu.npu().is_npu

    def test_copy_both_ways_and_on_device(self) -> None:
        src = torch.randn(4, 4)
        dst = torch.zeros(4, 4, device="npu")
        dst.copy_(src)
        back = torch.empty(4, 4)
        back.copy_(dst, non_blocking=True)
        assert_close(back, src)
        other = torch.empty(4, 4, device="npu").copy_(dst.t())
        assert_close(other.cpu(), src.t())
        assert_close(dst.to(torch.float16).cpu(), src.to(torch.float16))

    def test_transfers_recorded_over_host_link(self) -> None:
        line = runtime.reset_timeline()
        config = torch.npu.get_config()
        torch.zeros(256, dtype=torch.float32).to("npu")
        event = line.events[-1]
        expected = config.host_link.latency_cycles + -(-1024 // config.host_link_bytes_per_cycle)
        assert (event.op, event.kind, event.bytes) == ("host_to_device", "transfer", 1024)
        assert event.cycles == expected


class TestViews:
    def test_views_share_storage(self) -> None:
        cpu = torch.arange(24.0).reshape(4, 6)
        npu = cpu.to("npu")
        views = [lambda t: t.view(6, 4), lambda t: t.t(), lambda t: t[1:, ::2],
                 lambda t: t.transpose(0, 1)[2], lambda t: t.unfold(1, 2, 2),
                 lambda t: t.as_strided((2, 2), (6, 1), 3), lambda t: t.reshape(-1),
                 lambda t: t.expand(2, 4, 6), lambda t: t.unsqueeze(0).squeeze(0),
                 lambda t: t.narrow(1, 1, 3), lambda t: t.diagonal()]
        for view in views:
            v = view(npu)
            assert v.untyped_storage().data_ptr() == npu.untyped_storage().data_ptr()
            assert_close(v.cpu(), view(cpu))

    def test_write_through_view(self) -> None:
        npu = torch.zeros(3, 4, device="npu")
        cpu = torch.zeros(3, 4)
        for t in (npu, cpu):
            t[1].fill_(2)
            t[:, 2].add_(1)
            t.t()[0, 2] = 5
        assert_close(npu.cpu(), cpu)

    def test_set_and_resize(self) -> None:
        a = torch.arange(6.0, device="npu")
        b = torch.empty(0, device="npu")
        b.set_(a.untyped_storage(), 2, (2, 2), (2, 1))
        assert_close(b.cpu(), torch.tensor([[2.0, 3.0], [4.0, 5.0]]))
        b.resize_(10)
        assert b.shape == (10,)
        assert_close(b[:4].cpu(), torch.tensor([2.0, 3.0, 4.0, 5.0]))

    def test_printing(self) -> None:
        text = repr(torch.tensor([1.5, -2.0]).to("npu"))
        assert text == "tensor([ 1.5000, -2.0000], device='npu:0')"


class TestInPlace:
    def test_in_place_ops_match_cpu(self) -> None:
        cpu = torch.randn(4, 5)
        npu = cpu.to("npu")
        for t in (cpu, npu):
            t.mul_(2).add_(1).clamp_(-1, 1)
            t[0].zero_()
            t.sub_(torch.ones(5, device=t.device))
        assert_close(npu.cpu(), cpu)

    def test_out_argument_returns_the_given_tensor(self) -> None:
        x = torch.randn(3, 3)
        out = torch.empty(3, 3, device="npu")
        got = torch.add(x.npu(), 1, out=out)
        assert got is out
        assert_close(out.cpu(), x + 1)

    def test_out_argument_with_wrong_shape_is_resized(self) -> None:
        x = torch.randn(3, 3)
        out = torch.empty(0, device="npu")
        torch.mul(x.npu(), 2, out=out)
        assert out.shape == (3, 3)
        assert_close(out.cpu(), x * 2)


class TestDtypes:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16,
                                       torch.int8, torch.int64, torch.bool])
    def test_dtype_round_trip_and_ops(self, dtype: torch.dtype) -> None:
        cpu = (torch.arange(-6, 6).reshape(3, 4) % 5).to(dtype)
        npu = cpu.to("npu")
        assert npu.dtype == dtype
        assert_close(npu.cpu(), cpu)
        if dtype == torch.bool:
            assert_close((npu & npu.logical_not()).cpu(), cpu & cpu.logical_not())
        else:
            assert_close((npu * 2 + npu).cpu(), cpu * 2 + cpu)
            assert_close(npu.sum(0).cpu(), cpu.sum(0))
        assert_close(npu.to(torch.float32).cpu(), cpu.to(torch.float32))


class TestFallback:
    def test_unknown_op_runs_on_host_and_is_timed(self) -> None:
        x = torch.randn(8, 8)
        line = runtime.reset_timeline()
        got = torch.linalg.qr(x.npu()).R  # no npu kernel: host fallback
        assert_close(got.cpu(), torch.linalg.qr(x).R)
        (host,) = [e for e in line.events if e.kind == "host"]
        assert "qr" in host.op and torch.npu.get_config().name == "atom"
        # atom: host 100 FLOP/cycle, host link 1000 cycles of latency then 64 B/cycle.
        # Q and R, 64 elements each: 128 FLOPs -> 2; up x and the out= Q and R (3 x 256
        # B -> 1000 + 12), down Q and R (512 B -> 1000 + 8)
        assert (host.flops, host.bytes, host.cycles) == (128, 768 + 512, 2 + 1012 + 1008)

    def test_host_time_estimate(self) -> None:
        config = load_config("tiny")
        try:
            torch.npu.set_config(config)
            a, b = torch.ones(4, 8, device="npu"), torch.ones(8, 2, device="npu")
            line = runtime.reset_timeline()
            with eager.on_host(torch.ops.aten.mm.default):  # mm is compiled by default
                a @ b
            event = line.events[-1]
            flops = 2 * 4 * 2 * 8
            link = config.host_link
            compute = -(-flops * config.clock_hz // int(link.host_flops_per_s))
            up = link.latency_cycles + -(-(32 + 16) * 4 // 4)
            down = link.latency_cycles + -(-(8 * 4) // 4)
            assert (event.op, event.kind) == ("aten.mm", "host")
            assert event.cycles == compute + up + down
            assert event.bytes == (32 + 16 + 8) * 4
        finally:
            torch.npu.set_config("atom")

    def test_kernel_table_is_consulted_first(self) -> None:
        calls: list[str] = []

        @kernels.register_npu_kernel(torch.ops.aten.mm.default)
        def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            calls.append("mm")
            if a.shape[0] == 1:
                return NotImplemented  # decline: host fallback runs it
            out = torch.empty(a.shape[0], b.shape[1], device="npu")
            from torch_bridge.storage import cpu_view
            torch.mm(cpu_view(a), cpu_view(b), out=cpu_view(out))
            runtime.record_device("aten.mm", 10, 0)
            return out

        try:
            x, y = torch.randn(3, 4), torch.randn(4, 2)
            line = runtime.reset_timeline()
            got = x.npu() @ y.npu()
            assert calls == ["mm"] and line.events[-1].kind == "device"
            assert_close(got.cpu(), x @ y)
            got = x[:1].npu() @ y.npu()
            assert calls == ["mm", "mm"] and line.events[-1].kind == "host"
            assert_close(got.cpu(), x[:1] @ y)
        finally:
            kernels.unregister_npu_kernel(torch.ops.aten.mm.default)

    def test_conv2d_and_backward(self) -> None:
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        x = torch.randn(2, 3, 6, 6)
        npu_conv = copy.deepcopy(conv).to("npu")
        xn = x.npu().requires_grad_()
        xc = x.clone().requires_grad_()
        npu_conv(xn).square().sum().backward()
        conv(xc).square().sum().backward()
        assert_close(xn.grad.cpu(), xc.grad)
        assert_close(npu_conv.weight.grad.cpu(), conv.weight.grad)
        assert_close(npu_conv.bias.grad.cpu(), conv.bias.grad)


class TestAutograd:
    def test_gradients_match_cpu(self) -> None:
        a, b = torch.randn(3, 4), torch.randn(4, 5)
        grads = []
        for device in ("cpu", "npu"):
            x = a.to(device, copy=True).requires_grad_()
            w = b.to(device, copy=True).requires_grad_()
            (x @ w).relu().log_softmax(-1).mean().backward()
            grads.append((x.grad.cpu(), w.grad.cpu()))
        assert_close(grads[1], grads[0])

    def test_no_grad(self) -> None:
        w = torch.randn(3, device="npu", requires_grad=True)
        with torch.no_grad():
            y = w * 2
        assert not y.requires_grad

    def test_mlp_training_matches_cpu_step_by_step(self) -> None:
        def losses(device: str) -> list[float]:
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                        torch.nn.Linear(16, 3)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            x = torch.randn(10, 8).to(device)
            target = torch.randint(0, 3, (10,)).to(device)
            out = []
            for _ in range(3):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), target)
                loss.backward()
                opt.step()
                out.append(loss.item())
            return out

        cpu, npu = losses("cpu"), losses("npu")
        # cross_entropy's nll_loss now runs on the device, whose sum adds in another
        # order than torch's CPU kernel: equal to the last bit or two
        assert_close(npu, cpu, rtol=1e-6, atol=0)
        assert npu[2] < npu[0]

    def test_exit_right_after_backward(self) -> None:
        code = ("import torch\n"
                "w = torch.randn(64, 64, device='npu', requires_grad=True)\n"
                "(w @ w).sum().backward()\n")
        for _ in range(3):
            proc = run_python(code)
            assert proc.returncode == 0, proc.stderr

    def test_compile_backend_entry_point(self) -> None:
        x = torch.randn(3, 4)
        fn = torch.compile(lambda t: (t * 2).relu().sum(0), backend="archsim")
        assert_close(fn(x.npu()).cpu(), (x * 2).relu().sum(0))

    def test_module_to_npu(self) -> None:
        model = torch.nn.Linear(4, 2).to("npu")
        assert all(p.device == NPU for p in model.parameters())
        assert model.weight.grad is None


class TestAutocast:
    @pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
    def test_casting_rules(self, dtype: torch.dtype) -> None:
        a, b = torch.randn(4, 8), torch.randn(8, 3)
        with torch.autocast("npu", dtype=dtype):
            mm = a.npu() @ b.npu()
            soft = torch.softmax(mm, -1)
            added = a.npu() + 1
        assert mm.dtype == dtype and soft.dtype == torch.float32
        assert added.dtype == torch.float32
        assert_close(mm.cpu(), a.to(dtype) @ b.to(dtype))
        assert_close(soft.cpu(), torch.softmax((a.to(dtype) @ b.to(dtype)).float(), -1))

    def test_autocast_backward(self) -> None:
        w = torch.randn(8, 3)
        wn = w.npu().requires_grad_()
        wc = w.clone().requires_grad_()
        x = torch.randn(4, 8)
        with torch.autocast("npu", dtype=torch.bfloat16):
            (x.npu() @ wn).float().sum().backward()
        (x.bfloat16() @ wc.bfloat16()).float().sum().backward()
        assert wn.grad.dtype == torch.float32
        assert_close(wn.grad.cpu(), wc.grad)


class TestMemory:
    def test_accounting(self) -> None:
        before = torch.npu.memory_allocated()
        torch.npu.reset_peak_memory_stats()
        t = torch.empty(1000, device="npu")
        assert torch.npu.memory_allocated() == before + 4000
        del t
        assert torch.npu.memory_allocated() == before
        assert torch.npu.max_memory_allocated() == before + 4000
        v = torch.zeros(10, device="npu")
        view = v[2:]
        del v
        assert torch.npu.memory_allocated() == before + 40  # the view keeps the storage
        del view
        assert torch.npu.memory_allocated() == before

    def test_out_of_memory(self) -> None:
        import gc

        gc.collect()
        in_use = torch.npu.memory_allocated()  # other tests' tensors may still be alive
        tiny = load_config("tiny").with_overrides({"dram.capacity_bytes": in_use + 4096})
        try:
            torch.npu.set_config(tiny)
            kept = torch.arange(512, dtype=torch.float32).to("npu")  # 2048 bytes
            with pytest.raises(torch.OutOfMemoryError) as info:
                torch.empty(1024, device="npu")
            assert str(info.value) == (
                f"npu out of memory: tried to allocate 4096 bytes with {in_use + 2048} "
                f"bytes in use of {in_use + 4096} bytes (dram.capacity_bytes of preset "
                f"'tiny'); tensors already on the device are kept")
            with pytest.raises(torch.OutOfMemoryError):
                kept * 2 + kept  # a fallback result that does not fit
            assert_close(kept.cpu(), torch.arange(512, dtype=torch.float32))
            assert torch.npu.memory_allocated() == in_use + 2048
        finally:
            torch.npu.set_config("atom")


class TestDeepcopy:
    def test_tensor_and_module(self) -> None:
        t = torch.randn(3, 4).npu()
        c = copy.deepcopy(t)
        assert c.device == NPU and c.data_ptr() != t.data_ptr()
        assert_close(c.cpu(), t.cpu())
        model = torch.nn.Linear(4, 2).npu()
        clone = copy.deepcopy(model)
        assert_close(clone.weight.cpu(), model.weight.cpu())
        assert clone.weight.data_ptr() != model.weight.data_ptr()

    def test_storage_clone(self) -> None:
        t = torch.randn(5).npu()
        s = t.untyped_storage().clone()
        assert s.device == NPU and s.data_ptr() != t.untyped_storage().data_ptr()
        assert_close(torch.empty(0, device="npu").set_(s).cpu(), t.cpu())


class TestSaveLoad:
    def test_round_trip(self) -> None:
        state = {"w": torch.randn(3, 4).npu(), "view": None}
        state["view"] = state["w"][1]
        buffer = io.BytesIO()
        torch.save(state, buffer)
        for map_location, device in ((None, NPU), ("cpu", torch.device("cpu")),
                                     ("npu", NPU)):
            buffer.seek(0)
            loaded = torch.load(buffer, map_location=map_location)
            assert loaded["w"].device == device
            assert_close(loaded["w"].cpu(), state["w"].cpu())
            assert_close(loaded["view"].cpu(), state["w"][1].cpu())

    def test_load_cpu_checkpoint_to_npu(self) -> None:
        buffer = io.BytesIO()
        model = torch.nn.Linear(3, 2)
        torch.save(model.state_dict(), buffer)
        buffer.seek(0)
        npu_model = torch.nn.Linear(3, 2).npu()
        npu_model.load_state_dict(torch.load(buffer, map_location="npu"))
        assert_close(npu_model.weight.cpu(), model.weight)


def test_lazy_conjugate_and_negative_bits_survive_the_device() -> None:
    """fft.ifft returns a lazily conjugated view and torch.conj sets the bit on npu
    tensors: copies and host fallbacks see the values, not the raw bytes."""
    import warnings

    x = torch.randn(8)
    c = torch.randn(5, dtype=torch.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fft runs on the host
        assert_close(torch.fft.ifft(x.to("npu")).cpu(), torch.fft.ifft(x))
    assert_close(torch.conj(c.to("npu")).cpu(), torch.conj(c))
    assert_close(torch.conj(c.to("npu")).imag.cpu(), torch.conj(c).imag)
