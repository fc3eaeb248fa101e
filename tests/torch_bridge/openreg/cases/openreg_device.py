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
"""Device selection and properties (upstream test_device.py); npu has one device, so
the tests that switch to index 1 use index 0 or are skipped."""

import threading

import pytest
import torch
from _common import ONE_DEVICE


def test_device_count():
    assert torch.accelerator.device_count() == 1


def test_device_switch():
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0


def test_device_context():
    device = torch.accelerator.current_device_index()
    with torch.accelerator.device_index(None):
        assert torch.accelerator.current_device_index() == device
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_device_index() == device


def test_invalid_device_index():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.accelerator.set_device_index(1)


def test_device_capability():
    from torch.testing._internal.common_dtype import get_all_dtypes

    supported = torch.accelerator.get_device_capability("npu:0")["supported_dtypes"]
    assert all(d in supported for d in get_all_dtypes(include_complex32=True))


@pytest.mark.skip(reason="quantized dtypes: npu tensors cannot be quantized (no C++ quantizer)")
def test_device_capability_quantized():
    pass


def test_tensor_device():
    x = torch.randn(2, 3, device="npu:0")
    assert x.device.type == "npu" and x.device.index == 0


def test_device_guard():
    original = torch.accelerator.current_device_index()
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_device_index() == original


@ONE_DEVICE
def test_device_switch_persistence():
    pass


def test_device_count_consistency():
    for i in range(torch.accelerator.device_count()):
        torch.accelerator.set_device_index(i)
        assert torch.accelerator.current_device_index() == i


@pytest.mark.skip(reason="npu memory is host memory: a forked child can use the device, "
                         "so init() does not refuse it as torch.cuda's does")
def test_device_poison_fork():
    pass


def test_device_properties():
    device = torch.device("npu:0")
    assert device.type == "npu" and "npu" in str(device) and "0" in str(device)
    capability = torch.accelerator.get_device_capability("npu:0")
    assert isinstance(capability["supported_dtypes"], set) and capability["supported_dtypes"]
    free, total = torch.accelerator.get_memory_info()
    assert 0 <= free <= total


def test_current_device_after_operations():
    original = torch.accelerator.current_device_index()
    x, y = torch.randn(2, 3, device="npu"), torch.randn(2, 3, device="npu")
    result = torch.sum(x + y)
    assert x.device.index == result.device.index == original
    a = torch.randn(5, 5, device="npu")
    assert torch.matmul(a, a).device.index == 0
    assert torch.accelerator.current_device_index() == original


def test_device_context_restoration():
    original = torch.accelerator.current_device_index()
    with pytest.raises(ValueError):
        with torch.accelerator.device_index(0):
            assert torch.randn(2, 2, device="npu").device.index == 0
            raise ValueError("Test exception")
    assert torch.accelerator.current_device_index() == original


def test_concurrent_device_operations():
    errors = []
    barrier = threading.Barrier(4)

    def worker(thread_id):
        try:
            barrier.wait()
            for _ in range(10):
                torch.accelerator.set_device_index(0)
                x, y = torch.randn(10, 10, device="npu"), torch.randn(10, 10, device="npu")
                result = torch.sum(torch.matmul(x, y))
                if result.device.index != 0 or torch.accelerator.current_device_index() != 0:
                    errors.append(thread_id)
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(f"{thread_id}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_device_initialization_state():
    torch.npu.init()
    assert torch.npu.is_initialized()
    assert torch.accelerator.device_count() > 0


@pytest.mark.skip(reason="slow (a spawned interpreter imports torch); this suite already "
                         "runs in a subprocess of its own")
def test_device_multiprocessing_spawn():
    pass


def test_device_state_after_errors():
    original = torch.accelerator.current_device_index()
    with pytest.raises(RuntimeError):
        torch.matmul(torch.randn(5, 5, device="npu"), torch.randn(3, 3, device="npu"))
    assert torch.accelerator.current_device_index() == original
    z, w = torch.randn(5, 5, device="npu"), torch.randn(5, 5, device="npu")
    torch.matmul(z, w)
