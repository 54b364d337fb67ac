"""UI tests: every `tests/ui/**/*.walk` is checked, and its diagnostics must match.

* Annotations: a line ending in `#~ WG401` (several codes allowed: `#~ WG401 WG402`) expects
  diagnostics with those codes whose primary span starts on that line; `#~^ WG401` points at the
  line above. The set of (line, code) pairs must equal what the compiler reports — nothing
  missing, nothing extra.
* `tests/ui/imports/` is checked as `wgc check --imports` checks: its `impl`s are imported.
* Snapshots: the rendered text output is compared with the `.stderr` file beside the test.
  Run `pytest tests/ui --bless` to (re)write snapshots after an intended change.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wgc.diagnostics.render import render_text
from wgc.driver import Driver

ROOT = Path(__file__).resolve().parents[2]
UI = Path(__file__).resolve().parent
# tests/ui/placement/ holds .walk + .yaml pairs whose annotations sit in the YAML: see
# tests/ui/test_placement_ui.py.
CASES = sorted(p for p in UI.rglob("*.walk") if "placement" not in p.relative_to(UI).parts[:1])
_ANNOT = re.compile(r"#~(\^*)\s+((?:WG\d{3}\s*)+)$")

_driver = Driver()


def expected_annotations(text: str) -> set[tuple[int, str]]:
    out = set()
    for i, line in enumerate(text.split("\n"), start=1):  # lines as the lexer counts them
        m = _ANNOT.search(line)
        if m:
            target = i - len(m.group(1))
            for code in m.group(2).split():
                out.add((target, code))
    return out


def run_case(path: Path):
    """The front end on ``path``; under `imports/`, also what `wgc check --imports` adds."""
    rel = path.relative_to(ROOT).as_posix()
    text = path.read_text(encoding="utf-8")
    result = _driver.front_end(rel, text)
    if "imports" in path.relative_to(UI).parts[:1] and result.model is not None:
        from wgc.cli.check_imports import check_imports

        result.diagnostics = result.diagnostics + check_imports(result.model)
    return text, result


@pytest.mark.parametrize("path", CASES, ids=[p.relative_to(UI).as_posix() for p in CASES])
def test_ui(path: Path, request):
    text, result = run_case(path)
    got = {(d.span.line, d.code) for d in result.diagnostics}
    want = expected_annotations(text)
    assert want, f"{path.name} has no `#~ WGnnn` annotation"
    rendered = render_text(result.diagnostics, result.sources) if result.diagnostics else ""
    assert got == want, (
        f"\nmissing: {sorted(want - got)}\nunexpected: {sorted(got - want)}\n\n{rendered}"
    )
    snap = path.with_suffix(".stderr")
    if request.config.getoption("--bless") or not snap.exists():
        snap.write_text(rendered, encoding="utf-8")
    assert snap.read_text(encoding="utf-8") == rendered, f"stale snapshot {snap.name}; --bless"
