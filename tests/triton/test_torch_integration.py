"""A user's own Triton kernel, registered the standard way, on the "npu" device:
eagerly, under torch.compile(backend="archsim"), and in archsim.estimate; plus bare
launches and ahead-of-time warmup."""

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

import archsim
import torch_bridge
from torch_bridge.triton_launch import warmup


@triton.jit
def scale_shift_relu_kernel(x_ptr, w_ptr, b_ptr, out_ptr, rows, cols,
                            BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.arange(0, BLOCK_C)
    keep = (r[:, None] < rows) & (c[None, :] < cols)
    x = tl.load(x_ptr + r[:, None] * cols + c[None, :], mask=keep, other=0.0)
    w = tl.load(w_ptr + c, mask=c < cols, other=0.0)
    b = tl.load(b_ptr + c, mask=c < cols, other=0.0)
    y = tl.maximum(x * w[None, :] + b[None, :], 0.0)
    tl.store(out_ptr + r[:, None] * cols + c[None, :], y, mask=keep)


@triton_op("archsim_test::scale_shift_relu", mutates_args=())
def scale_shift_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    rows, cols = x.shape
    wrap_triton(scale_shift_relu_kernel)[(triton.cdiv(rows, 16),)](
        x, w, b, out, rows, cols, BLOCK_R=16, BLOCK_C=triton.next_power_of_2(cols))
    return out


class Block(torch.nn.Module):
    def __init__(self, cols: int) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(cols))
        self.b = torch.nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_shift_relu(x, self.w, self.b) * 2.0


KERNEL_FLOOR = (64 + 300 + (16 * 40 * 4 + 2 * 40 * 4) // 64) + 8 + (64 + 300 + 16 * 40 * 4 // 64)
"""scale_shift_relu_kernel on 50x40 f32 with 4 programs of 16 rows, each on its own atom
core: load its 16x40 rows and w, b (2880 B at 64 B/cycle after 64 DMA setup + 300 DRAM
latency), one vector pass (pipeline 8 at the least), store its rows (64 + 300 + 2560 B)."""

TIMES_TWO_FLOOR = (64 + 300 + 50 * 40 * 4 // 64) + 8 + (64 + 300 + 50 * 40 * 4 // 64)
"""``* 2.0`` on the kernel's 50x40 f32 result (8000 B in and out) after it."""

HANDOFF_FLOOR = KERNEL_FLOOR + TIMES_TWO_FLOOR - 2 * 300
"""The kernel then ``* 2.0`` in one program: the result between them goes through
atom's shared SRAM (:mod:`compiler.residency`), its store and load without the DRAM
latency."""


def _reference(x, w, b):
    return torch.relu(x * w + b)


def _inputs():
    torch.manual_seed(6)
    return torch.randn(50, 40), torch.randn(40), torch.randn(40)


def test_eager_on_npu_matches_cpu_with_device_time_and_no_host_work():
    x, w, b = _inputs()
    with torch_bridge.profile() as prof:
        out = scale_shift_relu(x.to("npu"), w.to("npu"), b.to("npu"))
    torch.testing.assert_close(out.cpu(), _reference(x, w, b), rtol=1e-4, atol=1e-4)
    result = prof.result
    assert result.host_cycles == 0
    kernel = next(r for r in result.ops if r.name == "scale_shift_relu_kernel")
    assert kernel.calls == 1
    assert KERNEL_FLOOR <= kernel.device_cycles < 2 * KERNEL_FLOOR


def test_torch_compile_lowers_the_kernel_inside_the_graph():
    x, w, b = _inputs()
    block = Block(40)
    expected = _reference(x, block.w.detach(), block.b.detach()) * 2
    compiled = torch.compile(block.to("npu"), backend="archsim")
    with torch_bridge.profile() as prof, torch.no_grad():  # no autograd formula: inference
        out = compiled(x.to("npu"))
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    result = prof.result
    assert result.host_cycles == 0
    floor = HANDOFF_FLOOR
    assert floor <= result.device_cycles < 2 * floor
    sources = {c.source for run in result.runs for c in run.program.commands}
    assert "scale_shift_relu_kernel" in sources


def test_estimate_times_the_kernel_from_shapes_alone():
    x, _, _ = _inputs()
    result = archsim.estimate(Block(40), (x,), config="atom")
    sources = {c.source for c in result.program.commands}
    assert "scale_shift_relu_kernel" in sources
    floor = HANDOFF_FLOOR
    assert floor <= result.total_cycles < 2 * floor


def test_a_bare_launch_on_npu_tensors_runs_on_the_simulator():
    x, w, b = _inputs()
    out = torch.empty(50, 40, device="npu")
    before = torch.npu.elapsed_cycles()
    scale_shift_relu_kernel[(4,)](x.to("npu"), w.to("npu"), b.to("npu"), out, 50, 40,
                                  BLOCK_R=16, BLOCK_C=64)
    assert torch.npu.elapsed_cycles() > before
    torch.testing.assert_close(out.cpu(), _reference(x, w, b), rtol=1e-4, atol=1e-4)


def test_warmup_compiles_ahead_of_time_from_meta_tensors():
    meta = [torch.empty(50, 40, device="meta"), torch.empty(40, device="meta"),
            torch.empty(40, device="meta"), torch.empty(50, 40, device="meta")]
    program = warmup(scale_shift_relu_kernel, *meta, 50, 40, grid=(4,), BLOCK_R=16,
                     BLOCK_C=64)
    assert program.programs == 4 and program.written == ("out_ptr",)
    assert KERNEL_FLOOR <= program.simulate().total_cycles < 2 * KERNEL_FLOOR
