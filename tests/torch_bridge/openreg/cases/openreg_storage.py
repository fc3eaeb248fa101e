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
"""Storages and serialization (upstream test_storage.py); the crash-prone constructors
(``UntypedStorage(n, device="npu")`` killed the interpreter) are here."""

import io

import pytest
import torch
from _common import NO_BACKEND_META, NO_PINNED, ONE_DEVICE, torch_bridge  # noqa: F401


@NO_PINNED
def test_rewrapped_storage():
    pass


def test_serialization():
    for device in (torch.device("npu"), torch.device("npu:0")):
        storage = torch.UntypedStorage(4, device=device)
        assert torch.serialization.location_tag(storage) == "npu:0"
    restored = torch.serialization.default_restore_location(torch.empty(4, 4).storage(), "npu:0")
    assert restored.is_npu
    tensor = torch.randn(3, 3, device="npu")
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded.is_npu
    torch.testing.assert_close(loaded.cpu(), tensor.cpu())


def test_untyped_storage_constructors():
    assert torch.UntypedStorage(device="npu").nbytes() == 0
    assert torch.UntypedStorage([1, 2, 3], device="npu").tolist() == [1, 2, 3]
    typed = torch.TypedStorage(4, device="npu", dtype=torch.float32)
    assert typed.is_npu and typed.size() == 4
    assert torch.UntypedStorage(8, device="npu").new().device.type == "npu"


def test_storage_resize_raises():
    with pytest.raises(NotImplementedError, match="cannot be resized"):
        torch.UntypedStorage(4, device="npu").resize_(8)


@NO_BACKEND_META
def test_copy_backend_meta():
    pass


def test_serialization_map_location_cpu():
    tensor = torch.randn(3, 3, device="npu")
    buffer = io.BytesIO()
    torch.save(tensor, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="cpu")
    assert loaded.is_cpu
    torch.testing.assert_close(loaded, tensor.cpu())


@ONE_DEVICE
def test_serialization_map_location_device():
    pass


def test_serialization_storage_location_tag():
    storage = torch.UntypedStorage(4, device=torch.device("npu"))
    assert torch.serialization.location_tag(storage) == "npu:0"


def test_serialization_default_restore_location():
    storage = torch.serialization.default_restore_location(torch.empty(4, 4).storage(), "npu:0")
    assert storage.is_npu


@NO_BACKEND_META
def test_fake_tensor_metadata_preservation():
    pass


def test_dlpack():
    # upstream test_utils.py: test_open_device_dlpack
    x_in = torch.randn(2, 3).to("npu")
    x_out = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x_in))
    assert x_out.device == x_in.device
    torch.testing.assert_close(x_out.cpu(), x_in.cpu())


def test_autograd_init():
    # upstream test_autograd.py: backward on the device starts torch's device thread
    import os

    torch.ones(2, requires_grad=True, device="npu").sum().backward()
    task = f"/proc/{os.getpid()}/task"
    names = {open(f"{task}/{t}/comm").read().strip() for t in os.listdir(task)}
    assert "pt_autograd_0" in names
