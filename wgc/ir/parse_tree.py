"""Typed access to the parse tree the IR builder reads (`wgc.parse` makes it with lark).

lark's `Tree` is generic in its leaves: ours are `Token`s, so a tree is `ParseTree`
(`Tree[Token]`) and a child is a tree or a token. The parser keeps absent optional items as None
(`maybe_placeholders`), which lark's types do not say: `Child` does. The accessors below name
what the grammar puts at a position (a tree, a token, either, or maybe nothing) and check it, so
the builders read typed values instead of bare `children[i]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from lark import Token, Tree

ParseTree: TypeAlias = Tree[Token]
Branch: TypeAlias = "ParseTree | Token"  # a present child
Child: TypeAlias = "ParseTree | Token | None"  # a child, None for an absent optional item


def kids(t: ParseTree, start: int = 0) -> Sequence[Child]:
    """The children of ``t`` from ``start`` on, an absent optional item as None."""
    return t.children[start:]


def child(t: ParseTree, i: int) -> Child:
    """Child ``i``, None when the optional item is absent."""
    return t.children[i]


def text(t: ParseTree, i: int) -> str:
    """The source text of child ``i`` (a token, as the grammar puts one there)."""
    return str(t.children[i])


def branch(t: ParseTree, i: int) -> Branch:
    """Child ``i``, present: a tree or a token."""
    c = child(t, i)
    assert c is not None, f"`{t.data}` has no child {i}"
    return c


def sub(t: ParseTree, i: int) -> ParseTree:
    """Child ``i``, a tree."""
    return as_tree(t.children[i])


def tok(t: ParseTree, i: int) -> Token:
    """Child ``i``, a token."""
    return as_token(t.children[i])


def opt_sub(t: ParseTree, i: int) -> ParseTree | None:
    """Child ``i``, a tree, or None when the optional item is absent."""
    c = child(t, i)
    return None if c is None else as_tree(c)


def opt_tok(t: ParseTree, i: int) -> Token | None:
    """Child ``i``, a token, or None when the optional item is absent."""
    c = child(t, i)
    return None if c is None else as_token(c)


def subs(t: ParseTree, start: int = 0) -> list[ParseTree]:
    """The trees among the children from ``start`` on (absent optional items skipped)."""
    return [as_tree(c) for c in kids(t, start) if c is not None]


def toks(t: ParseTree, start: int = 0) -> list[Token]:
    """The tokens among the children from ``start`` on (absent optional items skipped)."""
    return [as_token(c) for c in kids(t, start) if c is not None]


def as_tree(c: Child) -> ParseTree:
    """``c``, which the grammar makes a tree."""
    assert isinstance(c, Tree), f"expected a tree, found {c!r}"
    return c


def as_token(c: Child) -> Token:
    """``c``, which the grammar makes a token."""
    assert isinstance(c, Token), f"expected a token, found {c!r}"
    return c
