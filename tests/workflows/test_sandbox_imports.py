"""The workflow sandbox re-imports, for every new workflow instance, each module that
is not passed through. ``from workflows import agent`` inside
``imports_passed_through()`` passes only the package through: Python then imports
``workflows.agent`` itself, afresh, into the sandbox (measured: most of the cost of
starting a session on a worker). A full module name is passed through."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

WORKFLOWS = Path(__file__).parents[2] / "workflows"


def _passthrough_blocks(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                "imports_passed_through" in ast.unparse(item.context_expr)
                for item in node.items):
            yield node


def _is_submodule(package: str, name: str) -> bool:
    spec = importlib.util.find_spec(package)
    return bool(spec and spec.submodule_search_locations
                and importlib.util.find_spec(f"{package}.{name}"))


def modules_imported_as_names(path: Path) -> list[str]:
    """``from pkg import mod`` lines in passthrough blocks where ``mod`` is a module."""
    found = []
    for block in _passthrough_blocks(ast.parse(path.read_text())):
        for stmt in ast.walk(block):
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                found += [f"{stmt.module}.{a.name}" for a in stmt.names
                          if _is_submodule(stmt.module, a.name)]
    return found


def test_passthrough_blocks_name_modules_in_full():
    files = sorted(WORKFLOWS.glob("*.py"))
    assert any(list(_passthrough_blocks(ast.parse(p.read_text()))) for p in files)
    offenders = {p.name: modules_imported_as_names(p) for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_finds_a_module_imported_by_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from temporalio import workflow\n"
                   "with workflow.unsafe.imports_passed_through():\n"
                   "    from workflows import agent\n"
                   "    from workflows.agent import reply_problem\n")
    assert modules_imported_as_names(bad) == ["workflows.agent"]
