"""Vector add, Triton's first tutorial: one block of BLOCK elements per program."""

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y, block=1024):
    import torch

    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)
    return out


if __name__ == "__main__":
    import torch

    from demo import demo

    torch.manual_seed(0)
    demo("vector add", add, torch.add, torch.randn(1 << 16), torch.randn(1 << 16))
