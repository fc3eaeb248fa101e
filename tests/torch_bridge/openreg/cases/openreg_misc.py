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
"""Backend registration and generated methods (upstream test_misc.py)."""

import types

import pytest
import torch
from _common import torch_bridge  # noqa: F401


def test_backend_module_name():
    assert torch._C._get_privateuse1_backend_name() == "npu"
    torch.utils.rename_privateuse1_backend("npu")
    with pytest.raises(RuntimeError, match="has already been set"):
        torch.utils.rename_privateuse1_backend("dev")


def test_profiler_activity_alias():
    from torch._C._profiler import ProfilerActivity

    assert ProfilerActivity.NPU == ProfilerActivity.PrivateUse1
    assert ProfilerActivity.NPU.name == "NPU"


def test_device_type_alias():
    from torch._C._autograd import DeviceType

    assert DeviceType.NPU == DeviceType.PrivateUse1 and DeviceType.NPU.name == "NPU"


def test_backend_module_registration():
    with pytest.raises(RuntimeError, match="Expected one of cpu"):
        torch._register_device_module("dev", types.ModuleType("fake_module"))
    with pytest.raises(RuntimeError, match="The runtime module of"):
        torch._register_device_module("npu", types.ModuleType("fake_module"))


def test_backend_module_function():
    get = torch.utils.backend_registration._get_custom_mod_func
    with pytest.raises(RuntimeError, match="Try to call torch.npu"):
        get("func_name_")
    assert get("device_count")() == 1


def test_backend_generate_methods():
    with pytest.raises(RuntimeError, match="The custom device module of"):
        torch.utils.generate_methods_for_privateuse1_backend()
    for cls in (torch.Tensor, torch.TypedStorage, torch.UntypedStorage,
                torch.nn.utils.rnn.PackedSequence):
        assert hasattr(cls, "is_npu") and hasattr(cls, "npu"), cls
    assert hasattr(torch.nn.Module, "npu")


def test_backend_tensor_methods():
    x = torch.empty(4, 4)
    assert not x.is_npu
    for device in (torch.device("npu"), torch.device("npu:0"), 0):
        assert x.npu(device).is_npu


def test_backend_module_methods():
    module = torch.nn.Linear(3, 3).npu()
    assert module.weight.device.type == "npu"


def test_backend_storage_methods():
    x = torch.empty(4, 4)
    assert not x.storage().is_npu and x.storage().npu().is_npu
    assert not x.untyped_storage().is_npu and x.untyped_storage().npu().is_npu


def test_backend_packed_sequence_methods():
    z = torch.nn.utils.rnn.PackedSequence(torch.rand(5, 3), torch.tensor([1, 1, 1, 1, 1]))
    assert not z.is_npu
    z_npu = z.npu()
    assert z_npu.is_npu and z_npu.data.is_npu


@pytest.mark.skip(reason="npu has one device (npu:0); openreg has two")
def test_backend_tensor_methods_different_devices():
    pass


def test_backend_tensor_type():
    names = {torch.bool: "Bool", torch.double: "Double", torch.float32: "Float",
             torch.half: "Half", torch.int32: "Int", torch.int64: "Long",
             torch.int8: "Char", torch.short: "Short", torch.uint8: "Byte"}
    for dtype, name in names.items():
        assert torch.empty(4, 4, dtype=dtype, device="npu").type() == f"torch.npu.{name}Tensor"


def test_backend_type_methods():
    tensor_cpu = torch.randn([8]).float()
    assert tensor_cpu.npu().type() == "torch.npu.FloatTensor"
    assert tensor_cpu.npu().storage().type() == "torch.storage.TypedStorage"


def test_backend_storage_type_consistency():
    tensor = torch.randn(4, 4, device="npu")
    assert tensor.storage().is_npu and tensor.storage().size() == tensor.numel()
