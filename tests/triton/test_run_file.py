"""``archsim run FILE`` on a model whose forward calls a user's own ``triton_op``: the
kernel is traced and lowered inside the graph (no host work) and the numbers match
torch on CPU."""

import re
from pathlib import Path

from archsim.cli.main import main

MODEL_FILE = '''
import torch, triton, triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n, other=0.0)
    tl.store(out_ptr + i, x * x, mask=i < n)


@triton_op("archsim_file_test::square", mutates_args=())
def square(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(square_kernel)[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return square(self.linear(x)) + 1.0


torch.manual_seed(0)
model = Model().eval()
example_inputs = (torch.randn(8, 64),)
'''


def test_run_a_model_file_with_a_triton_op(tmp_path: Path, capsys) -> None:
    path = tmp_path / "triton_model.py"
    path.write_text(MODEL_FILE)
    assert main(["run", str(path), "--config", "tiny"]) == 0
    out, err = capsys.readouterr()
    worst = float(re.search(r"max \|npu - torch cpu\| = (\S+)", err).group(1))
    assert worst < 1e-4, err
    assert "square_kernel" in out and "host" not in out.split("square_kernel")[0][-200:]


ADD_FILE = '''
import torch, triton, triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(out_ptr + i, x + tl.load(y_ptr + i, mask=i < n), mask=i < n)


@triton_op("archsim_file_test::add_NAME", mutates_args=())
def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 64)

    def forward(self, x):
        return add(self.linear(x), x) * 2.0


torch.manual_seed(0)
model = Model().eval()
example_inputs = (torch.randn(SHAPE),)
'''


def _add_model(tmp_path: Path, name: str, shape: str) -> Path:
    """The kernel reads the user input x: torch.export returns x as a possibly mutated
    input next to the model's output; the output, not x, is compared with torch."""
    path = tmp_path / f"{name}.py"
    path.write_text(ADD_FILE.replace("NAME", name).replace("SHAPE", shape))
    return path


def test_the_models_output_is_compared_on_rank_2_and_rank_3_inputs(tmp_path, capsys):
    for name, shape in (("rank2", "8, 64"), ("rank3", "2, 8, 64")):
        assert main(["run", str(_add_model(tmp_path, name, shape)), "--config", "tiny"]) == 0
        err = capsys.readouterr().err
        worst = float(re.search(r"max \|npu - torch cpu\| = (\S+) over 1 output", err)
                      .group(1))
        assert worst < 1e-5, err


def test_numbers_that_disagree_with_torch_exit_non_zero(tmp_path, capsys, monkeypatch):
    """A lowering that subtracts where the kernel adds: the run fails, naming the output
    and the difference."""
    import dataclasses

    from compiler.triton.handlers import HANDLERS

    binary = HANDLERS["binary"]

    def wrong(p, index, op):
        if op.attrs["op"] == "add":
            op = dataclasses.replace(op, attrs={**op.attrs, "op": "sub"})
        binary(p, index, op)

    monkeypatch.setitem(HANDLERS, "binary", wrong)
    assert main(["run", str(_add_model(tmp_path, "wrong", "2, 8, 64")), "--config",
                 "tiny"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"output 0: max \|npu - torch cpu\| = \S+, over the torch.float32 "
                     r"tolerance", err), err


GATHER_FILE = '''
import torch, triton, triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def rows_kernel(idx_ptr, count_ptr, src_ptr, out_ptr, D: tl.constexpr):
    r = tl.program_id(0)
    if r < tl.load(count_ptr):
        offs = tl.arange(0, D)
        tl.store(out_ptr + r * D + offs, tl.load(src_ptr + tl.load(idx_ptr + r) * D + offs))


@triton_op("archsim_file_test::rows", mutates_args=())
def rows(idx: torch.Tensor, count: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(idx.shape[0], src.shape[1], device=src.device)
    wrap_triton(rows_kernel)[(idx.shape[0],)](idx, count, src, out, D=src.shape[1])
    return out


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(10, 32))

    def forward(self, idx, count):
        return rows(idx, count, self.table) * 2.0


torch.manual_seed(0)
model = Model().eval()
example_inputs = (torch.tensor([7, 2, 2, 9, 0, 4], dtype=torch.int32),
                  torch.tensor([4], dtype=torch.int32))
'''


def test_a_kernel_indexed_by_the_models_inputs_runs_for_their_values(tmp_path, capsys):
    """archsim run knows the inputs: the branch (rows past count stay zero) and the
    gather through idx are built for them and the numbers match torch; estimating on
    meta tensors names the input it needs."""
    path = tmp_path / "gather_model.py"
    path.write_text(GATHER_FILE)
    assert main(["run", str(path), "--config", "tiny"]) == 0
    err = capsys.readouterr().err
    assert float(re.search(r"max \|npu - torch cpu\| = (\S+)", err).group(1)) == 0.0, err
    assert main(["run", str(path), "--config", "tiny", "--perf-only"]) == 1
    err = capsys.readouterr().err
    assert "depends on the values of count_ptr" in err, err
