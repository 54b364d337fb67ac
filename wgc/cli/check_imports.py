"""`wgc check --imports`: import every node's `impl` and check its class against the node.

The compiler never imports node code (checks stay pure, fast and runnable without torch), so
an `impl` that does not import is otherwise found only when a worker starts. This opt-in check,
for environments that have the node code (and the runtime), imports each `impl "module:Class"`
once (the working directory is on the import path, as for `wgc run`) and reports, on the `impl`
line:

* WG118: the module does not import (its first error line), or has no such class;
* WG119: the class is not a subclass of the runtime's `Node`, implements neither `forward` nor
  `forward_one`, or declares port names (optional class attributes `INPUTS` / `OUTPUTS`:
  sequences of names) that differ from the node's ports.

The runtime is imported by name at run time only: the front end never depends on it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.ir.decls import Node
from wgc.ir.model import Model
from wgc_runtime.contract.families import resolve_impl


def check_imports(model: Model) -> list[Diagnostic]:
    """Every import problem of ``model``'s nodes (one per distinct `impl` and node)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    base = _node_base()
    out: list[Diagnostic] = []
    loaded: dict[str, object] = {}
    for node in model.nodes:
        if node.impl is None or model.node(node.name) is not node:
            continue  # WG115 / WG101
        where = node.impl_span or node.span
        if node.impl not in loaded:
            loaded[node.impl] = _load(node.impl)
        got = loaded[node.impl]
        if isinstance(got, str):
            out.append(
                diag(
                    "WG118",
                    f"`impl` of node `{node.name}` does not import: {got}",
                    where,
                    label=f"`{node.impl}`",
                    help="fix the path (`package.module:Class`, importable from the working "
                    "directory), or install what the module needs",
                )
            )
            continue
        out += _fits(node, got, base, where)
    return out


def _node_base() -> type | None:
    try:
        return importlib.import_module("wgc_runtime.contract.node").Node
    except ImportError:  # the core install: no runtime, so no base class to compare with
        return None


def _load(impl: str) -> object:
    """The class ``impl`` names, or why it cannot be had."""
    module, _, name = resolve_impl(impl).partition(":")
    if not module or not name:
        return "not a `module:Class` path"
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # any error while importing user code is the finding
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    if not hasattr(mod, name):
        return f"module `{module}` has no `{name}`"
    return getattr(mod, name)


def _fits(node: Node, cls: object, base: type | None, where: Span) -> list[Diagnostic]:
    def problem(message: str, hint: str, labels: Iterable[Label] = ()) -> Diagnostic:
        return diag("WG119", message, where, label="this class", labels=list(labels), help=hint)

    if not isinstance(cls, type):
        return [problem(f"`{node.impl}` is not a class", "`impl` names a `Node` subclass")]
    if base is not None and not issubclass(cls, base):
        return [
            problem(
                f"`{node.impl}` is not a subclass of `wgc_runtime.contract.node.Node`",
                "derive the class from `Node` (`class X(Node): ...`)",
            )
        ]
    out = []
    if base is not None and cls.forward is base.forward and cls.forward_one is base.forward_one:
        out.append(
            problem(
                f"`{node.impl}` implements neither `forward` nor `forward_one`",
                "override `forward_one(inputs, ctx)` (one request) or `forward(batch)`",
            )
        )
    for attr, ports, word in (("INPUTS", node.inputs, "in"), ("OUTPUTS", node.outputs, "out")):
        declared = getattr(cls, attr, None)
        if declared is None:
            continue
        names = {str(n) for n in declared}
        want = {p.name for p in ports}
        extra, missing = sorted(names - want), sorted(want - names)
        if extra or missing:
            parts = []
            if missing:
                parts.append("lacks " + ", ".join(f"`{n}`" for n in missing))
            if extra:
                parts.append("has " + ", ".join(f"`{n}`" for n in extra) + " the node does not")
            out.append(
                problem(
                    f"`{node.impl}.{attr}` {' and '.join(parts)} (node `{node.name}`'s `{word}` "
                    "ports)",
                    f"make `{attr}` list exactly the node's `{word}` ports, or change the node",
                    [Label(p.span, f"`{word} {p.name}`") for p in ports if p.name in missing],
                )
            )
    return out
