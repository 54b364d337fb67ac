"""Placement UI tests: every `tests/ui/placement/<name>.yaml` is checked against `<name>.walk`.

* The `.walk` file is a small model that must check clean on its own (no diagnostics at all).
* Annotations live in the YAML: a line ending in `#~ WG811` (several codes allowed) expects
  diagnostics with those codes whose primary span starts on that line; `#~^ WG811` points at the
  line above. The (line, code) pairs must equal what loading and the placement rules report.
* Snapshots: the rendered text output is compared with `<name>.stderr`; run
  `pytest tests/ui --bless` to (re)write snapshots after an intended change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.test_ui import expected_annotations
from wgc.diagnostics.render import render_text
from wgc.driver import Driver
from wgc.placement.check import check_placement

ROOT = Path(__file__).resolve().parents[2]
UI = Path(__file__).resolve().parent / "placement"
CASES = sorted(UI.glob("*.yaml"))

_driver = Driver()


def run_case(yaml_path: Path):
    """(yaml text, diagnostics, rendered text) of one case."""
    walk = yaml_path.with_suffix(".walk")
    front = _driver.front_end(walk.relative_to(ROOT).as_posix(), walk.read_text(encoding="utf-8"))
    assert front.model is not None and not front.diagnostics, [
        (d.code, d.message) for d in front.diagnostics
    ]
    rel = yaml_path.relative_to(ROOT).as_posix()
    text = yaml_path.read_text(encoding="utf-8")
    result = check_placement(front.model, rel, text)
    front.sources.add(rel, text)
    rendered = render_text(result.diagnostics, front.sources) if result.diagnostics else ""
    return text, rel, result.diagnostics, rendered


@pytest.mark.parametrize("path", CASES, ids=[p.name for p in CASES])
def test_placement_ui(path: Path, request):
    text, rel, diags, rendered = run_case(path)
    got = {(d.span.line, d.code) for d in diags if d.span.file == rel}
    elsewhere = [(d.code, str(d.span)) for d in diags if d.span.file != rel]
    want = expected_annotations(text)
    assert want, f"{path.name} has no `#~ WG8nn` annotation"
    assert not elsewhere, f"diagnostics outside the YAML: {elsewhere}\n\n{rendered}"
    assert got == want, (
        f"\nmissing: {sorted(want - got)}\nunexpected: {sorted(got - want)}\n\n{rendered}"
    )
    snap = path.with_suffix(".stderr")
    if request.config.getoption("--bless") or not snap.exists():
        snap.write_text(rendered, encoding="utf-8")
    assert snap.read_text(encoding="utf-8") == rendered, f"stale snapshot {snap.name}; --bless"


def test_every_yaml_has_a_model():
    for path in CASES:
        assert path.with_suffix(".walk").exists(), f"{path.name} has no {path.stem}.walk"
