"""From printed lines and the source's comments to the final text.

The printer (`wgc.fmt.printer`) produces `Line`s in source order, each knowing which source
lines it came from. This module places every comment and decides the blank lines:

* A comment on a source line that a printed line covers, written after that line's last code
  (`L == end`), stays there as a trailing comment. Its column is kept when that leaves at least
  two spaces and the code was and is one line (so hand-aligned comment columns survive),
  otherwise it gets two spaces.
* Any other comment inside a printed line's source range (own-line comments in the middle of a
  construct, trailing comments of a line that was joined to the next) goes on its own line just
  before that printed line.
* A comment between printed lines goes on its own line before the next printed line, indented
  like it (like the block's contents when the next line closes a block); comments after the last
  line end the file.
* Blank lines: at most one wherever the source had any; none right after a line that opens a
  block or right before one that closes it; exactly one before a `Line` whose `sep` is `"one"`
  (put before the comments that lead it); none where `sep` is `"zero"`.

No comment is ever dropped: each lands on exactly one line, its text unchanged.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from wgc.parse.parser import Comment

INDENT = "  "
LIMIT = 100  # columns; long argument lists wrap after a comma


@dataclass(slots=True)
class Line:
    depth: int
    text: str
    start: int  # first source line this printed line came from
    end: int  # last source line
    opens: bool = False  # ends with `{`
    closes: bool = False  # starts with `}`
    sep: str = "keep"  # blank lines before it: "keep" (source, max 1), "one", "zero"
    leading: list[Comment] = field(default_factory=list)
    trailing: Comment | None = None

    @property
    def comment_depth(self) -> int:
        # own-line comments before a `}` belong to the block it closes
        return self.depth + 1 if self.closes else self.depth


def assemble(lines: Sequence[Line], comments: Sequence[Comment], source: str) -> str:
    """The formatted text: ``lines`` with ``comments`` placed and blank lines decided."""
    eof = Line(0, "", 1 << 30, 1 << 30)
    every = [*lines, eof]
    _place_comments(every, comments)
    blank = _blank_lines(source)
    out: list[str] = []
    prev: Line | None = None
    prev_end = 0
    for line in every:
        items: list[tuple[int, int, str]] = [
            (c.line, c.line, INDENT * line.comment_depth + c.text) for c in line.leading
        ]
        if line is not eof:
            items.append((line.start, line.end, _code(line)))
        for i, (start, end, text) in enumerate(items):
            is_code = line is not eof and i == len(items) - 1
            gap = _gap(blank, prev_end, start, prev, line, first=i == 0, is_code=is_code)
            if out:
                out.extend([""] * gap)
            out.append(text)
            prev_end = end
        if line is not eof:
            prev = line
    return "\n".join(out) + "\n" if out else ""


def _gap(blank, prev_end, start, prev, line, *, first: bool, is_code: bool) -> int:
    if prev is None and first:
        return 0
    n = 1 if any(blank[prev_end + 1 : start]) else 0
    if first and prev is not None and prev.opens:
        return 0
    if is_code and line.closes:
        return 0
    if first and line.sep == "one":
        return 1
    if line.sep == "zero":
        return 0
    return n


def _blank_lines(source: str) -> list[bool]:
    """``blank[n]``: source line ``n`` (1-based) holds nothing but whitespace."""
    return [False, *(not s.strip() for s in source.split("\n"))]


def _code(line: Line) -> str:
    # a wrapped line's continuation rows carry their alignment relative to the line's indent
    text = "\n".join(INDENT * line.depth + row for row in line.text.split("\n"))
    c = line.trailing
    if c is None:
        return text
    last = len(text) - (text.rfind("\n") + 1)
    # a column is only worth keeping when the line was, and still is, one line
    keep = line.start == line.end and "\n" not in line.text
    return text + " " * (max(2, c.col - 1 - last) if keep else 2) + c.text


def _place_comments(lines: list[Line], comments: Sequence[Comment]) -> None:
    starts = [ln.start for ln in lines]
    for c in sorted(comments, key=lambda c: (c.line, c.col)):
        i = bisect.bisect_right(starts, c.line) - 1
        if i >= 0 and lines[i].start <= c.line <= lines[i].end:
            host = lines[i]
            if not c.own_line and c.line == host.end and host.trailing is None:
                host.trailing = c
            else:
                host.leading.append(c)
        else:
            lines[i + 1].leading.append(c)
