"""How deeply a parse tree nests, measured without recursion (WG012).

Everything after the parser (the IR builder, the formatter, the passes, `wgc show`'s layouts,
lowering and codegen) walks statements and expressions recursively, as a person would write
them. This module bounds what they can meet, on the lark tree, before any of them runs: at most
`MAX_BLOCKS` statements nested in one another (`loop`, `par`, `for`, `if` (each `else if` of a
chain too), `match`, `repeat`) and at most `MAX_EXPR` levels of operators in one expression or
condition (`+ - * /`, unary `-`, `and`, `or`, `not`; parentheses alone add none). Both stay far
below Python's default recursion limit (1,000 frames) in every later stage, at a few frames per
level, and far above anything a person writes.

Code owned: WG012.
"""

from __future__ import annotations

from lark import Tree

from wgc.diagnostics.diagnostic import Diagnostic, Span, diag

MAX_BLOCKS = 32
MAX_EXPR = 100

_BLOCKS = frozenset({"loop", "par", "for_stmt", "if_stmt", "match_stmt", "repeat_stmt"})
_OPERATORS = frozenset({"add", "sub", "mul", "div", "neg", "or_", "and_", "not_"})
_WHAT = {
    "loop": "`loop`",
    "par": "`par`",
    "for_stmt": "`for`",
    "if_stmt": "`if`",
    "match_stmt": "`match`",
    "repeat_stmt": "`repeat`",
}


def too_deep(tree: Tree, file: str) -> Diagnostic | None:
    """WG012 for the first construct of ``tree`` nested past a limit, else None."""
    stack: list[tuple[Tree, int, int]] = [(tree, 0, 0)]
    while stack:
        node, blocks, ops = stack.pop()
        if node.data in _BLOCKS:
            blocks += 1
            if blocks > MAX_BLOCKS:
                return _error(node, file, f"statements nested more than {MAX_BLOCKS} deep", True)
        elif node.data in _OPERATORS:
            ops += 1
            if ops > MAX_EXPR:
                return _error(node, file, f"expression nested more than {MAX_EXPR} deep", False)
        else:
            ops = 0  # a new expression starts below any other node (a dim, an argument)
        for child in reversed(node.children):
            if isinstance(child, Tree):
                stack.append((child, blocks, ops))
    return None


def _error(node: Tree, file: str, message: str, statement: bool) -> Diagnostic:
    meta = node.meta
    line = getattr(meta, "line", 1)
    col = getattr(meta, "column", 1)
    # the construct's first word (or its first operand): its whole span can be the whole file
    span = Span(file, line, col, line, col + 1)
    if statement:
        what = _WHAT[str(node.data)]
        return diag(
            "WG012",
            message,
            span,
            label=f"this {what} is nested {MAX_BLOCKS + 1} deep",
            help="move the inner part into a walk or subflow of its own, or flatten the nesting",
        )
    return diag(
        "WG012",
        message,
        span,
        label=f"{MAX_EXPR + 1} levels deep from here",
        help="split the expression: give its parts names with `param` and combine those",
    )
