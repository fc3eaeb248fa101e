"""NaN as Triton compiles it: tl.maximum/tl.minimum ignore a NaN operand by default
(``propagate_nan=NONE``) and propagate it with ``PropagateNan.ALL``; tl.max/tl.min
reductions ignore NaN (Triton's interpreter agrees)."""

import torch
import triton
import triton.language as tl

from triton_helpers import interpret, simulate

NAN = float("nan")
INF = float("inf")


@triton.jit
def nan_kernel(x_ptr, max0_ptr, min0_ptr, maxall_ptr, pair_ptr, rmax_ptr, rmin_ptr,
               BN: tl.constexpr):
    rn = tl.arange(0, BN)
    x = tl.load(x_ptr + rn)
    y = tl.load(x_ptr + BN - 1 - rn)
    tl.store(max0_ptr + rn, tl.maximum(x, 0.0))
    tl.store(min0_ptr + rn, tl.minimum(x, 0.0))
    tl.store(maxall_ptr + rn, tl.maximum(x, 0.0, propagate_nan=tl.PropagateNan.ALL))
    tl.store(pair_ptr + rn, tl.maximum(x, y))
    tl.store(rmax_ptr, tl.max(x, 0))
    tl.store(rmin_ptr, tl.min(x, 0))


def test_nan_follows_the_propagate_nan_flag():
    x = torch.tensor([1.0, NAN, -2.0, INF, -INF, 3.0, NAN, -1.0])
    args = (x,) + tuple(torch.empty(8) for _ in range(4)) + (torch.empty(1), torch.empty(1))
    sim, _, _ = simulate(nan_kernel, args, {"BN": 8}, (1,))
    ref = interpret(nan_kernel, args, {"BN": 8}, (1,))
    zero = torch.zeros(8)
    torch.testing.assert_close(sim["max0_ptr"], torch.fmax(x, zero))
    torch.testing.assert_close(sim["min0_ptr"], torch.fmin(x, zero))
    torch.testing.assert_close(sim["maxall_ptr"], torch.maximum(x, zero), equal_nan=True)
    torch.testing.assert_close(sim["pair_ptr"], torch.fmax(x, x.flip(0)), equal_nan=True)
    assert sim["rmax_ptr"].item() == INF and sim["rmin_ptr"].item() == -INF
    for name in ("max0_ptr", "min0_ptr", "pair_ptr", "rmax_ptr", "rmin_ptr"):
        torch.testing.assert_close(sim[name], ref[name], equal_nan=True)
