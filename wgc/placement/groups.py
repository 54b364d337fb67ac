"""Reading rank groups (`place:`, M*: `node_groups:`) in both placement formats: their nodes,
ranks, walks, `tp`, `sp` and `residency` (`wgc.placement.parallel`), and the checks of ranks
against the devices. `wgc.placement.load` builds on `GroupReader`.

A rank is at most `MAX_RANK` (WG809), checked as it is read: a world derived from the largest
rank (M*'s format, or no `devices`) is built rank by rank, so an unchecked rank of 10^12 would
have the loader allocate for a trillion ranks."""

from __future__ import annotations

import yaml

from wgc.diagnostics.diagnostic import Label, Span
from wgc.placement import parallel
from wgc.placement.model import Group, Named
from wgc.placement.yaml_reader import YamlReader, other
from wgc.placement.yamlnodes import span

MAX_RANK = 16383  # one worker process per rank: 16,384 GPUs is past the largest deployments

GROUP = {
    "wgc": ("nodes", "ranks", "walks", "tp", "sp", "residency"),
    "mstar": ("node_names", "ranks", "graph_walks", "tp_size", "sp_size", "residency"),
}


def ranks_phrase(world: int) -> str:
    if world == 1:
        return "1 device (rank 0)"
    return f"{world} devices (ranks 0-{world - 1})"


class GroupReader(YamlReader):
    def __init__(self, file: str, text: str) -> None:
        super().__init__(file, text)
        self.rank_trouble = False  # a `ranks` entry was unreadable: idle ranks are no news
        self.default_sp = 1  # M*'s top-level `sp_size`

    # ------------------------------------------------------------------ groups (both formats)
    def groups(self, entry, key_name: str) -> tuple[Group, ...]:
        if entry is None:
            return ()
        _, node = entry
        items = self.list_(node, f"`{key_name}`")
        if items is None:
            return ()
        out = []
        for item in items:
            g = self.group(item)
            if g is not None:
                out.append(g)
        return tuple(out)

    def group(self, node: yaml.Node) -> Group | None:
        if not isinstance(node, yaml.MappingNode):
            self.wrong(
                node, "a group", "a mapping", "write a group as `{nodes: [...], ranks: [...]}`"
            )
            return None
        own = GROUP[self.format]
        theirs = tuple(k for k in GROUP[other(self.format)] if k not in own)
        e = self.keys(node, own, theirs, "in a group")
        nodes_key, ranks_key, walks_key, tp_key, sp_key, residency_key = own
        first_key = span(self.file, node.value[0][0]) if node.value else span(self.file, node)
        nodes = self.names(e.get(nodes_key), nodes_key, first_key, "node")
        ranks, rank_spans = self.ranks(e.get(ranks_key), ranks_key, first_key)
        walks = None
        if walks_key in e:
            walks = self.names(e[walks_key], walks_key, first_key, "walk")
        sp = parallel.sp_size(self, e.get(sp_key), sp_key, self.default_sp)
        tp = self.tp(e.get(tp_key), tp_key, ranks, e.get(ranks_key), sp)
        sp = parallel.fits(self, sp, tp, ranks, e.get(sp_key), e.get(ranks_key))
        return Group(
            nodes=nodes,
            ranks=ranks,
            walks=walks,
            tp=tp,
            span=span(self.file, node),
            rank_spans=rank_spans,
            sp=sp,
            residency=parallel.residency(self, e.get(residency_key), span(self.file, node)),
        )

    def names(self, entry, key: str, where: Span, what: str) -> tuple[Named, ...]:
        if entry is None:
            self.error(
                "WG804",
                f"group has no `{key}`",
                where,
                label=f"this group lists no {what}s",
                help=f"add `{key}: [...]` naming the {what}s this group runs",
            )
            return ()
        _, node = entry
        items = self.list_(node, f"`{key}`")
        if items is None:
            return ()
        if not items:
            extra = "; omit `{key}` to place the nodes for every walk" if what == "walk" else ""
            self.error(
                "WG804",
                f"`{key}` is empty",
                span(self.file, node),
                label=f"no {what}s",
                help=f"name at least one {what}{extra.format(key=key)}",
            )
        out = []
        for item in items:
            name = self.str_(item, f"a {what} name")
            if name is not None:
                out.append(Named(name, span(self.file, item)))
        return tuple(out)

    def ranks(self, entry, key: str, where: Span) -> tuple[tuple[int, ...], tuple[Span, ...]]:
        count = len(self.diags)
        got = self._ranks(entry, key, where)
        self.rank_trouble |= len(self.diags) > count
        return got

    def _ranks(self, entry, key: str, where: Span) -> tuple[tuple[int, ...], tuple[Span, ...]]:
        if entry is None:
            self.error(
                "WG804",
                f"group has no `{key}`",
                where,
                label="this group runs on no rank",
                help=f"add `{key}: [0]` (the ranks this group runs on)",
            )
            return (), ()
        _, node = entry
        items = self.list_(node, f"`{key}`")
        if items is None:
            return (), ()
        if not items:
            self.error(
                "WG809",
                f"`{key}` is empty",
                span(self.file, node),
                label="no ranks",
                help="list the ranks this group runs on, e.g. `[0]`",
            )
        ranks: list[int] = []
        spans: list[Span] = []
        for item in items:
            r = self.int_(item, "a rank")
            if r is None:
                continue
            s = span(self.file, item)
            if r < 0:
                self.error(
                    "WG809",
                    f"rank {r} is negative",
                    s,
                    label="not a rank",
                    help="ranks count from 0",
                )
                continue
            if not self.rank_in_range(r, s):
                continue
            if r in ranks:
                self.error(
                    "WG809",
                    f"rank {r} appears twice in one group",
                    s,
                    label="repeated",
                    labels=[Label(spans[ranks.index(r)], "first listed here")],
                    help="list each rank of a group once",
                )
                continue
            ranks.append(r)
            spans.append(s)
        return tuple(ranks), tuple(spans)

    def rank_in_range(self, rank: int, where: Span) -> bool:
        """False (and WG809) for a rank above `MAX_RANK`."""
        if rank <= MAX_RANK:
            return True
        self.rank_trouble = True
        self.error(
            "WG809",
            f"rank {rank} is above the largest rank wgc runs ({MAX_RANK:,})",
            where,
            label="too large",
            help=f"ranks count from 0; a placement has at most {MAX_RANK + 1:,}",
        )
        return False

    def tp(self, entry, key: str, ranks: tuple[int, ...], ranks_entry, sp: int = 1) -> int:
        size = max(len(ranks), 1)
        if entry is None:  # the group's ranks, less what sequence parallelism takes
            return max(size // sp, 1)
        _, node = entry
        s = span(self.file, node)
        tp = self.int_(node, f"`{key}`")
        if tp is None:
            return size
        if tp < 1:
            self.error(
                "WG810",
                f"`{key}` is {tp}: a tensor-parallel size is at least 1",
                s,
                label="not a size",
                help=f"use `{key}: 1` for no tensor parallelism",
            )
            return size
        if ranks and len(ranks) % tp:
            divisors = [d for d in range(1, len(ranks) + 1) if len(ranks) % d == 0]
            self.error(
                "WG810",
                f"`{key}: {tp}` does not divide the group's {len(ranks)} ranks",
                s,
                label=f"{len(ranks)} ranks cannot split into groups of {tp}",
                labels=[Label(self.value_span(ranks_entry), f"{len(ranks)} ranks")]
                if ranks_entry
                else [],
                help=f"use a `{key}` that divides {len(ranks)} "
                f"({', '.join(map(str, divisors))}), or list a multiple of {tp} ranks",
            )
        return tp

    def ranks_exist(
        self, groups: tuple[Group, ...], world: int, devices_key: yaml.Node | None
    ) -> None:
        for g in groups:
            for r, s in zip(g.ranks, g.rank_spans, strict=True):
                if r >= world:
                    self.rank_trouble = True
                    labels = (
                        [Label(span(self.file, devices_key), "devices listed here")]
                        if devices_key is not None
                        else []
                    )
                    self.error(
                        "WG809",
                        f"rank {r} does not exist: `devices` lists {ranks_phrase(world)}",
                        s,
                        label="no such rank",
                        labels=labels,
                        help=f"add a device for rank {r} to `devices`, or use a rank below {world}",
                    )

    def idle_ranks(
        self, groups: tuple[Group, ...], device_spans: list[Span], devices: tuple[str, ...]
    ) -> None:
        used = {r for g in groups for r in g.ranks}
        if not groups or self.rank_trouble:
            return  # nothing placed, or ranks already reported: the idle rank is a consequence
        for r, s in enumerate(device_spans):
            if r not in used:
                self.error(
                    "WG821",
                    f"rank {r} (`{devices[r]}`) runs no node",
                    s,
                    label="no group uses this rank",
                    help=f"place nodes on rank {r}, or remove its device from `devices`",
                )
