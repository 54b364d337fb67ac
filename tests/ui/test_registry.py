"""Meta-tests: the code registry, the explanations and the UI tests agree.

Every live code has an explanation whose failing example reports that code and whose fixed
example compiles without errors, and at least one UI test expects it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc.diagnostics.codes import REGISTRY
from wgc.diagnostics.explain import examples, explanation
from wgc.driver import Driver

UI = Path(__file__).resolve().parent
ELSEWHERE = ("placement", "launch", "command", "run")  # stages whose codes are tested elsewhere
LIVE = sorted(c.code for c in REGISTRY.values() if not c.retired and c.stage not in ELSEWHERE)
_driver = Driver()


def _ui_codes() -> set[str]:
    from tests.ui.test_ui import expected_annotations

    codes = set()
    for p in UI.rglob("*.walk"):
        codes |= {c for _, c in expected_annotations(p.read_text(encoding="utf-8"))}
    return codes


@pytest.mark.parametrize("code", LIVE)
def test_code_has_explanation(code):
    text = explanation(code)
    assert text.startswith(f"# {code}")


@pytest.mark.parametrize("code", LIVE)
def test_explanation_examples_compile(code):
    if code == "WG010":
        pytest.skip("an unreadable file has no source to show; its explanation is prose only")
    failing, fixed = examples(code)
    bad = _checked(f"{code}-failing.walk", failing, code)
    assert code in {d.code for d in bad}, (
        f"failing example of {code} reports {[d.code for d in bad]}"
    )
    good = _checked(f"{code}-fixed.walk", fixed, code)
    assert not [d for d in good if d.is_error or d.code == code], [
        (d.code, d.message) for d in good
    ]


# codes only `wgc check --imports` reports: their examples are checked that way
IMPORT_CODES = ("WG118", "WG119")


def _checked(name: str, text: str, code: str):
    result = _driver.front_end(name, text)
    diags = list(result.diagnostics)
    if code in IMPORT_CODES and result.model is not None:
        from wgc.cli.check_imports import check_imports

        diags += check_imports(result.model)
    return diags


@pytest.mark.parametrize("code", LIVE)
def test_code_has_ui_test(code):
    if code == "WG010":
        pytest.skip("unreadable files are tested in tests/unit/test_cli_basic.py")
    assert code in _ui_codes(), f"no UI test expects {code}"


def test_registry_codes_are_well_formed():
    for code, c in REGISTRY.items():
        assert code == c.code and len(code) == 5 and code.startswith("WG")
