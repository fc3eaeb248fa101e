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
