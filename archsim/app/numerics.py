"""Numbers are a contract: a functional run's outputs against the same model on CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from archsim.app.progress import Progress
from torch_bridge.numerics import check_close, in_float64, triton_on_cpu, unrepeatable_ops


def split_outputs(exported: Any, outputs: tuple[Any, ...]
                  ) -> tuple[tuple[Any, ...], tuple[tuple[int, Any], ...]]:
    """A program's outputs as (the model's own outputs, (user input index, its new
    contents) per input the graph mutates): a ``triton_op`` marks every tensor it passes
    to a kernel as possibly written, so torch.export returns those inputs too."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = getattr(exported, "graph_signature", None)
    if signature is None or len(signature.output_specs) != len(outputs):
        return outputs, ()
    users = [spec.arg.name for spec in signature.input_specs
             if spec.kind == InputKind.USER_INPUT]
    own, mutated = [], []
    for spec, value in zip(signature.output_specs, outputs):
        if spec.kind == OutputKind.USER_OUTPUT:
            own.append(value)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION and spec.target in users:
            mutated.append((users.index(spec.target), value))
    return tuple(own), tuple(mutated)


def input_values(exported: Any, tensors: tuple[Any, ...]) -> dict[str, Any]:
    """A functional run's graph inputs by placeholder name (user inputs, then the
    parameters and buffers torch.export lifted): Triton kernels whose control flow or
    addresses depend on them are built for these values."""
    from torch.export.graph_signature import InputKind

    signature = getattr(exported, "graph_signature", None)
    if signature is None:
        return {}
    state = {**getattr(exported, "state_dict", {}), **getattr(exported, "constants", {})}
    users = iter(tensors)
    out = {}
    for spec in signature.input_specs:
        if spec.kind == InputKind.USER_INPUT:
            value = next(users, None)
        else:
            value = state.get(spec.target)
        if hasattr(spec.arg, "name") and value is not None:
            out[spec.arg.name] = value
    return out


def check_numerics(module: Any, tensors: tuple[Any, ...], outputs: tuple[Any, ...],
                   progress: Progress, mutated: tuple[tuple[int, Any], ...] = (),
                   graph: Any = None) -> float:
    """The largest difference between the schedule's outputs and the model run by torch
    on CPU; a :class:`NumericsError` when an output is off by more than its dtype's
    tolerance (torch.testing's, with the absolute part scaled to the output's size:
    a long chain of roundings in a model is not a wrong number) and farther from the
    model run in float64 than torch's own result is, give or take
    :data:`torch_bridge.numerics.ORDER_SLACK`. ``mutated`` inputs
    (index, new contents) are checked against the inputs after the CPU run. A model
    whose exported ``graph`` draws random numbers (dropout in training mode,
    ``rand_like``) has no reference: it is said so, and NaN returned."""
    import torch

    unrepeatable = unrepeatable_ops(graph) if graph is not None else ()
    if unrepeatable:
        progress.note(f"numerics: not compared with torch: the model draws random numbers "
                      f"or reads uninitialized memory ({', '.join(unrepeatable)}), so "
                      f"another run gets other numbers")
        return float("nan")

    def run(model: Any, inputs: tuple[Any, ...]) -> tuple[Any, ...]:
        with torch.no_grad(), triton_on_cpu(), _mha_as_exported():
            out = model(*inputs)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    def in_double() -> tuple[Any, ...]:  # only when an output is off: rounding or wrong?
        import copy

        double = copy.deepcopy(module)
        return run(double.double() if hasattr(double, "double") else double,
                   in_float64(tensors))

    expected = run(module, tensors)
    worst = check_close(outputs, expected, in_double, "output")
    if mutated:
        worst = max(worst, check_close(tuple(v for _, v in mutated),
                                       tuple(tensors[i] for i, _ in mutated),
                                       lambda: None, "mutated input"))
    progress.note(f"numerics: max |npu - torch cpu| = {worst:.3g} over {len(outputs)} "
                  f"output(s)")
    return worst


@contextlib.contextmanager
def _mha_as_exported() -> Iterator[None]:
    """``nn.MultiheadAttention`` (and ``nn.Transformer*`` layers) under no_grad in eval
    mode take torch's native fast path, which gives a fully padded item NaN; torch.export
    traces the math path the program runs, which gives it zeros: the reference takes
    that path too."""
    import torch

    enabled = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(enabled)


__all__ = ["check_numerics", "input_values", "split_outputs"]
