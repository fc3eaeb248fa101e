"""RMSNorm with a residual add: ``h = x + residual``; ``out = h / rms(h) * weight``.
Writes both ``out`` and the new residual ``h`` (as vLLM's fused_add_rms_norm)."""

import triton
import triton.language as tl


@triton.jit
def rmsnorm_residual_kernel(x_ptr, res_ptr, w_ptr, out_ptr, n_cols, eps,
                            BLOCK: tl.constexpr, ROWS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    for r in tl.static_range(ROWS):
        row = pid * ROWS + r
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
        h = x + tl.load(res_ptr + row * n_cols + cols, mask=mask, other=0.0)
        tl.store(res_ptr + row * n_cols + cols, h, mask=mask)
        ms = tl.sum(h * h, axis=0, keep_dims=True) / n_cols
        tl.store(out_ptr + row * n_cols + cols, h * tl.rsqrt(ms + eps) * w, mask=mask)


def rmsnorm_residual(x, residual, weight, eps=1e-6, rows_per_program=2):
    import torch

    rows, cols = x.shape
    out = torch.empty_like(x)
    rmsnorm_residual_kernel[(rows // rows_per_program,)](
        x, residual, weight, out, cols, eps, BLOCK=triton.next_power_of_2(cols),
        ROWS=rows_per_program)
    return out, residual


def _reference(x, residual, weight, eps=1e-6):
    """torch's own: the new residual ``h = x + residual`` and ``h / rms(h) * weight``."""
    import torch

    h = x + residual
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight, h


if __name__ == "__main__":
    import torch

    from demo import demo

    torch.manual_seed(0)
    demo("RMSNorm with residual", rmsnorm_residual, _reference, torch.randn(64, 4096),
         torch.randn(64, 4096), torch.rand(4096) + 0.5)
