"""Spans and diagnostics in the protocol's terms.

A wgc `Span` is 1-based with an exclusive end column; an LSP `Range` is 0-based with an exclusive
end. A diagnostic keeps everything `wgc check` prints: its code (linked to `wgc explain`'s text
through ``code_description`` when the code has one), the message, the primary label, the help
line and the notes in the message body, and every secondary label as a related location (in the
file it points at, which may be a placement or another model).
"""

from __future__ import annotations

import re
from pathlib import Path

from lsprotocol import types as lsp
from pygls.uris import from_fs_path

from wgc.diagnostics.codes import Severity
from wgc.diagnostics.diagnostic import Diagnostic, Span

_SEVERITY = {
    Severity.ERROR: lsp.DiagnosticSeverity.Error,
    Severity.WARNING: lsp.DiagnosticSeverity.Warning,
    Severity.NOTE: lsp.DiagnosticSeverity.Information,
}
_SUGGESTION = re.compile(r"did you mean `([^`]+)`\?")
_QUOTED = re.compile(r"`([^`]+)`")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_:.-]*")


def to_range(span: Span) -> lsp.Range:
    line, col = max(span.line - 1, 0), max(span.col - 1, 0)
    end_line = max(span.end_line - 1, line)
    end_col = max(span.end_col - 1, 0)
    if end_line == line and end_col < col:
        end_col = col
    return lsp.Range(lsp.Position(line, col), lsp.Position(end_line, end_col))


def uri_of(file: str) -> str:
    return from_fs_path(str(Path(file).resolve())) or file


def to_lsp(d: Diagnostic, lines: list[str]) -> lsp.Diagnostic:
    """``d`` as the protocol's diagnostic; ``lines`` (of ``d``'s file) find a suggested fix."""
    body = [d.message]
    if d.primary_label:
        body.append(f"  {d.primary_label}")
    if d.help:
        body.append(f"help: {d.help}")
    body += [f"note: {n}" for n in d.notes]
    related = [
        lsp.DiagnosticRelatedInformation(
            lsp.Location(uri_of(lb.span.file), to_range(lb.span)), lb.message
        )
        for lb in d.labels
        if lb.span.line > 0
    ]
    fix = suggested_fix(d, lines)
    return lsp.Diagnostic(
        range=to_range(d.span),
        message="\n".join(body),
        severity=_SEVERITY[d.severity],
        code=d.code,
        source="wgc",
        related_information=related or None,
        data={"fix": fix} if fix is not None else None,
    )


def suggested_fix(d: Diagnostic, lines: list[str]) -> dict | None:
    """The edit a "did you mean `x`?" help line proposes: the misspelt name (quoted in the
    message, written inside the span) replaced by ``x``; None when the help proposes none or the
    name cannot be found exactly once on the span's line."""
    m = _SUGGESTION.search(d.help or "")
    if m is None or d.span.line < 1 or d.span.line > len(lines):
        return None
    new = m.group(1)
    text = lines[d.span.line - 1]
    lo = max(d.span.col - 1, 0)
    hi = len(text) if d.span.end_line != d.span.line else max(d.span.end_col - 1, lo)
    for word in _QUOTED.findall(d.message):
        hits = [x for x in _IDENT.finditer(text, lo, hi) if x.group() == word]
        if word != new and len(hits) == 1:
            hit = hits[0]
            line = d.span.line - 1
            return {"line": line, "start": hit.start(), "end": hit.end(), "new": new}
    return None
