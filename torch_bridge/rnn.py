"""The fused LSTM and GRU cells on npu, as decompositions into npu ops.

``nn.LSTM`` and ``nn.GRU`` (and their cells) on a CUDA, XPU or PrivateUse1 tensor
compute each step with ``aten._thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` (and
their backward ops), which have no CPU kernel to fall back to. Here each is the cell's
equations written with npu ops, so every step runs on the device (each op compiled and
simulated like any eager op) and autograd gets the gradients torch's CUDA kernel would
give. The workspaces are CUDA's: the LSTM's activated gates ``[i, f, g, o]`` along dim
1; the GRU's ``[r, z, n, hidden n gate, hx]``.
"""

from __future__ import annotations

import torch

from torch_bridge.kernels import register_npu_kernel

aten = torch.ops.aten


@register_npu_kernel(aten._thnn_fused_lstm_cell.default)
def fused_lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
                    input_bias: torch.Tensor | None = None,
                    hidden_bias: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hy, cy, workspace) of one LSTM step from the precomputed gate products."""
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    i, f, g, o = gates.chunk(4, dim=1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * cx + i * g
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, g, o], dim=1)


@register_npu_kernel(aten._thnn_fused_lstm_cell_backward_impl.default)
def fused_lstm_cell_backward(grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None,
                             cx: torch.Tensor, cy: torch.Tensor, workspace: torch.Tensor,
                             has_bias: bool
                             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(grad_gates, grad_cx, grad_bias): gradients before the activations."""
    i, f, g, o = workspace.chunk(4, dim=1)
    tanh_cy = cy.tanh()
    grad_c = torch.zeros_like(cy) if grad_cy is None else grad_cy.clone()
    grad_o = torch.zeros_like(cy)
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy
    grad_gates = torch.cat([grad_c * g * i * (1 - i),
                            grad_c * cx * f * (1 - f),
                            grad_c * i * (1 - g * g),
                            grad_o * o * (1 - o)], dim=1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return grad_gates, grad_c * f, grad_bias


@register_npu_kernel(aten._thnn_fused_gru_cell.default)
def fused_gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
                   input_bias: torch.Tensor | None = None,
                   hidden_bias: torch.Tensor | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(hy, workspace) of one GRU step from the precomputed gate products ``[r, z, n]``:
    ``n = tanh(x_n + r * h_n)``, ``hy = n + z * (hx - n)``."""
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    x_r, x_z, x_n = input_gates.chunk(3, dim=1)
    h_r, h_z, h_n = hidden_gates.chunk(3, dim=1)
    r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, h_n, hx], dim=1)


@register_npu_kernel(aten._thnn_fused_gru_cell_backward.default)
def fused_gru_cell_backward(grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                       torch.Tensor | None, torch.Tensor | None]:
    """(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
    grad_hidden_bias): gradients before the activations."""
    r, z, n, h_n, hx = workspace.chunk(5, dim=1)
    grad_z = grad_hy * (hx - n) * (1 - z) * z
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * h_n * (1 - r) * r
    grad_input = torch.cat([grad_r, grad_z, grad_n], dim=1)
    grad_hidden = torch.cat([grad_r, grad_z, grad_n * r], dim=1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, grad_input.sum(0), grad_hidden.sum(0)


__all__ = ["fused_gru_cell", "fused_gru_cell_backward", "fused_lstm_cell",
           "fused_lstm_cell_backward"]
