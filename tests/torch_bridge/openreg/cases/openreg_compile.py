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
"""torch.compile on npu (upstream test_compile.py), with backend="npu"."""

import pytest
import torch
import torch._dynamo
from _common import NO_BACKEND_META
from torch._dynamo.testing import CompileCounterWithBackend


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


def test_backend_in_list():
    from torch._dynamo.backends.registry import list_backends

    assert "npu" in list_backends(exclude_tags=())


def test_simple_compile():
    fn = torch.compile(lambda x: x + 1, backend="npu")
    x = torch.randn(4, device="npu")
    torch.testing.assert_close(fn(x).cpu(), x.cpu() + 1)


def test_compile_fullgraph_multiple_ops():
    fn = torch.compile(lambda x: torch.relu((x + 1) * 2), backend="npu", fullgraph=True)
    x = torch.randn(4, device="npu")
    torch.testing.assert_close(fn(x).cpu(), torch.relu((x.cpu() + 1) * 2))


def test_device_metadata():
    captured = []

    def capture_backend(gm, example_inputs):
        captured.append(gm)
        return gm.forward

    torch.compile(lambda x: x + 1, backend=capture_backend)(torch.randn(4, device="npu"))
    metas = [n.meta.get("val", n.meta.get("example_value")) for n in captured[0].graph.nodes
             if n.op == "placeholder"]  # dynamo 2.13 keeps the fake as "example_value"
    fakes = [m for m in metas if isinstance(m, torch.Tensor)]
    assert fakes and all(f.device.type == "npu" for f in fakes)


@NO_BACKEND_META
def test_backend_metadata_propagation():
    pass


def test_fake_tensor_mode():
    with torch._subclasses.fake_tensor.FakeTensorMode():
        x = torch.empty(3, 3, device="npu")
        assert x.device.type == "npu"
        assert (x + 1).device.type == "npu"


def test_backend_recompilation():
    counter = CompileCounterWithBackend("npu")
    fn = torch.compile(lambda x: x + 1, backend=counter)
    x = torch.randn(4, device="npu")
    fn(x)
    fn(x)
    assert counter.frame_count == 1


def test_recompilation_on_shape_change():
    counter = CompileCounterWithBackend("npu")
    fn = torch.compile(lambda x: x + 1, backend=counter, dynamic=False)
    fn(torch.randn(4, device="npu"))
    fn(torch.randn(8, device="npu"))
    assert counter.frame_count == 2


def test_autograd():
    fn = torch.compile(lambda x: (x * 2).sum(), backend="npu")
    x = torch.randn(4, device="npu", requires_grad=True)
    fn(x).backward()
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 2.0))


def test_nn_module():
    m = torch.nn.Linear(4, 4).to("npu")
    x = torch.randn(2, 4, device="npu")
    result = torch.compile(m, backend="npu")(x)
    assert result.device.type == "npu" and result.shape == (2, 4)
    torch.testing.assert_close(result.cpu(), m(x).cpu())


def test_dynamic_shapes():
    fn = torch.compile(lambda x: x + 1, backend="npu", dynamic=True)
    for n in (4, 8):
        x = torch.randn(n, device="npu")
        torch.testing.assert_close(fn(x).cpu(), x.cpu() + 1)


def test_device_transfer_traces_fully():
    fn = torch.compile(lambda x: (x + 1).cpu() * 2, backend="npu", fullgraph=True)
    x = torch.randn(4, device="npu")
    result = fn(x)
    assert result.device.type == "cpu"
    torch.testing.assert_close(result, (x.cpu() + 1) * 2)


def test_graph_break_resilience():
    counter = CompileCounterWithBackend("npu")

    def fn(x):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2

    x = torch.randn(4, device="npu")
    torch.testing.assert_close(torch.compile(fn, backend=counter)(x).cpu(), (x.cpu() + 1) * 2)
    assert counter.frame_count > 1


def test_compile_with_autocast():
    def fn(x, y):
        with torch.autocast(device_type="npu", dtype=torch.float16):
            return torch.mm(x, y)

    out = torch.compile(fn, backend="npu")(torch.randn(2, 3, device="npu"),
                                           torch.randn(3, 3, device="npu"))
    assert out.dtype == torch.float16


def test_compile_with_default_device():
    with torch.device("npu"):
        fn = torch.compile(lambda x: x + torch.empty(4), backend="npu")
        assert fn(torch.randn(4, device="npu")).device.type == "npu"


def test_interface_registered():
    from torch._dynamo.device_interface import get_interface_for_device

    assert get_interface_for_device("npu") is not None


def test_current_device():
    from torch._dynamo.device_interface import get_interface_for_device

    assert isinstance(get_interface_for_device("npu").current_device(), int)


def test_device_count():
    from torch._dynamo.device_interface import get_interface_for_device

    assert get_interface_for_device("npu").device_count() > 0
