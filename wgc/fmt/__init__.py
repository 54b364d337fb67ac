"""`wgc fmt`: the one canonical layout of `.walk` source.

The formatter prints the lark parse tree (not the IR, which forgets comments and spelling) and
puts back every comment. Formatting is idempotent and never changes the IR of a file.

The canonical layout:

* 2-space indentation; no trailing whitespace; the file ends with exactly one newline.
* Top-level declarations are separated by one blank line, except consecutive one-line
  declarations of the same kind (`param`s, `type`s, `option`s, one-line `node`s, ...), which
  stay grouped (a blank line the source put between two of them is kept, so groups can be split).
* Inside blocks, statements are one per line; a blank line in the source is kept (at most one),
  never right after `{` or right before `}`.
* A block the source wrote on one line with at most one simple item stays on one line when it
  fits: `node N: like M { label l }`, `walk w() { A() }`, `if c { a() } else { b() }`,
  `repeat n { w() }`, `for s in request.inputs { w() }`. Everything else is one item per line.
* `node N: kind {`: ports are written `in  name: type` / `out name: type`, with the types of one
  node aligned (`name:` padded to the longest port name of the node).
* `stream S: a.p -> b.q`, each option (`chunk`, `final`, `after_done`) on its own line, indented.
* Calls: `N(a, b = c) -> x, y = p`: `, ` between bindings, spaces around `=` and `->`; a binding
  `a = a` is written `a`. Flow walk calls likewise: `w(a, b = seg, c = option.x)`. An argument
  list that would pass 100 columns wraps after a comma, continuation rows aligned after `(`
  (also walk parameter lists).
* `par {` has one branch per line, the `->` of its one-line call branches aligned; a branch of
  several statements is a `{ ... }` block, a one-statement `{ s }` branch is written `s`.
* `loop NAME max EXPR until X eager nospeculate {` (modifiers in this order, once each) and
  `} yield last a, b yield all c` (the `yield` clauses of one kind merged).
* `match v.modality {` has one arm per line, `pattern => body`, with the `=>` of one match
  aligned; an arm's body is a walk call or `fail` on the arm's line, or a `{ ... }` block
  (`p => { s }` with one simple `s` is `p => s`; `p => if ...` is `p => { if ... }`);
  `else { if ... }` is `else if ...`.
* Expressions and conditions: single spaces around binary operators, only the parentheses the
  grammar needs (plus those around an `and` inside an `or`); `-(-x)` for a double negation;
  numbers as written; strings re-quoted (`"\\q"` is `"q"`).
* Comments: every comment is kept, text unchanged. An own-line comment stays before the code
  that follows it, at that code's indentation; a trailing comment stays at the end of its line,
  at its column when that leaves two spaces or more (hand-aligned columns survive), else after
  two spaces. A comment inside a construct that is printed on one line goes on its own line
  before it. See `wgc.fmt.layout` for the exact rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Diagnostic
from wgc.fmt.layout import assemble
from wgc.fmt.printer import Printer
from wgc.parse.parser import Parser


@dataclass(frozen=True, slots=True)
class Formatted:
    """The canonical text of a source, or the syntax diagnostics that prevent formatting."""

    text: str | None
    diagnostics: tuple[Diagnostic, ...]

    def changed(self, source: str) -> bool:
        return self.text is not None and self.text != source


def format_source(source: str, file: str = "<input>", parser: Parser | None = None) -> Formatted:
    """Format ``source``; ``text`` is None when it does not parse (see ``diagnostics``)."""
    parsed = (parser or Parser()).parse(source, file)
    if parsed.tree is None:
        return Formatted(None, parsed.diagnostics)
    lines = Printer(source).file(parsed.tree)
    return Formatted(assemble(lines, parsed.comments, source), ())


__all__ = ["Formatted", "format_source"]
