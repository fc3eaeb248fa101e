"""The fused LSTM cell on npu, as a decomposition into npu ops.

``nn.LSTM`` on a CUDA, XPU or PrivateUse1 tensor computes each step with
``aten._thnn_fused_lstm_cell`` (and its backward with
``_thnn_fused_lstm_cell_backward_impl``), which have no CPU kernel to fall back to.
Here both are the cell's equations written with npu ops, so every step runs on the
device (each op compiled and simulated like any eager op) and autograd gets the
gradients torch's CUDA kernel would give. The workspace holds the activated gates
``[i, f, g, o]`` along dim 1, as CUDA's does.
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


__all__ = ["fused_lstm_cell", "fused_lstm_cell_backward"]
