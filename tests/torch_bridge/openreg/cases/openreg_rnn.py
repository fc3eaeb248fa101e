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
"""LSTM on npu (upstream test_rnn.py)."""

import torch
import torch.nn as nn
from _common import torch_bridge  # noqa: F401


def _run(lstm, x, *state):
    return lstm.to("npu")(x.to("npu"), *state)


def test_lstm_basic():
    output, (h_n, c_n) = _run(nn.LSTM(10, 20, 1), torch.randn(5, 2, 10))
    assert {output.device.type, h_n.device.type, c_n.device.type} == {"npu"}
    assert output.shape == (5, 2, 20) and h_n.shape == (1, 2, 20) and c_n.shape == (1, 2, 20)


def test_lstm_multi_layer():
    output, (h_n, c_n) = _run(nn.LSTM(10, 20, 3), torch.randn(5, 2, 10))
    assert output.shape == (5, 2, 20) and h_n.shape == (3, 2, 20) and c_n.shape == (3, 2, 20)


def test_lstm_bidirectional():
    output, (h_n, c_n) = _run(nn.LSTM(10, 20, 2, bidirectional=True), torch.randn(5, 2, 10))
    assert output.shape == (5, 2, 40) and h_n.shape == (4, 2, 20) and c_n.shape == (4, 2, 20)


def test_lstm_batch_first():
    output, _ = _run(nn.LSTM(10, 20, batch_first=True), torch.randn(2, 5, 10))
    assert output.device.type == "npu" and output.shape == (2, 5, 20)


def test_lstm_with_initial_hidden():
    h0, c0 = torch.randn(1, 2, 20, device="npu"), torch.randn(1, 2, 20, device="npu")
    output, (h_n, c_n) = _run(nn.LSTM(10, 20), torch.randn(5, 2, 10), (h0, c0))
    assert {output.device.type, h_n.device.type, c_n.device.type} == {"npu"}


def test_lstm_packed_sequence():
    lstm = nn.LSTM(10, 20).to("npu")
    packed = nn.utils.rnn.pack_sequence([torch.randn(n, 10) for n in (5, 3, 1)])
    output, (h_n, c_n) = lstm(packed.to("npu"))
    assert {output.data.device.type, h_n.device.type, c_n.device.type} == {"npu"}


def test_lstm_cpu_parity():
    lstm = nn.LSTM(8, 16, 2, bidirectional=True)
    x = torch.randn(4, 3, 8)
    output, (h, c) = lstm(x)
    output_npu, (h_npu, c_npu) = _run(lstm, x)
    torch.testing.assert_close(output_npu.cpu(), output)
    torch.testing.assert_close(h_npu.cpu(), h)
    torch.testing.assert_close(c_npu.cpu(), c)
