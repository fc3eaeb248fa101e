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
"""Autocast on npu (upstream test_autocast.py)."""

import pytest
import torch
from _common import torch_bridge  # noqa: F401


def test_npu_autocast_error_message():
    with pytest.warns(UserWarning, match="In npu autocast, but the target dtype is not supported"):  # 2.13's text
        with torch.autocast(device_type="npu", dtype=torch.float32):
            torch.ones(10)


def test_npu_autocast_float16_supported():
    with torch.amp.autocast(device_type="npu", dtype=torch.float16):
        result = torch.mm(torch.randn(2, 3, device="npu"), torch.randn(3, 3, device="npu"))
    assert result.dtype == torch.float16


def test_npu_autocast_float32_supported():
    # openreg lists dot as a float32 op; npu follows CUDA's lists, where dot promotes
    # (two float16 inputs stay float16) and the norms/losses run in float32.
    with torch.amp.autocast(device_type="npu"):
        x = torch.randn(2, device="npu", dtype=torch.float16)
        assert torch.dot(x, x).dtype == torch.float16
        assert torch.nn.functional.layer_norm(x, (2,)).dtype == torch.float32


def test_autocast_fast_dtype():
    assert torch.get_autocast_dtype(device_type="npu") == torch.half
