"""Placement check for writable KV copies (WG828).

A ``like X { label L writable }`` node writes its label of X's pool (a draft model's sequence
beside the trunk's): the runtime gives it X's pool on the rank group they share, so the writes
land where X's state lives. That holds only when the copy and X run on one and the same rank
group, and X on no other (else X's state moves between groups, or the copy would write a pool
of its own that nothing reads back): anything else is WG828.
"""

from __future__ import annotations

from wgc.diagnostics.diagnostic import Diagnostic, Label, diag
from wgc.ir.model import Model
from wgc.placement.model import Group, Placement

NAME = "placement-writable"
CODES = ("WG828",)


def _groups(placement: Placement, node: str) -> list[Group]:
    return [g for g in placement.groups if any(n.name == node for n in g.nodes)]


def _ranks(placement: Placement, node: str) -> set[tuple[int, ...]]:
    found = {tuple(g.ranks) for g in _groups(placement, node)}
    return found or {tuple(placement.default_ranks)}


def run(model: Model, placement: Placement) -> list[Diagnostic]:
    out = []
    for n in model.nodes:
        owner = model.node(n.like) if n.writable and n.like is not None else None
        if owner is None or model.node(n.name) is not n:
            continue
        mine, theirs = _ranks(placement, n.name), _ranks(placement, owner.name)
        if mine == theirs and len(theirs) == 1:
            continue
        where = _groups(placement, n.name) or _groups(placement, owner.name)
        span = where[0].span if where else placement.span
        shown = ", ".join(str(list(r)) for r in sorted(theirs))
        out.append(
            diag(
                "WG828",
                f"`{n.name}` writes label `{n.label}` of `{owner.name}`'s KV cache, but does not "
                f"run on `{owner.name}`'s only rank group",
                span,
                label=f"`{n.name}` on ranks {', '.join(str(list(r)) for r in sorted(mine))}",
                labels=[Label(n.label_span or n.span, "declared writable here")],
                help=f"place `{n.name}` in the group of `{owner.name}` (ranks {shown}), and "
                f"`{owner.name}` on that group alone; or drop `writable` and give `{n.name}` "
                "a cache of its own",
            )
        )
    return out
