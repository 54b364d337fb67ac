"""The one `Diagnostic` type every stage reports, and the `Span` every IR node carries.

A pass never raises for a user error: it returns diagnostics. Rendering (text, JSON, GitHub
annotations, SARIF) lives in `wgc.diagnostics.render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wgc.diagnostics.codes import Severity, lookup


@dataclass(frozen=True, slots=True, order=True)
class Span:
    """A 1-based, end-inclusive-start / end-exclusive-column region of one source file."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    @staticmethod
    def point(file: str, line: int, col: int) -> Span:
        return Span(file, line, col, line, col + 1)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NO_SPAN = Span("<unknown>", 0, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Label:
    """A secondary span with a short message, e.g. ``first written here``."""

    span: Span
    message: str


@dataclass(frozen=True, slots=True)
class Diagnostic:
    code: str
    message: str
    span: Span
    labels: tuple[Label, ...] = ()
    help: str | None = None
    notes: tuple[str, ...] = ()
    primary_label: str = ""
    severity: Severity = field(init=False)  # the registry's, for ``code``

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity", lookup(self.code).severity)

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def sort_key(self) -> tuple:
        return (self.span.file, self.span.line, self.span.col, self.code, self.message)


def diag(
    code: str,
    message: str,
    span: Span,
    *,
    label: str = "",
    help: str | None = None,
    labels: tuple[Label, ...] | list[Label] = (),
    notes: tuple[str, ...] | list[str] = (),
) -> Diagnostic:
    """Shorthand used by passes: ``diag("WG201", "...", span, label=..., help=...)``."""
    return Diagnostic(
        code=code,
        message=message,
        span=span,
        labels=tuple(labels),
        help=help,
        notes=tuple(notes),
        primary_label=label,
    )


def source_lines(text: str) -> list[str]:
    """The lines of ``text`` as the lexer counts them (line ``n`` is ``[n - 1]``), without their
    line ends.

    Lines end at `\n` only: `str.splitlines` also breaks at `\f`, `\v`, `\x1c`-`\x1e`, `\x85`,
    `\u2028` and `\u2029` (legal in comments, strings and whitespace), and would number every
    later line wrongly. A `\r` before the `\n` is not part of the line; the final newline does
    not start a line (so an empty text has no lines)."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if lines[-1] == "":
        lines.pop()
    return lines


class SourceMap:
    """File name -> text, so renderers can quote source lines. Owned by one compilation."""

    def __init__(self) -> None:
        self._texts: dict[str, list[str]] = {}

    def add(self, file: str, text: str) -> None:
        self._texts[file] = source_lines(text)

    def line(self, file: str, line: int) -> str | None:
        lines = self._texts.get(file)
        if lines is None or not (1 <= line <= len(lines)):
            return None
        return lines[line - 1]
