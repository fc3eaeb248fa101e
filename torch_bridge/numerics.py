"""Where a cached eager op's numbers come from after its first call.

An eager op's timing depends only on its program and the config, never on the data, so
every call of a cached signature is charged the first call's simulated cycles. The
numbers are another matter. The first call of each signature always runs the compiled
program functionally (the simulator computes the outputs from the commands) and its
outputs are compared with the same op on CPU. Then, by mode:

- ``"checked"`` (default): if the first call agreed with CPU (same shapes and dtypes,
  values within the dtype's tolerance, integers and booleans exactly), later calls take
  their numbers from the op on CPU. A replayed eager op then costs about what a plain
  Python device does. A first call within the looser tolerance of
  :func:`compare_outputs` (scaled to the output's largest value: a different summation
  order) keeps running its program; one beyond it is a :class:`NumericsError`
  (:func:`check_first_call`), as on every other door.
- ``"simulate"``: every call runs its program functionally (slower; for checking the
  compiler's programs on many inputs, as ``benchmarks/opinfo_coverage.py`` does).

    >>> torch_bridge.numerics.set_mode("simulate")
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from archsim.errors import ArchsimError, NumericsError
from torch_bridge.float64_reference import float64_reference
from torch_bridge.tie_order import with_device_tie_order

MODES = ("checked", "simulate")

_mode = "checked"

# torch.testing's default tolerances per dtype (rtol, atol)
TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


def set_mode(mode: str) -> None:
    """Choose where cached eager ops' later numbers come from (see the module doc)."""
    global _mode
    if mode not in MODES:
        raise ArchsimError(f"unknown eager numerics mode {mode!r}; use one of: "
                           f"{', '.join(MODES)}")
    _mode = mode


def mode() -> str:
    return _mode


def cpu_results(op: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[torch.Tensor, ...] | None:
    """``op`` on CPU arguments, as fresh tensors (a result sharing an argument's bytes
    is copied); ``None`` if it returns something other than tensors, if CPU has no
    kernel for it (:func:`cpu_lacks_kernel`: then the program's own numbers are used),
    and for an op that draws random numbers or writes into an argument (running it
    again on CPU would advance the generator or update the argument twice).

    Any other exception is torch's verdict on the call's data (an index out of range,
    an integer division by zero) and is raised as torch raised it: the device does not
    return numbers for a call torch refuses."""
    if not _repeatable(op):
        return None
    try:
        out = op(*args, **kwargs)
    except Exception as exc:
        if cpu_lacks_kernel(exc):
            return None
        raise
    results = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(r, torch.Tensor) for r in results):
        return None
    inputs = {a.untyped_storage().data_ptr() for a in flat_tensors((*args, *kwargs.values()))}
    return tuple(r.clone() if r.untyped_storage().data_ptr() in inputs else r
                 for r in results)


CPU_MISSING_DTYPES = ("Half", "BFloat16", "ComplexHalf")
"""Dtypes torch's CPU kernels often lack where other devices have them
(``"erfcx_cpu" not implemented for 'Half'``)."""


def cpu_lacks_kernel(exc: Exception) -> bool:
    """Whether torch on CPU failed for want of a kernel (no CPU kernel at all, or none
    for a reduced-precision dtype), not because of the call's arguments: then the
    device's numbers have no CPU reference, and they stand."""
    if isinstance(exc, NotImplementedError):
        return True
    text = str(exc)
    return any(f"not implemented for '{name}'" in text for name in CPU_MISSING_DTYPES)


def compare_outputs(outputs: tuple[Any, ...], expected: tuple[Any, ...],
                    what: str = "output") -> float:
    """The largest difference between ``outputs`` and torch's ``expected`` on CPU; a
    :class:`NumericsError` when their count or a shape differs, an integer or boolean
    value differs, NaNs differ, or a float is off by more than its dtype's tolerance
    (:data:`TOLERANCE`, the absolute part scaled to the output's largest value)."""
    if len(outputs) != len(expected):
        raise NumericsError(f"the schedule returned {len(outputs)} outputs, torch on CPU "
                            f"{len(expected)}")
    worst = 0.0
    for index, (got, want) in enumerate(zip(outputs, expected)):
        if got.shape != want.shape:
            raise NumericsError(f"{what} {index}: shape {tuple(got.shape)}, torch on CPU "
                                f"{tuple(want.shape)}")
        if not want.is_floating_point():
            if not torch.equal(got.to(want.dtype), want):
                raise NumericsError(f"{what} {index}: {want.dtype} values differ from "
                                    f"torch on CPU")
            continue
        if not got.numel():
            continue
        rtol, atol = TOLERANCE.get(want.dtype, TOLERANCE[torch.float32])
        got, want = got.double(), want.double()
        if not bool((got.isnan() == want.isnan()).all()):
            raise NumericsError(f"{what} {index}: NaN where torch on CPU has none, or "
                                f"the reverse")
        diff = float((got - want).nan_to_num(nan=0.0).abs().max())
        allowed = max(atol, rtol * float(want.nan_to_num(nan=0.0, posinf=0.0,
                                                         neginf=0.0).abs().max()))
        if diff > allowed:
            raise NumericsError(f"{what} {index}: max |npu - torch cpu| = {diff:.3g}, over "
                                f"the {expected[index].dtype} tolerance {allowed:.3g} "
                                f"(rtol {rtol:g} of the largest |value|, at least {atol:g})")
        worst = max(worst, diff)
    return worst


def triton_on_cpu() -> Any:
    """A context in which the CPU reference runs a model's Triton kernels on Triton's
    interpreter (nothing to do when Triton is not imported)."""
    import contextlib

    if "triton" not in sys.modules:
        return contextlib.nullcontext()
    from torch_bridge.triton_launch import interpreted_on_cpu

    return interpreted_on_cpu()


def _repeatable(op: Any) -> bool:
    known = _REPEATABLE.get(op)
    if known is None:
        known = _REPEATABLE[op] = (
            torch.Tag.nondeterministic_seeded not in op.tags
            and op not in _WRITES_UNANNOTATED
            and not any(a.alias_info is not None and a.alias_info.is_write
                        for a in op._schema.arguments))
    return known


_REPEATABLE: dict[Any, bool] = {}

_WRITES_UNANNOTATED = (torch.ops.aten.native_batch_norm.default,)
"""Ops that update an argument in place although their schema does not say so
(training batch norm's running statistics)."""


UNINITIALIZED = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                           "new_empty_strided"})
"""Ops whose results are whatever memory held (``torch.empty``): no reference for them."""


def unrepeatable_ops(graph: torch.fx.Graph) -> tuple[str, ...]:
    """The ops of ``graph`` whose numbers another run (torch's on CPU) would not
    reproduce: they draw random numbers or read uninitialized memory. A graph with any
    has no reference to check its outputs against."""
    names = []
    for node in graph.nodes:
        op = node.target
        if isinstance(op, torch._ops.OpOverload) and (
                op._opname in UNINITIALIZED or torch.Tag.nondeterministic_seeded in op.tags
                and not _draws_nothing(op, node.args, node.kwargs)):
            names.append(f"aten.{op._opname}")
    return tuple(dict.fromkeys(names))


def _draws_nothing(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a call of a random op draws nothing: a dropout of probability 0 or out
    of training (SDPA carries the tag for its ``dropout_p``)."""
    values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
              for i, a in enumerate(op._schema.arguments)}
    return values.get("train") is False or any(
        values.get(name, None) == 0 for name in ("p", "dropout_p"))


def check_first_call(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     device: tuple[torch.Tensor, ...]) -> bool:
    """Whether a signature's first simulated outputs are ``op``'s on CPU closely enough
    to take later calls' numbers from CPU (:func:`agrees`). Outputs that do not agree
    that closely must still pass :func:`compare_outputs` (the tolerance every door
    applies) or, failing that, be as close to the op computed in float64 as torch's own
    float32 result is, give or take :data:`ORDER_SLACK` (a sum added in another order,
    float32 trigamma next to its poles); otherwise the program computed wrong numbers:
    a :class:`NumericsError` naming the op. Indices of ops that order ties freely
    (``topk``, ``sort``) are checked for being a valid order, not CPU's
    (:mod:`torch_bridge.tie_order`). No CPU reference (a random or in-place op,
    ``torch.empty``): nothing to check."""
    cpu = with_device_tie_order(op, args, kwargs, device, cpu_results(op, args, kwargs))
    if agrees(device, cpu):
        return True
    if cpu is None or getattr(op, "_opname", None) in UNINITIALIZED:
        return False
    if len(cpu) > len(device) and not any(t.numel() for t in cpu[len(device):]):
        cpu = cpu[:len(device)]  # eval batch norm's empty saved statistics: eager's
    try:
        check_close(device, cpu, lambda: cpu_results(op, *in_float64((args, kwargs))))
    except NumericsError as exc:
        raise NumericsError(f"eager npu op {op}: {exc}") from None
    return False


ORDER_SLACK = 16
"""How many times torch's own float32 error (against float64) a device result may be
off by before it is wrong: rounding in another order differs by a small multiple of
it; a wrong program is off by about the values themselves."""


def check_close(outputs: tuple[Any, ...], expected: tuple[Any, ...],
                exact: Callable[[], tuple[torch.Tensor, ...] | None],
                what: str = "output") -> float:
    """:func:`compare_outputs`, and where an output is off by more than that allows, the
    same outputs against ``exact()`` (the computation in float64; None: not available):
    no error if each is as close to it as torch's own result is, give or take
    :data:`ORDER_SLACK` (rounding in another order, not a wrong number)."""
    try:
        return compare_outputs(outputs, expected, what)
    except NumericsError:
        try:
            with float64_reference():
                reference = exact()
        except Exception:  # noqa: BLE001 - no float64 reference: the first error stands
            reference = None
        if not _as_close_as_torch(outputs, expected, reference):
            raise
        return max((float((o.double() - e.double()).nan_to_num(nan=0.0).abs().max())
                    for o, e in zip(outputs, expected) if e.is_floating_point() and e.numel()),
                   default=0.0)


def _as_close_as_torch(device: tuple[torch.Tensor, ...], cpu: tuple[torch.Tensor, ...],
                       exact: tuple[torch.Tensor, ...] | None) -> bool:
    """Whether each floating-point ``device`` output is within :data:`ORDER_SLACK`
    times torch's float32 error of the float64 result (plus its dtype's tolerance),
    the others equal to ``cpu``'s."""
    if exact is None or len(exact) < len(device):
        return False
    for got, want, truth in zip(device, cpu, exact):
        if got.shape != want.shape or got.dtype != want.dtype:
            return False
        if not want.is_floating_point():
            if not torch.equal(got, want):
                return False
            continue
        if not got.numel():
            continue
        truth = truth.double()
        if not bool((got.isnan() == truth.isnan()).all()):
            return False
        torch_error = float((want.double() - truth).nan_to_num(nan=0.0).abs().max())
        rtol, atol = TOLERANCE.get(want.dtype, TOLERANCE[torch.float32])
        scale = float(truth.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).abs().max())
        allowed = ORDER_SLACK * torch_error + max(atol, rtol * scale)
        if float((got.double() - truth).nan_to_num(nan=0.0).abs().max()) > allowed:
            return False
    return True


def in_float64(value: Any) -> Any:
    """``value`` with its floating-point tensors (in lists, tuples and dicts too) in
    float64."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(in_float64(v) for v in value)
    if isinstance(value, dict):
        return {k: in_float64(v) for k, v in value.items()}
    return value


def agrees(device: tuple[torch.Tensor, ...], cpu: tuple[torch.Tensor, ...] | None) -> bool:
    """Whether the simulated outputs are the CPU op's: shapes and dtypes equal, values
    within the dtype's tolerance (NaN where CPU has NaN), integers and booleans equal."""
    if cpu is None or len(device) != len(cpu):
        return False
    for got, want in zip(device, cpu):
        if got.shape != want.shape or got.dtype != want.dtype:
            return False
        tolerance = TOLERANCE.get(want.dtype)
        if tolerance is None:
            if not torch.equal(got, want):
                return False
        elif not torch.allclose(got, want, rtol=tolerance[0], atol=tolerance[1],
                                equal_nan=True):
            return False
    return True


def flat_tensors(values: Any) -> list[torch.Tensor]:
    """The tensors among ``values`` and inside their lists and tuples, in order."""
    out: list[torch.Tensor] = []
    for value in values:
        if isinstance(value, torch.Tensor):
            out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(flat_tensors(value))
    return out


__all__ = ["CPU_MISSING_DTYPES", "MODES", "ORDER_SLACK", "TOLERANCE", "UNINITIALIZED",
           "agrees", "check_close", "check_first_call", "compare_outputs", "cpu_lacks_kernel",
           "cpu_results", "flat_tensors", "in_float64",
           "mode", "set_mode", "triton_on_cpu", "unrepeatable_ops"]
