"""The archsim compiler: PyTorch graphs to scheduled programs.

Light on import (``compiler.ir`` must load without torch): the torch-facing API is
imported on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompileOptions", "CompiledProgram", "compile_graph", "compile_op",
           "export_decompositions", "export_model"]


def __getattr__(name: str) -> Any:
    if name == "CompileOptions":
        from compiler.options import CompileOptions
        return CompileOptions
    if name in ("CompiledProgram", "compile_graph"):
        from compiler import compile as _compile
        return getattr(_compile, name)
    if name == "compile_op":
        from compiler.single_op import compile_op
        return compile_op
    if name in ("export_decompositions", "export_model"):
        from compiler import export
        return getattr(export, name)
    raise AttributeError(f"module 'compiler' has no attribute {name!r}")
