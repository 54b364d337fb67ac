"""Robustness of the front end (issue 2, point 8): no input makes wgc raise.

Whatever the text (a valid generated program, one whose numbers are out of the 64-bit range, a
mutated one, grammar-shaped token soup, or arbitrary Unicode), `Driver().front_end` returns, and
everything it returns is well formed:

* every diagnostic has a registered code;
* every span (primary and secondary) is in the file: line 1 up to one past its last line, with
  columns >= 1 and the end not before the start, or the 0-span of a file-level diagnostic;
* a span's line is the line the text renderer quotes (lark counts lines by `\\n` only, so a
  renderer that split on other line breaks would quote the wrong line);
* all four renderers accept the result;
* the whole `wgc check` command line, run in-process on the text as a file, exits 0 or 1 (2
  is an internal compiler error) for each `--format`.

Example counts: 200 per property locally; under CI (``CI`` set) `CI_EXAMPLES`, 10,000 cases
across the four properties. `WGC_FUZZ_SCALE` multiplies either.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from unittest.mock import patch

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from gen_walk import mutated_programs, token_soup, walk_programs

from wgc.cli import main
from wgc.config import Env
from wgc.diagnostics.codes import REGISTRY
from wgc.diagnostics.diagnostic import Diagnostic, Span
from wgc.diagnostics.render import render_github, render_json, render_sarif, render_text
from wgc.driver import Driver, FrontEndResult

FILE = "fuzz.walk"
FORMATS = ("text", "json", "github", "sarif")
DEV_EXAMPLES = 200
# Under CI the four properties run 10,000 cases in all, weighted towards the inputs that are
# cheap to draw: a generated program costs ~10x a token soup and ~30x a random string.
CI_EXAMPLES = {"generated": 600, "big": 300, "mutated": 1200, "soup": 3200, "text": 5000}


def _robust(kind: str) -> settings:
    """Settings for one property: `DEV_EXAMPLES` locally, `CI_EXAMPLES[kind]` when `CI` is set,
    both multiplied by `WGC_FUZZ_SCALE` (e.g. 0.1 for a quick run, 10 for a long soak)."""
    base = CI_EXAMPLES[kind] if os.environ.get("CI") else DEV_EXAMPLES
    scale = float(os.environ.get("WGC_FUZZ_SCALE") or 1)
    return settings(
        max_examples=max(1, round(base * scale)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


DRIVER = Driver()
TMP = tempfile.TemporaryDirectory()  # one file, rewritten per example: cheaper than a dir each


# ------------------------------------------------------------------ checks
def _check_span(span: Span, text: str) -> None:
    if span.line == 0:  # file-level: the whole 0-span
        assert (span.col, span.end_line, span.end_col) == (0, 0, 0), span
        return
    assert span.file == FILE, span
    assert 1 <= span.line <= text.count("\n") + 2, (span, text.count("\n"))
    assert span.col >= 1 and span.end_col >= 1, span
    assert (span.end_line, span.end_col) >= (span.line, span.col), span


def _check_quoted_line(result: FrontEndResult, span: Span, text: str) -> None:
    lines = text.split("\n")
    if span.line == 0 or span.line > len(lines):
        return
    quoted = result.sources.line(FILE, span.line)
    assert quoted is None or quoted.rstrip("\r") == lines[span.line - 1].rstrip("\r"), span


def _check_diagnostic(result: FrontEndResult, d: Diagnostic, text: str) -> None:
    assert d.code in REGISTRY, d.code
    assert d.message, d
    for span in [d.span, *(label.span for label in d.labels)]:
        _check_span(span, text)
        _check_quoted_line(result, span, text)


def _render_all(result: FrontEndResult) -> None:
    assert isinstance(render_text(result.diagnostics, result.sources), str)
    assert isinstance(render_text(result.diagnostics, result.sources, color=True), str)
    doc = json.loads(render_json(result.diagnostics))
    assert len(doc["diagnostics"]) == len(result.diagnostics)
    assert render_github(result.diagnostics).count("\n") == len(result.diagnostics)
    sarif = json.loads(render_sarif(result.diagnostics))
    assert len(sarif["runs"][0]["results"]) == len(result.diagnostics)


def _check_cli(text: str) -> None:
    """`wgc check` on ``text`` as a file, in-process, once per output format (with this
    module's driver, as one `wgc check` process uses one: `wgc.cli.check._driver`)."""
    path = Path(TMP.name, FILE)
    path.write_text(text, encoding="utf-8", newline="")  # newline="": keep `\r` as drawn
    for fmt in FORMATS:
        with patch("wgc.driver.Driver", lambda: DRIVER):
            res = CliRunner().invoke(main, ["check", "--format", fmt, str(path)], obj=Env())
        assert res.exit_code in (0, 1), (fmt, res.exit_code, res.output)
        assert "internal compiler error" not in res.output, res.output
        if fmt in ("json", "sarif"):
            json.loads(res.stdout)


def _assert_robust(text: str) -> None:
    result = DRIVER.front_end(FILE, text)
    assert isinstance(result, FrontEndResult)
    for d in result.diagnostics:
        _check_diagnostic(result, d, text)
    if result.model is None:  # only a syntax error stops before the IR
        assert result.errors, "no IR but no error either"
    _render_all(result)
    _check_cli(text)


# ------------------------------------------------------------------ inputs
# numbers that overflow a float, an int64, Python's int-from-text limit (4,300 digits), or the
# float range once multiplied; and numbers at the edges of the range
BIG_NUMBERS = (
    "1e309",
    "1e308",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "9" * 5000,
    "0" * 30 + "7",
    "1.7976931348623157e308",
)
_NUMBER_OR_SKIPPED = re.compile(
    r'#[^\n]*|"(?:[^"\\\n]|\\.)*"|[A-Za-z_]\w*|(\d[\d.]*(?:[eE][-+]?\d+)?)'
)


@st.composite
def programs_with_big_numbers(draw) -> str:
    """A generated program with some of its number literals replaced by `BIG_NUMBERS`."""

    def swap(m: re.Match) -> str:
        if m.group(1) is None or not draw(st.booleans()):  # a comment, string or name
            return m.group()
        return draw(st.sampled_from(BIG_NUMBERS))

    return _NUMBER_OR_SKIPPED.sub(swap, draw(walk_programs()))


# ------------------------------------------------------------------ properties
@_robust("generated")
@given(walk_programs())
def test_generated_programs_never_crash(text: str) -> None:
    _assert_robust(text)


@_robust("big")
@given(programs_with_big_numbers())
def test_out_of_range_numbers_never_crash(text: str) -> None:
    _assert_robust(text)


@_robust("mutated")
@given(mutated_programs())
def test_mutated_programs_never_crash(text: str) -> None:
    _assert_robust(text)


@_robust("soup")
@given(token_soup())
def test_token_soup_never_crashes(text: str) -> None:
    _assert_robust(text)


@_robust("text")
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text: str) -> None:
    _assert_robust(text)


# ------------------------------------------------------------------ regressions found by fuzzing
@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "model m\x0c# form feed\nnode",  # a line break lark does not count
        "model m # \u2028 comment\nnode",
        "model m\r\nnode A : stateless {\r\n",
        "\x00",
        "\ufeffmodel m",
        "model m\nparam p = 1e309\ntype T = f32[p]\n",
        "model m\nparam p = " + "9" * 5000 + "\n",
        "walk w(x?: f32[1]) {\n  loop l max 1e309 {\n    A(x) -> x\n  } yield last x\n}\n",
        "flow f { repeat option.n * 1e400 { w() } }\nwalk w() { }\n",
        # a per-mode default and a plain duplicate of the same option (the fuzzer's find)
        'option a: bool = match option.a { "a" => 0 }\noption a: bool = true\n',
    ],
)
def test_known_edge_cases(text: str) -> None:
    _assert_robust(text)


def test_check_reports_an_overflowing_loop_bound_as_a_user_error(tmp_path: Path) -> None:
    # issue 16: `max 1e309` raised OverflowError in the loop_shape pass (exit 2, a traceback)
    path = tmp_path / "big.walk"
    path.write_text(
        'model big\nnode A: stateless {\n  impl "m:A"\n  in  x: f32[4]\n  out x: f32[4]\n}\n'
        "walk w(x?: f32[4]) {\n  loop l max 1e309 {\n    A(x) -> x\n  } yield last x\n"
        "  emit x as tensor\n}\nflow main { w() }\n",
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["check", str(path)], obj=Env())
    assert res.exit_code == 1, res.output
    assert "error[WG303]: loop bound is not a static integer" in res.stderr
    assert f"{path}:8:14" in res.stderr and "Traceback" not in res.output
