"""``archsim run FILE`` on a model inverting a matrix: torch.export wraps the inverse's
error check in ``with_effects``, which stopped the compile ("node with_effects:
with_effects has no lowering and its outputs are not all tensors", naming neither op).
The inverse and its check now run as timed host work, each listed under its node."""

from __future__ import annotations

import re
from pathlib import Path

from archsim.cli.main import main

MODEL = """import torch
class M(torch.nn.Module):
    def forward(self, x):
        return torch.linalg.inv(x @ x.T + torch.eye(32))
model = M()
example_inputs = (torch.randn(32, 32),)
"""


def test_run_a_model_with_an_effectful_op(tmp_path: Path, capsys) -> None:
    path = tmp_path / "inv.py"
    path.write_text(MODEL)
    assert main(["run", str(path), "--config", "atom"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"max \|npu - torch cpu\| = \S+ over 1 output", err), err
    host = out[out.index("Host work:"):]
    assert re.search(r"host_op +linalg_inv_ex", host) and \
        re.search(r"host_op +with_effects", host), host
