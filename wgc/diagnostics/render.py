"""Renderers for a list of diagnostics: rustc-style text, JSON, GitHub annotations and SARIF.

Text is for people and may change; JSON (``version: 1``) is the stable contract for CI, and the
GitHub and SARIF forms feed CI systems that already know how to display findings. Every renderer
sorts by `Diagnostic.sort_key` itself so output never depends on the order passes ran in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from wgc.diagnostics.codes import REGISTRY, Severity
from wgc.diagnostics.diagnostic import Diagnostic, Label, SourceMap, Span

__all__ = ["render_github", "render_json", "render_sarif", "render_summary", "render_text"]

JSON_VERSION = 1
_TAB = "    "
_LONG_LINE = 240  # display columns of a quoted line shown in full; a longer one is clipped
_CONTEXT = 60  # columns shown before the first mark on a clipped line


def _sorted(diags: Iterable[Diagnostic]) -> list[Diagnostic]:
    return sorted(diags, key=Diagnostic.sort_key)


def _counts(diags: list[Diagnostic]) -> tuple[int, int]:
    errors = sum(d.severity is Severity.ERROR for d in diags)
    warnings = sum(d.severity is Severity.WARNING for d in diags)
    return errors, warnings


def _has_location(span: Span) -> bool:
    return span.line > 0


# -- text --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Style:
    """ANSI styling; every method is the identity when color is off."""

    color: bool

    def _wrap(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color and text else text

    def severity(self, sev: Severity, text: str) -> str:
        code = {Severity.ERROR: "1;31", Severity.WARNING: "1;33", Severity.NOTE: "1;32"}[sev]
        return self._wrap(text, code)

    def bold(self, text: str) -> str:
        return self._wrap(text, "1")

    def gutter(self, text: str) -> str:
        return self._wrap(text, "1;34")


@dataclass(frozen=True, slots=True)
class _Mark:
    """One underline to draw under a quoted line; the primary one carries the severity."""

    span: Span
    message: str
    severity: Severity | None


def _display_col(line: str, col: int) -> int:
    """0-based display column of 1-based ``col`` once tabs are expanded."""
    return len(line[: max(col - 1, 0)].replace("\t", _TAB))


def _underline(line: str, span: Span) -> tuple[int, int]:
    """(display start, width) of the underline for ``span`` on its first line."""
    start = _display_col(line, span.col)
    if span.end_line > span.line:
        width = len(line.replace("\t", _TAB)) - start
    else:
        width = _display_col(line, span.end_col) - start
        # a span may end past the text (e.g. pointing at end of file): keep its stated width
        width = max(width, span.end_col - span.col)
    return start, max(width, 1)


def _clip(line: str, marks: list[_Mark], raw: str) -> tuple[str, int]:
    """(what to show of display line ``line``, the display column it starts at, less the
    ``...`` before it). A line past `_LONG_LINE` columns shows a window from a little before its
    first mark: a 60,000-column line quoted by each of thousands of diagnostics would otherwise
    print gigabytes."""
    if len(line) <= _LONG_LINE:
        return line, 0
    first = min((_underline(raw, m.span)[0] for m in marks), default=0)
    begin = max(0, first - _CONTEXT)
    end = begin + _LONG_LINE
    before = "..." if begin else ""
    after = "..." if end < len(line) else ""
    return before + line[begin:end] + after, begin - len(before)


class _TextRenderer:
    def __init__(self, sources: SourceMap, style: _Style) -> None:
        self.sources = sources
        self.style = style

    def render(self, d: Diagnostic) -> list[str]:
        marks = [_Mark(d.span, d.primary_label, d.severity)]
        marks += [_Mark(lb.span, lb.message, None) for lb in d.labels]
        quotable = [m for m in marks if self._quotable(m.span)]
        width = max((len(str(m.span.line)) for m in quotable), default=len(str(d.span.line)))
        pad = " " * width
        out = [self._header(d)]
        if _has_location(d.span):
            out.append(f"{pad}{self.style.gutter('-->')} {d.span}")
        files = sorted({m.span.file for m in quotable})
        if self._quotable(d.span):
            files.remove(d.span.file)
            out.append(self._bar(width))
            out += self._quote_file(d.span.file, quotable, width)
        for file in files:
            if len(out) > 2:
                out.append(self._bar(width))
            first = min(m.span for m in quotable if m.span.file == file)
            out.append(f"{pad}{self.style.gutter(':::')} {first}")
            out += self._quote_file(file, quotable, width)
        trailing = [f"{lb.message} ({lb.span})" for lb in d.labels if not self._quotable(lb.span)]
        extras = [("help", d.help)] if d.help else []
        extras += [("note", n) for n in (*trailing, *d.notes)]
        if quotable and extras:
            out.append(self._bar(width))
        for kind, text in extras:
            out.append(f"{pad} {self.style.gutter('=')} {self.style.bold(kind + ':')} {text}")
        return out

    def _quotable(self, span: Span) -> bool:
        return _has_location(span) and self.sources.line(span.file, span.line) is not None

    def _header(self, d: Diagnostic) -> str:
        head = self.style.severity(d.severity, f"{d.severity.value}[{d.code}]")
        return f"{head}{self.style.bold(': ' + d.message)}"

    def _bar(self, width: int) -> str:
        return f"{' ' * width} {self.style.gutter('|')}"

    def _quote_file(self, file: str, marks: list[_Mark], width: int) -> list[str]:
        here = sorted(
            (m for m in marks if m.span.file == file),
            key=lambda m: (m.span.line, m.severity is None, m.span.col),
        )
        lines = sorted({m.span.line for m in here})
        out: list[str] = []
        previous = None
        for number in lines:
            if previous is not None and number > previous + 1:
                out.append(self.style.gutter("..."))
            text = self.sources.line(file, number) or ""
            on_line = [m for m in here if m.span.line == number]
            full = text.replace(chr(9), _TAB)
            shown, shift = _clip(full, on_line, text)
            limit = len(shown) if shown is not full else None
            gutter = self.style.gutter(f"{number:>{width}} |")
            out.append(f"{gutter} {shown}".rstrip())
            for m in on_line:
                out.append(self._mark_line(text, m, width, shift, limit))
            previous = number
        return out

    def _mark_line(
        self, text: str, mark: _Mark, width: int, shift: int = 0, limit: int | None = None
    ) -> str:
        start, length = _underline(text, mark.span)
        if limit is not None:  # a clipped line: the part of the underline inside its window
            end = min(start + length - shift, limit)
            start = min(max(start - shift, 0), max(limit - 1, 0))
            length = max(end - start, 1)
        glyph = "-" if mark.severity is None else "^"
        underline = glyph * length + (f" {mark.message}" if mark.message else "")
        if mark.severity is None:
            underline = self.style.gutter(underline)
        else:
            underline = self.style.severity(mark.severity, underline)
        return f"{self._bar(width)} {' ' * start}{underline}"


def render_text(diags: Iterable[Diagnostic], sources: SourceMap, color: bool = False) -> str:
    """Diagnostics the way rustc prints them, one blank line between them."""
    renderer = _TextRenderer(sources, _Style(color))
    blocks = ["\n".join(renderer.render(d)) for d in _sorted(diags)]
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def render_summary(n_errors: int, n_warnings: int, what: str, color: bool = False) -> str:
    """The closing line, e.g. ``error: could not check `x.walk` due to 2 previous errors``.

    Empty when there is nothing to report.
    """
    style = _Style(color)
    if n_errors:
        line = f"could not check `{what}` due to {_plural(n_errors, 'previous error')}"
        if n_warnings:
            line += f"; {_plural(n_warnings, 'warning')} emitted"
        return f"{style.severity(Severity.ERROR, 'error')}{style.bold(': ' + line)}"
    if n_warnings:
        line = f"`{what}` generated {_plural(n_warnings, 'warning')}"
        return f"{style.severity(Severity.WARNING, 'warning')}{style.bold(': ' + line)}"
    return ""


# -- json --------------------------------------------------------------------------------------


def _span_fields(span: Span) -> dict[str, object]:
    return {
        "file": span.file,
        "line": span.line,
        "col": span.col,
        "end_line": span.end_line,
        "end_col": span.end_col,
    }


def _label_json(label: Label) -> dict[str, object]:
    return {**_span_fields(label.span), "message": label.message}


def _diag_json(d: Diagnostic) -> dict[str, object]:
    return {
        "code": d.code,
        "severity": d.severity.value,
        "message": d.message,
        **_span_fields(d.span),
        "help": d.help,
        "notes": list(d.notes),
        "labels": [_label_json(lb) for lb in d.labels],
    }


def render_json(diags: Iterable[Diagnostic]) -> str:
    """The stable machine contract (``version`` 1); keys sorted, two-space indent."""
    ordered = _sorted(diags)
    errors, warnings = _counts(ordered)
    doc = {
        "version": JSON_VERSION,
        "diagnostics": [_diag_json(d) for d in ordered],
        "errors": errors,
        "warnings": warnings,
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# -- github ------------------------------------------------------------------------------------

_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "notice"}


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_property(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _gh_body(d: Diagnostic) -> str:
    lines = [d.message]
    if d.primary_label:
        lines.append(f"= note: {d.primary_label}")
    lines += [f"= note: {lb.message} ({lb.span})" for lb in d.labels]
    if d.help:
        lines.append(f"= help: {d.help}")
    lines += [f"= note: {n}" for n in d.notes]
    return "\n".join(lines)


def _gh_line(d: Diagnostic) -> str:
    props: list[tuple[str, object]] = []
    if _has_location(d.span):
        s = d.span
        props += [("file", s.file), ("line", s.line), ("col", s.col)]
        props += [("endLine", s.end_line), ("endColumn", s.end_col)]
    props.append(("title", d.code))
    rendered = ",".join(f"{k}={_gh_property(str(v))}" for k, v in props)
    return f"::{_GITHUB_LEVEL[d.severity]} {rendered}::{_gh_data(_gh_body(d))}"


def render_github(diags: Iterable[Diagnostic]) -> str:
    """GitHub Actions workflow commands, one annotation per diagnostic."""
    lines = [_gh_line(d) for d in _sorted(diags)]
    return "".join(line + "\n" for line in lines)


# -- sarif -------------------------------------------------------------------------------------

_SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.NOTE: "note"}


def _sarif_location(span: Span) -> dict[str, object]:
    region = {
        "startLine": span.line,
        "startColumn": span.col,
        "endLine": span.end_line,
        "endColumn": span.end_col,
    }
    return {"physicalLocation": {"artifactLocation": {"uri": span.file}, "region": region}}


def _sarif_rule(code: str) -> dict[str, object]:
    entry = REGISTRY.get(code)
    rule: dict[str, object] = {
        "id": code,
        "shortDescription": {"text": entry.title if entry else code},
    }
    if entry:
        rule["name"] = entry.stage
        rule["defaultConfiguration"] = {"level": _SARIF_LEVEL[entry.severity]}
    return rule


def _sarif_result(d: Diagnostic, rule_index: int) -> dict[str, object]:
    result: dict[str, object] = {
        "ruleId": d.code,
        "ruleIndex": rule_index,
        "level": _SARIF_LEVEL[d.severity],
        "message": {"text": d.message},
    }
    if _has_location(d.span):
        result["locations"] = [_sarif_location(d.span)]
    related = []
    for i, lb in enumerate(d.labels):
        if _has_location(lb.span):
            related.append({"id": i, **_sarif_location(lb.span), "message": {"text": lb.message}})
    if related:
        result["relatedLocations"] = related
    props: dict[str, str | list[str]] = {"help": d.help} if d.help else {}
    if d.notes:
        props["notes"] = list(d.notes)
    if props:
        result["properties"] = props
    return result


def render_sarif(diags: Iterable[Diagnostic], tool_version: str = "0.1.0") -> str:
    """A SARIF 2.1.0 log with one run; rules are the codes that appear, in code order."""
    ordered = _sorted(diags)
    codes = sorted({d.code for d in ordered})
    index = {code: i for i, code in enumerate(codes)}
    driver = {
        "name": "wgc",
        "version": tool_version,
        "rules": [_sarif_rule(c) for c in codes],
    }
    run = {
        "tool": {"driver": driver},
        "results": [_sarif_result(d, index[d.code]) for d in ordered],
    }
    doc = {"$schema": _SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
