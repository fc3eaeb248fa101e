# Adapted for archsim's "npu" device from PyTorch's torch_openreg tests
# (test/cpp_extensions/open_registration_extension/torch_openreg/tests/), as
# rewritten equivalents under the same test names. PyTorch's license:
#
# Copyright (c) 2016-     Facebook, Inc            (Adam Paszke)
# All rights reserved. (See PyTorch's LICENSE file for all contributors.)
#
# Redistribution and use in source and binary forms, with or without
# modification, are permitted provided that the following conditions are met:
#
# 1. Redistributions of source code must retain the above copyright
#    notice, this list of conditions and the following disclaimer.
# 2. Redistributions in binary form must reproduce the above copyright
#    notice, this list of conditions and the following disclaimer in the
#    documentation and/or other materials provided with the distribution.
# 3. Neither the names of Facebook, Deepmind Technologies, NYU, NEC Laboratories
#    America and IDIAP Research Institute nor the names of its contributors may be
#    used to endorse or promote products derived from this software without
#    specific prior written permission.
#
# THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS"
# AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE
# IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE
# ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT OWNER OR CONTRIBUTORS BE
# LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
# CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF
# SUBSTITUTE GOODS OR SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS
# INTERRUPTION) HOWEVER CAUSED AND ON ANY THEORY OF LIABILITY, WHETHER IN
# CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR OTHERWISE)
# ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
# POSSIBILITY OF SUCH DAMAGE.
"""Factories, copies, views and the host fallback (upstream test_ops.py)."""

import pytest
import torch
from _common import NO_QUANTIZED, OPENREG_OPS, torch_bridge  # noqa: F401

cpu = torch.device("cpu")


def test_empty():
    x = torch.empty(3, device="npu")
    assert x.device.type == "npu" and x.shape == (3,)
    with torch._subclasses.fake_tensor.FakeTensorMode():
        z = torch.empty(3, 3, device="npu") + torch.empty(3, 3, device="npu:0")
        assert z.device.type == "npu" and z.shape == (3, 3)


@pytest.mark.skip(reason="torch 2.13 has no named tensors: torch.empty takes no names= "
                         "on any device (CPU neither)")
def test_empty_names():
    pass


def test_zeros():
    y = torch.zeros(3, device="npu")
    assert y.device.type == "npu" and y.shape == (3,)


def test_tensor():
    z = torch.tensor((), device="npu")
    assert z.device.type == "npu" and z.shape == (0,)


def test_copy_same_device():
    torch.testing.assert_close(torch.ones(10, device="npu").clone().cpu(), torch.ones(10))


def test_cross_device_copy():
    a = torch.rand(10)
    torch.testing.assert_close(a.to("npu").add(2).to("cpu"), a + 2)


@pytest.mark.skip(reason="npu has one device (npu:0); openreg has two")
def test_cross_diff_devices_copy():
    pass


def test_masked_select():
    t = torch.randn(10)
    out = torch.masked_select(t.to("npu"), t.to("npu").gt(0))
    torch.testing.assert_close(out.cpu(), t.masked_select(t.gt(0)))


def test_expand():
    x = torch.tensor([[1], [2], [3]], device="npu")
    y = x.expand(3, 2)
    assert torch.equal(y.cpu(), torch.tensor([[1, 1], [2, 2], [3, 3]]))
    assert x.data_ptr() == y.data_ptr()


def test_resize():
    x = torch.randn(4, 4).npu()
    assert x.storage().size() == 16
    x.resize_(2, 2, 2, 2)
    assert x.size() == (2, 2, 2, 2) and x.storage().size() == 16


def test_printing():
    assert "npu:0" in str(torch.ones(20, device="npu"))


def test_backend_dispatchstub():
    x = torch.randn(2, 2, 3)
    torch.testing.assert_close(torch.abs(x.to("npu")).cpu(), torch.abs(x))
    o = torch.randn(2, 2, 6)
    o_npu = o.to("npu")
    for step in (2, 3):
        torch.abs(x, out=o[:, :, 0:6:step])
        torch.abs(x.to("npu"), out=o_npu[:, :, 0:6:step])
        torch.testing.assert_close(o_npu.cpu(), o)


@NO_QUANTIZED
def test_quantize():
    pass


@OPENREG_OPS
def test_compile_autograd_function_returns_self():
    pass


@OPENREG_OPS
def test_compile_autograd_function_aliasing():
    pass


def test_scalar_type_fallback():
    expected = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 1, 2, 1, 2, 2]])
    assert torch.equal(torch.triu_indices(3, 3, device="npu").cpu(), expected)


def test_tensor_type_fallback():
    x = torch.tensor([[1.0, 2, 3], [2, 3, 4]]).to("npu")
    y = torch.tensor([1.0, 0, 2]).to("npu")
    assert not x.is_cpu
    torch.testing.assert_close(torch.sub(x, y).cpu(), torch.tensor([[0.0, 2, 1], [1, 3, 2]]))
    i = torch.tensor([1, 0]).to("npu")
    torch.testing.assert_close(x[i, i].cpu(), torch.tensor([3.0, 1]))


def test_tensorlist_type_fallback():
    v = torch.tensor([1.0, 2, 3]).to("npu")
    z = torch._foreach_add((v, v), (v, v))
    for t in z:
        torch.testing.assert_close(t.cpu(), torch.tensor([2.0, 4, 6]))


def test_empty_with_memory_format():
    x = torch.empty(1, 2, 3, 4, device="npu", memory_format=torch.channels_last)
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert torch.empty(2, 3, 4, device="npu", memory_format=torch.contiguous_format
                       ).is_contiguous()


def test_empty_strided():
    x = torch.empty_strided((3, 4), (4, 1), device="npu")
    assert x.device.type == "npu" and x.shape == (3, 4) and x.stride() == (4, 1)


def test_ones():
    assert torch.all(torch.ones(3, 4, device="npu") == 1)


def test_ones_like():
    y = torch.ones_like(torch.randn(3, 4, device="npu"))
    assert y.device.type == "npu" and torch.all(y == 1)


def test_randn():
    assert torch.randn(3, 4, device="npu").shape == (3, 4)


def test_full():
    assert torch.all(torch.full((3, 4), 5.0, device="npu") == 5.0)


def test_copy_different_dtypes():
    x = torch.randn(3, 4, device="npu")
    y = torch.empty(3, 4, dtype=torch.float64, device="npu")
    y.copy_(x)
    assert y.dtype == torch.float64
    torch.testing.assert_close(y.cpu(), x.cpu().double())


def test_clone():
    x = torch.randn(3, 4, device="npu")
    y = x.clone()
    torch.testing.assert_close(y.cpu(), x.cpu())
    assert y.data_ptr() != x.data_ptr()


def test_copy_non_blocking():
    x = torch.randn(3, 4, device="npu")
    y = torch.empty(3, 4, device="npu")
    y.copy_(x, non_blocking=True)
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_view():
    x = torch.randn(2, 3, 4, device="npu")
    y = x.view(6, 4)
    assert y.shape == (6, 4) and x.data_ptr() == y.data_ptr()


def test_reshape():
    assert torch.randn(2, 3, 4, device="npu").reshape(6, 4).shape == (6, 4)


def test_as_strided():
    assert torch.as_strided(torch.randn(3, 4, device="npu"), (2, 2), (4, 1), 1).shape == (2, 2)


def test_local_scalar_dense():
    assert torch.tensor([5.0], device="npu").item() == 5.0


def test_set_tensor():
    x = torch.randn(3, 4, device="npu")
    y = torch.empty(3, 4, device="npu")
    y.set_(x)
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_set_storage():
    x = torch.randn(3, 4, device="npu")
    y = torch.empty(3, 4, device="npu")
    y.set_(x.storage(), 0, y.size())
    torch.testing.assert_close(y.cpu(), x.cpu())


def test_abs_contiguous():
    y = torch.abs(torch.randn(2, 3, device="npu"))
    assert y.device.type == "npu" and torch.all(y >= 0)


def test_abs_non_contiguous():
    assert torch.all(torch.abs(torch.randn(2, 3, device="npu").t()) >= 0)


@OPENREG_OPS
def test_custom_abs():
    pass


def test_abs_out():
    x = torch.randn(2, 3, device="npu")
    out = torch.empty_like(x)
    torch.abs(x, out=out)
    torch.testing.assert_close(out.cpu(), torch.abs(x).cpu())


def test_fallback_operations():
    x, y = torch.randn(3, 4, device="npu"), torch.randn(3, 4, device="npu")
    assert torch.add(x, y).device.type == "npu" and torch.mul(x, y).device.type == "npu"


def test_fallback_with_scalars():
    x = torch.randn(3, 4, device="npu")
    assert (x + 1.0).device.type == "npu" and (x * 2.0).device.type == "npu"


def test_maximum_functional():
    x = torch.tensor([1.0, 5.0, 3.0], device="npu")
    y = torch.tensor([4.0, 2.0, 6.0], device="npu")
    torch.testing.assert_close(torch.maximum(x, y).cpu(), torch.tensor([4.0, 5.0, 6.0]))


def test_maximum_out():
    x = torch.tensor([1.0, 5.0, 3.0], device="npu")
    out = torch.empty(3, device="npu")
    torch.maximum(x, torch.tensor([4.0, 2.0, 6.0], device="npu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.tensor([4.0, 5.0, 6.0]))


def test_minimum_ext_structured_meta_out():
    x = torch.tensor([1.0, 5.0, 3.0], device="npu")
    out = torch.empty(3, device="npu")
    torch.minimum(x, torch.tensor([4.0, 2.0, 6.0], device="npu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.tensor([1.0, 2.0, 3.0]))
