"""From a node's `impl "pkg.mod:Class"` to the Python class, without importing anything.

Importing node code in an editor would run it (and pull in torch), so the module is looked for
as a file: `pkg/mod.py` or `pkg/mod/__init__.py` under the model's folder and each folder above
it, then under `sys.path`. The class is found with `ast`; its line and docstring are what
go-to-definition and hover show. A class the module imports from another (``from
pkg.other import Class``, a re-export) is followed there, a few imports deep.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

from wgc_runtime.contract.families import resolve_module


@dataclass(frozen=True, slots=True)
class PyClass:
    file: str
    line: int  # 0-based, the `class` line
    col: int
    docstring: str | None


def module_file(module: str, near: str) -> Path | None:
    """The source file of ``module`` (dotted), searched from ``near``'s folder upwards."""
    rel = Path(*module.split("."))
    roots = [*Path(near).resolve().parents, *(Path(p) for p in sys.path if p)]
    for root in roots:
        for candidate in (root / rel.with_suffix(".py"), root / rel / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def find_class(impl: str, near: str) -> PyClass | None:
    """``impl`` (`pkg.mod:Class`) as a class in a file; None when it cannot be found."""
    module, _, name = impl.partition(":")
    if not module or not name:
        return None
    path = module_file(module, near) or module_file(resolve_module(module), near)
    if path is None:
        return None
    return _class_in(path, module, name.split(".")[0], near, _REEXPORT_DEPTH)


_REEXPORT_DEPTH = 4  # re-exports followed before settling for the module's first line


def _class_in(path: Path, module: str, target: str, near: str, depth: int) -> PyClass:
    """``target`` defined in ``path`` (module ``module``), or followed through its import;
    else the module's first line."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return PyClass(str(path), 0, 0, None)
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == target:
            return PyClass(str(path), stmt.lineno - 1, stmt.col_offset, ast.get_docstring(stmt))
    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom) or depth <= 0:
            continue
        for alias in stmt.names:
            if (alias.asname or alias.name) != target:
                continue
            source = _absolute(module, path, stmt)
            found = module_file(source, near) if source else None
            if source and found:
                return _class_in(found, source, alias.name, near, depth - 1)
    return PyClass(str(path), 0, 0, None)


def _absolute(module: str, path: Path, stmt: ast.ImportFrom) -> str | None:
    """The dotted module an import names, a relative one resolved against ``module``."""
    if not stmt.level:
        return stmt.module
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if stmt.level - 1 > len(package):
        return None
    base = package[: len(package) - (stmt.level - 1)]
    return ".".join([*base, *([stmt.module] if stmt.module else [])]) or None
