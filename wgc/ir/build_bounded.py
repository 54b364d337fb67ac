"""Building a bounded dim, `<=K` (0 to K elements per value: a variable-length emission, such as
speculative decoding's accepted tokens, captured at its bound K). Owns WG863: K must be a positive
integer from integers and `param`s."""

from __future__ import annotations

from wgc.ir import expr as E
from wgc.ir.build_core import BuilderCore
from wgc.ir.types import Dim


def bounded(b: BuilderCore, ex: E.Expr) -> Dim | None:
    """``<=K``: K a positive integer from integers and params (WG863 otherwise)."""
    if b.uses_failed_param(ex):
        return None
    v = b.static_value(ex) if E.is_static(ex, b.params) else None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        shown = f"`{v!r}`" if v is not None else f"`{E.render(ex)}`, not static"
        b.error(
            "WG863",
            f"the bound of a bounded dim must be a positive integer, found {shown}",
            ex.span,
            label="not a positive integer bound",
            help="write `<=K` with K an integer or an expression of `param`s, at least 1: "
            "a value holds 0 to K elements and is captured padded to K",
        )
        return None
    return Dim.bounded(E.render(ex), v)
