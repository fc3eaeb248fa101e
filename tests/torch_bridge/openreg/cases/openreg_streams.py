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
"""Streams and events (upstream test_streams.py and test_event.py); on one device, so
"openreg:1" became "npu:0"."""

import pytest
import torch
from _common import ONE_DEVICE, torch_bridge  # noqa: F401

GENERIC_EVENT = pytest.mark.skip(
    reason="torch.Event's record ids, synchronize and elapsed_time call C++ DeviceGuardImpl "
           "event hooks; torch.npu.Event is the working equivalent")


def test_stream_create():
    stream = torch.Stream(device="npu")
    assert stream.device_index == torch.npu.current_device()
    stream = torch.Stream(device="npu:0")
    assert stream.device.type == "npu" and stream.device_index == 0
    again = torch.Stream(stream_id=stream.stream_id, device_type=stream.device_type,
                         device_index=stream.device_index)
    assert again == stream


def test_stream_context():
    with torch.Stream(device="npu:0") as stream:
        assert torch.accelerator.current_stream() == stream


def test_stream_switch():
    for _ in range(2):
        stream = torch.Stream(device="npu:0")
        torch.accelerator.set_stream(stream)
        assert torch.accelerator.current_stream() == stream


def test_stream_synchronize():
    stream = torch.Stream(device="npu:0")
    assert stream.query()
    torch.Event().record(stream)
    stream.synchronize()
    assert stream.query()


def test_stream_repr():
    assert "torch.Stream device_type=npu, device_index=0" in repr(torch.Stream(device="npu:0"))


def test_stream_wait_stream():
    torch.Stream(device="npu:0").wait_stream(torch.Stream(device="npu:0"))


def test_stream_wait_event():
    s1, s2 = torch.Stream(device="npu"), torch.Stream(device="npu")
    s2.wait_event(s1.record_event())


@GENERIC_EVENT
def test_event_create():
    event = torch.Event(device="npu")
    assert event.device.type == "npu" and event.device.index is None and event.event_id == 0
    event = torch.Event()
    assert event.device.type == "npu" and event.event_id == 0
    event = torch.Stream(device="npu:0").record_event()
    assert event.device.index == 0 and event.event_id != 0


@GENERIC_EVENT
def test_event_query():
    assert torch.Event().query()
    event = torch.Stream(device="npu:0").record_event()
    event.synchronize()
    assert event.query()


@GENERIC_EVENT
def test_event_record():
    stream = torch.Stream(device="npu:0")
    e1, e2 = stream.record_event(), stream.record_event()
    assert 0 not in (e1.event_id, e2.event_id) and e1.event_id != e2.event_id


@GENERIC_EVENT
def test_event_elapsed_time():
    stream = torch.Stream(device="npu:0")
    e1 = torch.Event(device="npu:0", enable_timing=True)
    e1.record(stream)
    torch.randn(64, 64, device="npu") @ torch.randn(64, 64, device="npu")
    e2 = torch.Event(device="npu:0", enable_timing=True)
    e2.record(stream)
    stream.synchronize()
    assert e1.query() and e2.query() and e1.elapsed_time(e2) > 0


def test_event_wait_stream():
    torch.Stream(device="npu").wait_event(torch.Stream(device="npu").record_event())


@GENERIC_EVENT
def test_event_synchronize():
    event = torch.Event(device="npu")
    event.record(torch.Stream(device="npu"))
    event.synchronize()
    assert event.query()


@ONE_DEVICE
def test_event_different_devices():
    pass


def test_event_timing_disabled():
    stream = torch.Stream(device="npu:0")
    e1, e2 = torch.Event(device="npu:0"), torch.Event(device="npu:0")
    e1.record(stream)
    e2.record(stream)
    stream.synchronize()
    with pytest.raises(ValueError,
                       match="Both events must be created with argument 'enable_timing=True'"):
        e1.elapsed_time(e2)


def test_event_wait_event():
    s1, s2 = torch.Stream(device="npu"), torch.Stream(device="npu")
    event = s1.record_event()
    s2.wait_event(event)
    s2.synchronize()
    assert event.query()


def test_device_synchronization():
    z = torch.matmul(torch.randn(100, 100, device="npu"), torch.randn(100, 100, device="npu"))
    torch.accelerator.synchronize()
    assert torch.sum(z).device == torch.device("npu:0")


@GENERIC_EVENT
def test_interleaved_stream_operations():
    stream = torch.Stream(device="npu:0")
    x, y = torch.randn(50, 50, device="npu"), torch.randn(50, 50, device="npu")
    e1 = stream.record_event()
    z1 = torch.matmul(x, y)
    e2 = stream.record_event()
    torch.matmul(z1, x)
    stream.synchronize()
    assert e1.event_id != e2.event_id and e1.query() and e2.query()


@GENERIC_EVENT
def test_multiple_streams_wait_same_event():
    s1, s2, s3 = (torch.Stream(device="npu:0") for _ in range(3))
    assert len({s1.stream_id, s2.stream_id, s3.stream_id}) == 3
    x, y = torch.randn(30, 30, device="npu"), torch.randn(30, 30, device="npu")
    event = s1.record_event()
    s2.wait_event(event)
    s3.wait_event(event)
    with s2:
        z2 = torch.matmul(x, y)
    with s3:
        z3 = torch.matmul(x, y)
    torch.accelerator.synchronize()
    assert event.query()
    torch.testing.assert_close(z2.cpu(), z3.cpu())


def test_event_lifecycle():
    stream = torch.Stream(device="npu:0")
    event = torch.Event(device="npu:0")
    for _ in range(2):
        event.record(stream)
        stream.synchronize()
        assert event.query()


@GENERIC_EVENT
def test_generic_stream_event():
    stream = torch.Stream("npu")
    e1, e2 = torch.Event("npu", enable_timing=True), torch.Event("npu", enable_timing=True)
    with torch.accelerator.device_index(stream.device_index):
        e1.record(stream)
        torch.randn(1000, device="npu") + torch.randn(1000, device="npu")
        e2.record()
        e2.synchronize()
        assert e1.elapsed_time(e2) > 0


def test_stream_compatibility():
    original = torch.accelerator.current_stream()
    for stream in (torch.Stream(device="npu:0"), torch.Stream(device="npu:0")):
        torch.accelerator.set_stream(stream)
        assert torch.accelerator.current_stream().stream_id == stream.stream_id
    torch.accelerator.set_stream(original)
