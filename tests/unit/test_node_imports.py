"""The node API's one import path, as docs/nodes.md writes it, and the moved modules' aliases
(`wgc_runtime.node`, `wgc_runtime.streams`): they import for one release, with a
`DeprecationWarning` naming the new path, and are the new modules themselves."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "nodes.md"


def test_the_documented_import_line_runs_as_written() -> None:
    text = DOC.read_text(encoding="utf-8")
    (line,) = re.findall(r"^```py\n(from wgc_runtime\S* import [^\n]+)\n```", text, re.M)
    namespace: dict = {}
    exec(compile(line, str(DOC), "exec"), namespace)
    from wgc_runtime.contract import node

    assert namespace["Node"] is node.Node and namespace["NodeInputError"] is node.NodeInputError
    # every module path the page names for the node API is that one module
    paths = set(re.findall(r"`(wgc_runtime\.[a-z_.]*node)`", text))
    assert paths == {"wgc_runtime.contract.node", "wgc_runtime.node"}, paths


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("wgc_runtime.node", "wgc_runtime.contract.node"),
        ("wgc_runtime.streams", "wgc_runtime.core.streams"),
    ],
)
def test_a_moved_module_keeps_an_alias_with_a_deprecation_warning(old: str, new: str) -> None:
    sys.modules.pop(old, None)  # the alias warns when it is first imported
    with pytest.warns(DeprecationWarning, match=re.escape(f"`{old}` moved to `{new}`")):
        alias = importlib.import_module(old)
    assert alias is importlib.import_module(new)
    if old == "wgc_runtime.node":
        # the old line still works (a module-level __getattr__ pyright cannot follow)
        from wgc_runtime.node import Node  # noqa: F401  # pyright: ignore[reportAttributeAccessIssue]
