"""A group's sequence parallelism and residency, in both placement formats.

`sp` (M*: `sp_size`, whose top-level `sp_size` is the groups' default) splits each call's
sequence over the group's ranks, like `tp` splits its weights: the group runs every call of its
nodes together, so `tp` × `sp` must divide the group's size (WG822). Without a `tp`, the group's
tensor-parallel size is what `sp` leaves: size / `sp`. `residency` (`resident`, `on_demand`,
`reload`) says when a node's weights are loaded; the runtime keeps every node resident, which
gives the same results with more memory held, so the other two are a warning (WG823).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wgc.diagnostics.diagnostic import Label
from wgc.placement.yamlnodes import span

if TYPE_CHECKING:
    from wgc.placement.yaml_reader import YamlReader

RESIDENCY = ("resident", "on_demand", "reload")


def sp_size(r: YamlReader, entry, key: str, default: int) -> int:
    if entry is None:
        return default
    node = entry[1]
    sp = r.int_(node, f"`{key}`")
    if sp is None:
        return default
    if sp < 1:
        r.error(
            "WG822",
            f"`{key}` is {sp}: a sequence-parallel size is at least 1",
            span(r.file, node),
            label="not a size",
            help=f"use `{key}: 1` for no sequence parallelism",
        )
        return default
    return sp


def fits(r: YamlReader, sp: int, tp: int, ranks: tuple[int, ...], sp_entry, ranks_entry) -> int:
    """``sp``, checked against the group: `tp` × `sp` divides its size (else 1, reported)."""
    if sp == 1 or not ranks:
        return sp
    if len(ranks) % (tp * sp) == 0:
        return sp
    where = span(r.file, sp_entry[1]) if sp_entry is not None else r.value_span(ranks_entry)
    r.error(
        "WG822",
        f"sequence-parallel size {sp} × tensor-parallel size {tp} does not divide the group's "
        f"{len(ranks)} ranks",
        where,
        label=f"{tp * sp} ranks per call",
        labels=[Label(r.value_span(ranks_entry), f"{len(ranks)} ranks")] if ranks_entry else [],
        help="every call of the group runs on tp × sp ranks: list a multiple of that many ranks, "
        "or lower `sp`/`tp`",
    )
    return 1


def residency(r: YamlReader, entry, group_span) -> str:
    got = r.choice(entry, "a residency", RESIDENCY)
    if got != "resident" and entry is not None:
        r.error(
            "WG823",
            f"residency `{got}` is not honoured: the runtime keeps every node resident",
            span(r.file, entry[1]),
            label="loaded once and kept",
            labels=[Label(group_span, "this group's nodes stay in memory")],
            help="results are the same; the nodes hold their memory for the whole run (write "
            "`residency: resident` to say so)",
        )
    return got
