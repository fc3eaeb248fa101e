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
"""SDPA's overrideable entry on npu (upstream test_sdpa.py and TestSDPA in test_ops.py);
shapes are smaller than upstream's (every op is simulated)."""

import torch
import torch.nn.functional as F
from _common import torch_bridge  # noqa: F401
from torch.nn.attention import SDPBackend

SHAPE = (2, 2, 32, 16)  # batch, heads, seq, head_dim


def _qkv(dtype=torch.float16):
    return [torch.rand(SHAPE, dtype=dtype).to("npu") for _ in range(3)]


def test_fused_sdp_choice_privateuseone():
    assert torch._fused_sdp_choice(*_qkv()) == SDPBackend.OVERRIDEABLE.value


def test_fused_sdp_choice_with_mask():
    mask = torch.rand(2, 2, 32, 32, dtype=torch.float16).to("npu")
    assert torch._fused_sdp_choice(*_qkv(), mask) == SDPBackend.OVERRIDEABLE.value


def test_scaled_dot_product_fused_attention_overrideable():
    q, k, v = _qkv()
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0)
    assert out.device.type == "npu" and out.shape == SHAPE


def test_scaled_dot_product_fused_attention_overrideable_backward():
    q, k, v = _qkv()
    mask = torch.rand(2, 2, 32, 32, dtype=torch.float16).to("npu")
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, _ = \
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q, k, v, attn_bias=mask)
    grad = torch.rand(SHAPE, dtype=torch.float16).to("npu")
    grads = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad, q, k, v, mask, [True, True, True, True], out, lse, cum_q, cum_k, max_q, max_k,
        dropout_p=0.0, is_causal=False, philox_seed=seed, philox_offset=offset)
    assert [g.shape for g in grads] == [SHAPE, SHAPE, SHAPE, mask.shape]


def test_scaled_dot_product_attention_with_dropout():
    out = F.scaled_dot_product_attention(*_qkv(), dropout_p=0.1)
    assert out.device.type == "npu" and out.shape == SHAPE


def test_scaled_dot_product_attention_is_causal():
    out = F.scaled_dot_product_attention(*_qkv(), is_causal=True)
    assert out.device.type == "npu" and out.shape == SHAPE
