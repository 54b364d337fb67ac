"""The diagnostic renderers: rustc-style text, JSON, GitHub annotations and SARIF."""

from __future__ import annotations

import json

from wgc.diagnostics import Diagnostic, Label, SourceMap, Span, diag
from wgc.diagnostics.render import (
    render_github,
    render_json,
    render_sarif,
    render_summary,
    render_text,
)

FILE = "examples/x.walk"


def _sources() -> SourceMap:
    lines = [f"# line {i}" for i in range(1, 10)]
    lines += [
        "  par {",
        "      LLM2(latents) -> v = velocity",
        "      LLM(latents) -> v = velocity",
    ]
    sources = SourceMap()
    sources.add(FILE, "\n".join(lines) + "\n")
    sources.add("other.walk", "node A {}\nnode B {}\n")
    return sources


def _par_write() -> Diagnostic:
    return diag(
        "WG401",
        "`par` branches write the same channel `v`",
        Span(FILE, 12, 7, 12, 36),
        label="written again here",
        labels=[Label(Span(FILE, 11, 7, 11, 37), "first written here")],
        help="give each branch its own channel name",
    )


def test_text_quotes_primary_and_secondary_in_line_order() -> None:
    expected = """\
error[WG401]: `par` branches write the same channel `v`
  --> examples/x.walk:12:7
   |
11 |       LLM2(latents) -> v = velocity
   |       ------------------------------ first written here
12 |       LLM(latents) -> v = velocity
   |       ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ written again here
   |
   = help: give each branch its own channel name
"""
    assert render_text([_par_write()], _sources()) == expected


def test_text_single_digit_gutter_and_label_in_another_file() -> None:
    d = diag(
        "WG101",
        "duplicate declaration of `A`",
        Span(FILE, 2, 3, 2, 7),
        labels=[Label(Span("other.walk", 1, 6, 1, 7), "first declared here")],
        notes=["names are global to a file"],
    )
    expected = """\
error[WG101]: duplicate declaration of `A`
 --> examples/x.walk:2:3
  |
2 | # line 2
  |   ^^^^
  |
 ::: other.walk:1:6
1 | node A {}
  |      - first declared here
  |
  = note: names are global to a file
"""
    assert render_text([d], _sources()) == expected


def test_text_multiline_span_underlines_to_end_of_first_line() -> None:
    d = diag("WG905", "channel `v` bound but never read", Span(FILE, 10, 3, 12, 4))
    out = render_text([d], _sources())
    assert out.splitlines()[-1] == "   |   ^^^^^"
    assert out.startswith("warning[WG905]:")


def test_text_without_source_prints_header_location_and_help_only() -> None:
    d = diag("WG010", "cannot read `gone.walk`", Span("gone.walk", 1, 1, 1, 2), help="check it")
    assert render_text([d], SourceMap()) == (
        "error[WG010]: cannot read `gone.walk`\n --> gone.walk:1:1\n  = help: check it\n"
    )


def test_text_sorts_and_separates_diagnostics() -> None:
    late = diag("WG901", "unused node `B`", Span("other.walk", 2, 6, 2, 7))
    early = diag("WG901", "unused node `A`", Span("other.walk", 1, 6, 1, 7))
    blocks = render_text([late, early], _sources()).split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [
        "warning[WG901]: unused node `A`",
        "warning[WG901]: unused node `B`",
    ]


def test_text_color_marks_severity_and_gutter() -> None:
    out = render_text([_par_write()], _sources(), color=True)
    assert "\x1b[1;31merror[WG401]\x1b[0m" in out
    assert "\x1b[1;34m" in out
    assert "\x1b" not in render_text([_par_write()], _sources())


def test_summary_lines() -> None:
    assert render_summary(2, 1, "x.walk") == (
        "error: could not check `x.walk` due to 2 previous errors; 1 warning emitted"
    )
    assert (
        render_summary(1, 0, "x.walk") == "error: could not check `x.walk` due to 1 previous error"
    )
    assert render_summary(0, 2, "x.walk") == "warning: `x.walk` generated 2 warnings"
    assert render_summary(0, 0, "x.walk") == ""


def test_json_contract() -> None:
    warn = diag("WG901", "unused node `A`", Span("other.walk", 1, 6, 1, 7), notes=["n"])
    doc = json.loads(render_json([_par_write(), warn]))
    assert doc["version"] == 1
    assert (doc["errors"], doc["warnings"]) == (1, 1)
    first = doc["diagnostics"][0]
    assert first == {
        "code": "WG401",
        "severity": "error",
        "message": "`par` branches write the same channel `v`",
        "file": FILE,
        "line": 12,
        "col": 7,
        "end_line": 12,
        "end_col": 36,
        "help": "give each branch its own channel name",
        "notes": [],
        "labels": [
            {
                "file": FILE,
                "line": 11,
                "col": 7,
                "end_line": 11,
                "end_col": 37,
                "message": "first written here",
            }
        ],
    }
    assert doc["diagnostics"][1]["help"] is None
    assert doc["diagnostics"][1]["notes"] == ["n"]
    text = render_json([_par_write()])
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"


def test_github_annotation_and_escaping() -> None:
    d = diag(
        "WG201",
        "100% wrong\r\ntype",
        Span("a,b:c.walk", 3, 4, 3, 9),
        help="use `f32`, not `i64`",
    )
    (line,) = render_github([d]).splitlines()
    assert line == (
        "::error file=a%2Cb%3Ac.walk,line=3,col=4,endLine=3,endColumn=9,title=WG201"
        "::100%25 wrong%0D%0Atype%0A= help: use `f32`, not `i64`"
    )
    warn = render_github([diag("WG901", "unused", Span("f.walk", 1, 1, 1, 2))])
    assert warn.startswith("::warning file=f.walk,")


def test_sarif_structure() -> None:
    warn = diag("WG901", "unused node `A`", Span("other.walk", 1, 6, 1, 7))
    doc = json.loads(render_sarif([_par_write(), warn, _par_write()]))
    assert doc["version"] == "2.1.0"
    (run,) = doc["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "wgc"
    assert [r["id"] for r in driver["rules"]] == ["WG401", "WG901"]
    assert driver["rules"][0]["shortDescription"]["text"] == "`par` branches write the same channel"
    assert all("helpUri" not in r for r in driver["rules"])
    result = run["results"][0]
    assert (result["ruleId"], result["level"], result["ruleIndex"]) == ("WG401", "error", 0)
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 12, "startColumn": 7, "endLine": 12, "endColumn": 36}
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == FILE
    (related,) = result["relatedLocations"]
    assert related["message"]["text"] == "first written here"
    assert related["physicalLocation"]["region"]["startLine"] == 11
    assert [r["level"] for r in run["results"]] == ["error", "error", "warning"]


def test_a_very_long_line_is_quoted_as_a_window_around_its_mark():
    # issue 34: thousands of warnings on one 60,000-column line printed gigabytes
    line = "  A(" + ", ".join(f"x{i}" for i in range(5000)) + ") -> y"
    col = line.index("x4000") + 1
    sources = SourceMap()
    sources.add("long.walk", "model m\n" + line + "\n")
    d = diag("WG905", "unused", Span("long.walk", 2, col, 2, col + 5), label="here")
    text = render_text([d], sources)
    quoted, marked = text.splitlines()[3], text.splitlines()[4]
    assert len(quoted) < 320 and quoted.startswith("2 | ...") and quoted.endswith("...")
    assert quoted[marked.index("^") :].startswith("x4000")
    assert "^^^^^ here" in marked
