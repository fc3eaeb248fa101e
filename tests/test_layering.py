"""Imports go one way: each module imports only from its own layer or the layers below
(DESIGN.md, "Dependencies"). An AST walk over every import statement of the packages,
lazy ones inside functions included; imports under ``if TYPE_CHECKING:`` are
annotations, not dependencies, and are skipped."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("archsim", "compiler", "torch_bridge", "reports", "serving")

LAYERS: tuple[tuple[str, ...], ...] = (
    ("archsim.errors", "archsim.config"),                      # 0 leaves: errors, config
    ("compiler.ir",),                                          # 1 the scheduled IR
    ("archsim",),                                              # 2 the hardware model
    ("compiler",),                                             # 3 the compiler
    ("torch_bridge",),                                         # 4 the torch bridge
    ("reports",),                                              # 5 reports
    ("archsim.app", "archsim.sweep", "serving"),               # 6 the application layer
    ("archsim.cli", "archsim.__init__"),                       # 7 the CLI, the facade
)
"""Module prefixes by layer, lowest first; the longest matching prefix wins."""

ALLOWED: dict[tuple[str, str], str] = {
    ("torch_bridge.profiler", "reports"):
        "torch_bridge.profile()'s summary/table/perfetto methods format with reports",
    ("torch_bridge.profile_report", "reports"):
        "the device profiler's text and trace are built from reports' pieces",
}
"""Known upward imports, each with its reason (DESIGN.md lists them)."""


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import outside ``if TYPE_CHECKING:``."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def wrong_way_imports(root: Path = ROOT, extra: dict[str, str] | None = None) -> list[str]:
    """``path:line: a (layer i) imports b (layer j > i)`` for each import going up;
    ``extra`` adds modules (name -> source) to the walk."""
    sources = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if module == "archsim":
                module = "archsim.__init__"
            sources[module] = path.read_text(encoding="utf-8")
    sources.update(extra or {})
    problems = []
    for module, text in sources.items():
        own = layer_of(module)
        for line, imported in _imports(ast.parse(text)):
            if imported == "archsim":
                imported = "archsim.__init__"
            other = layer_of(imported)
            if own is None or other is None or other <= own:
                continue
            if any(module.startswith(a) and (imported + ".").startswith(b + ".")
                   for a, b in ALLOWED):
                continue
            problems.append(f"{module}:{line}: layer {own} imports {imported} (layer {other})")
    return problems


def test_imports_go_one_way() -> None:
    assert wrong_way_imports() == []


@pytest.mark.parametrize("module, source", [
    ("reports.bad", "def f():\n    from archsim.cli.commands import run\n"),
    ("compiler.bad", "import torch_bridge.runtime\n"),
    ("archsim.simulator_bad", "from compiler.compile import compile_graph\n"),
    ("reports.bad", "from archsim.app.pipeline import run\n"),
    ("serving.bad", "import archsim\n"),
])
def test_a_wrong_way_import_is_caught(module: str, source: str) -> None:
    problems = set(wrong_way_imports(extra={module: source})) - set(wrong_way_imports())
    assert len(problems) == 1 and problems.pop().startswith(f"{module}:")


def test_type_checking_imports_are_annotations() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
              "    from archsim.sweep import SweepPoint\n")
    assert wrong_way_imports(extra={"reports.fine": source}) == wrong_way_imports()


def test_the_compiler_driver_and_its_layout_passes_load_without_torch() -> None:
    """``compiler.compile`` (and the graph passes it imports at module level) load
    torch-free: the frontend and the lowerings are imported on first compile."""
    import subprocess
    import sys

    code = ("import sys, compiler.compile, compiler.layout, compiler.layout_regions\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
