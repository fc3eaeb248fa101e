"""An op on npu tensors refuses CPU tensor operands, as torch does for CUDA: ``x + y``
with ``y`` on the CPU used to return an npu tensor with no host-to-device copy charged
(the CPU tensor was read where it lay). CPU scalars stay allowed: 0-dim CPU tensors and
Python numbers, as with CUDA; so do copies between the devices and CPU index tensors."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import torch_bridge  # noqa: F401 - registers the npu device
from archsim.errors import ArchsimError, DeviceMismatchError
from torch_bridge import runtime

MISMATCH = (r"^Expected all tensors to be on the same device, but found at least two "
            r"devices, npu:0 and cpu! \(aten\.{op} got a CPU tensor of shape "
            r"\[{shape}\] as {argument}; move it with \.to\('npu'\), or pass a Python "
            r"number or a 0-dim tensor\)$")


def _operands() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    y = torch.randn(16, 16)
    return torch.randn(16, 16).npu(), y


class TestRefused:
    @pytest.mark.parametrize("op, argument, call", [
        ("add.Tensor", "other", lambda x, y: x + y),
        ("add.Tensor", "self", lambda x, y: y + x),
        ("mm.default", "mat2", lambda x, y: x @ y),
        ("cat.default", r"tensors\[1\]", lambda x, y: torch.cat([x, y])),
    ], ids=["npu + cpu", "cpu + npu", "npu @ cpu", "cat"])
    def test_a_cpu_operand_is_an_error(self, op, argument, call) -> None:
        x, y = _operands()
        line = runtime.reset_timeline()
        with pytest.raises(DeviceMismatchError, match=MISMATCH.format(
                op=op.replace(".", r"\."), shape="16, 16", argument=f"argument {argument}")):
            call(x, y)
        assert line.events == []  # refused before any work is charged

    def test_it_is_a_runtime_error_as_torch_raises(self) -> None:
        x, y = _operands()
        with pytest.raises(RuntimeError) as caught:
            x * y
        assert isinstance(caught.value, ArchsimError)

    def test_cpu_values_put_at_cpu_indices_are_an_error(self) -> None:
        x, _ = _operands()
        with pytest.raises(DeviceMismatchError, match="as argument values"):
            x[torch.tensor([0, 2])] = torch.ones(2, 16)


class TestAllowed:
    def test_a_cpu_scalar_tensor_and_a_python_number(self) -> None:
        x, _ = _operands()
        got = (x + torch.tensor(2.0)) * 3
        assert got.device.type == "npu"
        assert_close(got.cpu(), (x.cpu() + 2) * 3)

    def test_copies_between_the_devices(self) -> None:
        x, y = _operands()
        x.copy_(y)
        assert_close(x.cpu(), y)
        assert_close(y.npu().cpu(), y)

    def test_cpu_index_tensors(self) -> None:
        x, y = _operands()
        index = torch.tensor([0, 2])
        assert_close(x[index].cpu(), x.cpu()[index])
        x[index] = torch.tensor(5.0)
        assert (x.cpu()[index] == 5).all()

    @pytest.mark.filterwarnings("ignore::torch_bridge.fallback.HostFallbackWarning")
    def test_the_gradient_of_indexing_at_cpu_indices(self) -> None:
        """Its backward puts the gradient at the indices with ``_index_put_impl_`` (a host
        op on the npu), whose indices may be CPU tensors too."""
        x, _ = _operands()
        x.requires_grad_()
        index = torch.tensor([0, 2, 2])
        x[:, index].sum().backward()
        want = torch.zeros(16, 16)
        want[:, 0], want[:, 2] = 1.0, 2.0
        assert x.grad.device.type == "npu"
        assert_close(x.grad.cpu(), want)


def test_a_cpu_tensor_given_by_keyword_is_an_error() -> None:
    """Keyword arguments are checked as positional ones: ``out=`` on the CPU."""
    x, _ = _operands()
    with pytest.raises(DeviceMismatchError, match=MISMATCH.format(
            op=r"add\.out", shape="16, 16", argument="argument out")):
        torch.add(x, x, out=torch.empty(16, 16))
