"""Meta-tests for placement-stage codes (WG8xx), the sibling of tests/ui/test_registry.py.

Every live placement code has an explanation whose failing example (a ```walk model, then a
```yaml placement) reports that code and whose fixed example is clean: the model checks without
diagnostics and the placement without errors or that code. Every code has a placement UI test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ui.test_ui import expected_annotations
from wgc.diagnostics.codes import REGISTRY
from wgc.diagnostics.explain import explanation, placement_examples
from wgc.driver import Driver
from wgc.placement.check import check_placement

UI = Path(__file__).resolve().parent / "placement"
LIVE = sorted(c.code for c in REGISTRY.values() if not c.retired and c.stage == "placement")
_driver = Driver()


def _check(code: str, which: str, walk: str, placement: str):
    front = _driver.front_end(f"{code}-{which}.walk", walk)
    assert front.model is not None and not front.diagnostics, [
        (d.code, d.message) for d in front.diagnostics
    ]
    return check_placement(front.model, f"{code}-{which}.yaml", placement).diagnostics


@pytest.mark.parametrize("code", LIVE)
def test_code_has_explanation(code):
    assert explanation(code).startswith(f"# {code}: {REGISTRY[code].title}\n")


@pytest.mark.parametrize("code", LIVE)
def test_explanation_examples_check(code):
    walk_bad, yaml_bad, walk_good, yaml_good = placement_examples(code)
    bad = _check(code, "failing", walk_bad, yaml_bad)
    assert code in {d.code for d in bad}, f"failing example reports {[d.code for d in bad]}"
    good = _check(code, "fixed", walk_good, yaml_good)
    assert not good, [(d.code, d.message) for d in good]


@pytest.mark.parametrize("code", LIVE)
def test_code_has_placement_ui_test(code):
    codes = set()
    for p in UI.glob("*.yaml"):
        codes |= {c for _, c in expected_annotations(p.read_text(encoding="utf-8"))}
    assert code in codes, f"no placement UI test expects {code}"


def test_placement_codes_are_registered():
    assert LIVE and all(c.startswith("WG8") for c in LIVE)
