"""The one exception tree of archsim.

Every error a user can cause derives from :class:`ArchsimError`. Messages name the
block, field, command or op at fault and the bad value. This module is a leaf: it
imports nothing from the project, so the IR, the config and the simulator can all
raise these without import cycles.
"""

from __future__ import annotations

from collections.abc import Sequence


class ArchsimError(Exception):
    """Base of every error archsim raises on purpose."""


class ConfigError(ArchsimError):
    """A hardware description is invalid. Holds every problem found, not just the first."""

    def __init__(self, problems: Sequence[str], source: str = "config") -> None:
        self.problems = tuple(problems)
        self.source = source
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source}: {count} {noun}:\n{lines}")


class ParseError(ArchsimError):
    """A text program could not be parsed; names the line and column."""

    def __init__(self, message: str, line: int, column: int, source: str = "<program>") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        super().__init__(f"{source}:{line}:{column}: {message}")


class VerifyError(ArchsimError):
    """A program is not valid for a configuration. Holds every problem found."""

    def __init__(self, problems: Sequence[str], program: str = "program") -> None:
        self.problems = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"program {program!r} is invalid ({count} {noun}):\n{lines}")


class ProgramConfigError(VerifyError):
    """A saved program is not valid on the config it was given (another preset than the
    one it was compiled for, or that preset changed by overrides): one line with the
    count, the first problem and the preset it was compiled for; ``problems`` holds
    them all."""

    def __init__(self, problems: Sequence[str], program: str, config: str,
                 hint: str = "") -> None:
        self.problems = tuple(problems)
        count = len(self.problems)
        noun = "problem" if count == 1 else "problems"
        first = f"; first: {self.problems[0]}" if self.problems else ""
        ArchsimError.__init__(self, f"program {program!r} is invalid on {config} ({count} "
                                    f"{noun}{first}){hint}")


class CapacityError(ArchsimError):
    """Something does not fit: SRAM, DRAM, or device memory."""


class LoweringError(ArchsimError):
    """The compiler could not lower an op it claims to support."""


class UnsupportedOpError(ArchsimError):
    """An op has no lowering and no fallback was allowed."""


class SimulationError(ArchsimError):
    """A simulation could not finish or failed while executing a command."""


class HostOpError(SimulationError):
    """A host op's function raised on its inputs: the data's error (``torch.linalg.inv``
    of a singular matrix), not the simulator's. ``error`` is the function's own
    exception (also the cause), for a caller that hands it to the user as it is."""

    def __init__(self, op_name: str, error: Exception) -> None:
        super().__init__(f"host op {op_name!r} raised {type(error).__name__}: {error}")
        self.op_name = op_name
        self.error = error


class CollectiveError(ArchsimError):
    """A collective that cannot be built: unknown operation or algorithm."""


class DeviceMismatchError(ArchsimError, RuntimeError):
    """An op on npu tensors was given a CPU tensor that is not a scalar; torch refuses
    the same for CUDA, with a ``RuntimeError`` (this is one too)."""


class DeviceMemoryError(CapacityError):
    """A model's weights, KV cache and activations do not fit in a chip's DRAM.
    ``program`` is the name the message gives the program (the compiler's
    ``graph_<hash>``), for a caller that knows the model's own name to put in."""

    def __init__(self, message: str, program: str = "") -> None:
        super().__init__(message)
        self.program = program

    def renamed(self, name: str) -> DeviceMemoryError:
        """The same error naming the program ``name`` (the model a user gave)."""
        if not self.program or not name:
            return self
        return DeviceMemoryError(str(self).replace(self.program, name, 1), name)


class HostMemoryError(CapacityError):
    """A functional run would need more host memory than this machine has available
    (names the tensor and the bytes)."""


class ProgramTooLargeError(CapacityError):
    """A compile would emit more commands than the cap (``ARCHSIM_MAX_COMMANDS``)."""


class NoChipLinksError(ArchsimError):
    """A run over several chips (tensor or pipeline parallel) on a hardware description
    without chip-to-chip links (no ``interconnect:`` section)."""


class ModelFileError(ArchsimError):
    """A model file cannot be loaded: it is not valid Python, or its own code raised while
    defining the model and its inputs (names the file, the line and the exception)."""


class ExportError(ArchsimError):
    """``torch.export`` cannot trace a model into one graph: its forward pass branches on
    a tensor's values (names the line), or torch refused it otherwise (names torch's
    error, kept as the cause)."""


class ModelConfigError(ArchsimError):
    """A language-model description (config.json) is missing, unreadable or does not
    fit the requested parallelism."""


class SequenceTooLongError(ModelConfigError):
    """More tokens than a language model's positions (``archsim llm``'s prompt and
    generated tokens, ``archsim run``'s ``--seq``): a learned position table has no row
    for them (torch raises IndexError), a rotary model was not trained past them."""


class NumericsError(ArchsimError):
    """A functional run's outputs disagree with the same model run by torch on CPU:
    numbers are a contract, never a printed diff."""


class AgreementError(ArchsimError):
    """A layer or array given to the SCALE-Sim agreement mode is not valid."""


class TritonError(ArchsimError):
    """A Triton kernel cannot be traced or lowered: names the kernel, the line and the
    construct (data-dependent addresses or control flow, atomics, an unsupported ``tl``
    function), or Triton is not installed."""
