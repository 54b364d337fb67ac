"""Names the `.walk` author chooses cannot collide with names the generated modules use.

Every identifier the generated modules use (each name they define, import, call or read, and
each attribute they touch, in every module under `generated/` and in this test's own output)
becomes, at once, a `for` variable, a walk, a walk parameter and a channel of one model; the
model compiles, every generated module imports, and its requests give the reference
interpreter's outputs on the runtime (`test_runtime_vs_interp.check`). Before user names were
mangled (`wgc.codegen.flows.py_name`), a `for` variable called `RunWalk`, `Fail` or `Persisted`
shadowed the flow protocol and every request failed (`'Segment' object is not callable`).
"""

from __future__ import annotations

import ast
import re
import sys
import tempfile
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from test_runtime_vs_interp import check

from wgc.codegen.flows import USER_PREFIX
from wgc.driver import Driver
from wgc.interp import segment

ROOT = Path(__file__).resolve().parents[2]
# the language's keywords (docs/language.md §2): contextual, but best not names at all
WALK_KEYWORDS = {
    *("model", "param", "type", "option", "node", "stream", "walk", "flow", "subflow"),
    *("stateless", "kv_cache", "like", "impl", "in", "out", "label", "config", "reads"),
    *("chunk", "final", "after_done", "par", "loop", "max", "until", "eager", "nospeculate"),
    *("yield", "last", "all", "emit", "as", "persist", "when", "on", "for", "match", "if"),
    *("else", "repeat", "fail", "placed", "not", "and", "or", "true", "false", "request"),
}
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
PLACEMENT = "devices: [cpu]\nplace:\n  - {nodes: [N], ranks: [0]}\n"


def identifiers(text: str) -> set[str]:
    """Every identifier a Python module uses: names, definitions, arguments, imports and
    attributes."""
    out: set[str] = set()
    for n in ast.walk(ast.parse(text)):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.ClassDef):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.keyword) and n.arg:
            out.add(n.arg)
    return out


def model(names: list[str]) -> str:
    lines = [
        "model names",
        'node N: stateless { impl "generic_nodes:Generic" in a: f32[4] out x: f32[4] }',
    ]
    for n in names:  # walk `n(n)`: its channel `n`, from its parameter `n`
        body = f"N(a = {n}) -> {n}_out = x  emit {n}_out as tensor"
        lines.append(f"walk {n}({n}: f32[4]) {{ {body} }}")
    lines.append("flow main {")
    lines.append("  repeat 1 {")  # `for _ in range(1):` around the `for` variables
    for n in names:  # the `for` variable `n`, passed to walk `n`'s parameter `n`
        lines.append(f"    for {n} in request.inputs {{")
        lines.append(f"      match {n}.modality {{ tensor => {n}({n} = {n}) }}")
        lines.append("    }")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def generated_identifiers() -> set[str]:
    seen: set[str] = set()
    for path in sorted((ROOT / "generated").glob("*/*/*.py")):
        seen |= identifiers(path.read_text())
    # and what this model's own modules use (the flow protocol under a `for`/`match`)
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "m.walk").write_text(model(["seg"]))
        Path(tmp, "p.yaml").write_text(PLACEMENT)
        res = Driver().compile(str(Path(tmp, "m.walk")), str(Path(tmp, "p.yaml")))
        assert res.ok, [d.message for d in res.diagnostics if d.is_error]
        for name, text in res.files.items():
            if name.endswith(".py"):
                seen |= identifiers(text)
    seen |= {"range", "int"}  # the builtins a flow may call (`repeat` counts)
    return {n for n in seen if NAME.fullmatch(n) and n not in WALK_KEYWORDS}


@pytest.mark.slow
def test_every_generated_identifier_is_a_safe_walk_name() -> None:
    names = sorted(generated_identifiers())
    # the flow protocol, the request and what the modules define must all be among them
    assert {"RunWalk", "Fail", "Persisted", "Request", "FlowGen", "req", "CONDUCTOR"} <= set(names)
    assert {"SPEC_VERSION", "range", "int", "flow_main"} <= set(names)
    assert any(n.startswith(USER_PREFIX) for n in names)  # a user's name, as a user's name
    request = [([segment("tensor", torch.arange(4, dtype=torch.float32))], ["tensor"], {})]
    check(model(names), PLACEMENT, request)
