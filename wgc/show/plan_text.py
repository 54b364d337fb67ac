"""`wgc show --placement`: the plan as text, for a deployer deciding how to split a model.

First the placement in one paragraph (params, KV cache, batching, what a worker's restart does
to the requests in flight on each walk: ``on_restart``), then one table per rank: the
device and host, the nodes it hosts (engine, KV labels, tp group, the walks it serves), the walks
it runs pieces of, its copy of every loop (with the ranks that share the loop), the stream
buffers it owns and the static memory estimate (KV + static buffers + streams). Then, per walk,
what crosses ranks: every hop once per request and every hop of each loop iteration, with its
byte size from the static types, and the total per request when every loop runs to its `max`.

Everything comes from the `Plan` (and `cross_rank_summary`): the view never looks at the IR, so
it shows exactly what the generated modules do.
"""

from __future__ import annotations

from collections.abc import Iterable

from wgc.lower.plan import Plan, Transfer
from wgc.lower.summary import WalkTraffic, cross_rank_summary
from wgc.lower.typespec import spec_nbytes
from wgc_runtime.contract.kinds import OnRestart
from wgc_runtime.contract.spec import LoopSpec, RankSpec, TypeSpec

DYNAMIC = "? B (dynamic)"


def human_bytes(n: int | None) -> str:
    """``8 B``, ``1.0 KiB``, ``196.8 KiB``, ``8.0 MiB``; `DYNAMIC` for an unknown size."""
    if n is None:
        return DYNAMIC
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def spec_text(t: TypeSpec | None) -> str:
    """``f32[16, 16]``, ``i64[]``; ``?`` when the type is unknown."""
    if t is None:
        return "?"
    return f"{t.dtype}[{', '.join(str(d) for d in t.dims)}]"


def _table(rows: list[list[str]], indent: str = "    ") -> list[str]:
    """Rows as left-aligned columns (trailing blanks stripped)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        (indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in rows
    ]


def _ranks(rs: Iterable[int]) -> str:
    rs = list(rs)
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)


# ---------------------------------------------------------------- lookups over the plan


class PlanIndex:
    """Answers the questions the views ask of a plan: a producing port's type, a loop's copies."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.out_types: dict[tuple[str, int, int, str], TypeSpec | None] = {}
        self.call_nodes: dict[tuple[str, int], str] = {}
        self.loops: dict[tuple[str, str], LoopSpec] = {}
        for r in plan.ranks:
            for piece in r.pieces:
                for c in piece.calls:
                    self.call_nodes[(piece.walk, c.id)] = c.node
                    for o in c.outputs:
                        self.out_types[(piece.walk, r.rank, c.id, o.port)] = o.type
                for lp in piece.loops:
                    self.loops.setdefault((piece.walk, lp.name), lp)

    def transfer_type(self, t: Transfer) -> TypeSpec | None:
        if t.edge == "persisted":  # a walk input: its declared type
            walk = self.plan.walk(t.walk)
            inp = next((i for i in walk.inputs if i.name == t.port), None) if walk else None
            return inp.type if inp is not None else None
        if t.call is None or t.port is None:
            return None
        return self.out_types.get((t.walk, t.src_rank, t.call, t.port))

    def producer(self, t: Transfer) -> str:
        """``LLM_cfg_text.velocity``: the port a hop leaves from (``LLM cache``: a label copy)."""
        if t.edge == "kv_copy":
            return f"{t.port} cache"
        if t.edge == "state":
            return f"{t.port} state (a handoff, when due)"
        if t.edge == "persisted":
            return f"the flow, into input `{t.port}`"
        node = self.call_nodes.get((t.walk, t.call)) if t.call is not None else None
        return f"{node}.{t.port}" if node and t.port else "?"

    def iterations(self, walk: str, loop: str) -> int:
        """How often one iteration of ``loop`` happens per request at most: its `max` times the
        `max` of every enclosing loop."""
        n = 1
        lp = self.loops.get((walk, loop))
        seen: set[str] = set()
        while lp is not None and lp.name not in seen:
            seen.add(lp.name)
            n *= max(lp.max, 0)
            lp = self.loops.get((walk, lp.parent)) if lp.parent else None
        return n


def request_total(ix: PlanIndex, w: WalkTraffic) -> tuple[int, bool]:
    """Bytes per request with every loop at its `max` (static part), and whether some hop is
    dynamic (then the total is a lower bound)."""
    total, dynamic = 0, False
    groups = [(w.per_request, 1)] + [
        (lt.transfers, ix.iterations(w.walk, lt.loop)) for lt in w.per_iteration
    ]
    for transfers, times in groups:
        for t in transfers:
            if t.nbytes is None:
                dynamic = True
            else:
                total += t.nbytes * times
    return total, dynamic


def total_text(n: int, dynamic: bool) -> str:
    if not dynamic:
        return human_bytes(n)
    return f"? B (dynamic; at least {human_bytes(n)})" if n else DYNAMIC


# ---------------------------------------------------------------- the text


def render_plan_text(plan: Plan) -> str:
    ix = PlanIndex(plan)
    n = len(plan.ranks)
    out = [f"plan {plan.model} @ {plan.placement}: {n} rank{'' if n == 1 else 's'}"]
    out += [f"  source {s.path} (sha256 {s.sha256[:12]})" for s in plan.sources]
    if plan.params:
        out.append("  params " + ", ".join(f"{k} = {_value(v)}" for k, v in plan.params))
    kv = plan.kv_cache
    out.append(f"  kv_cache {kv.pages} pages x {kv.page_size} tokens, {kv.dtype}")
    buckets = ", ".join(str(b) for b in plan.batching.capture)
    out.append(
        f"  batching max_batch {plan.batching.max_batch}, capture [{buckets}] "
        f"({plan.batching.backend}); "
        f"max_concurrent_requests {plan.max_concurrent_requests}; "
        f"attention {plan.attention.backend}"
    )
    out.append(f"  on_restart {restart_text(plan)}")
    replays = {
        (w.name, r) for w in plan.walks for r in w.ranks if w.restart_on(r) is OnRestart.REPLAY
    }
    for r in plan.ranks:
        out.append("")
        out += _rank(r, replays)
    out.append("")
    out += _transfers(plan, ix)
    return "\n".join(out) + "\n"


def _value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def restart_text(plan: Plan) -> str:
    """What a worker's restart does to the requests in flight, per walk, or per piece where a
    walk's pieces differ (``on_restart``)."""
    by: dict[str, list[str]] = {}
    for walk, policy, ranks in restart_rows(plan):
        whole = len(restart_rows_of(plan, walk)) == 1
        which = "ranks" if "," in ranks else "rank"
        by.setdefault(policy, []).append(walk if whole else f"{walk} ({which} {ranks})")
    if len(by) <= 1:
        policy = next(iter(by), "fail")
        return f"{policy} (every walk: {_RESTART[policy]})"
    return "; ".join(f"{p} {', '.join(names)}" for p, names in sorted(by.items()))


def restart_rows(plan: Plan) -> list[tuple[str, str, str]]:
    """(walk, policy, its ranks with that policy) for each walk: one row, or one per policy
    where its pieces differ."""
    return [row for w in plan.walks for row in restart_rows_of(plan, w.name)]


def restart_rows_of(plan: Plan, walk: str) -> list[tuple[str, str, str]]:
    w = next(x for x in plan.walks if x.name == walk)
    ranks: dict[str, list[int]] = {}
    for r in w.ranks:
        ranks.setdefault(w.restart_on(r).value, []).append(r)
    if len(ranks) <= 1:
        policy = next(iter(ranks), w.on_restart.value)
        return [(walk, policy, _rank_list(w.ranks))]
    return [(walk, policy, _rank_list(rs)) for policy, rs in sorted(ranks.items())]


def _rank_list(ranks: Iterable[int]) -> str:
    return ", ".join(map(str, ranks))


# what each policy does, for the one-policy line
_RESTART = {
    "fail": "a request in flight on a dead rank fails",
    "replay": "a request in flight on a dead rank runs again once it is back",
}


def _rank(r: RankSpec, replays: set[tuple[str, int]]) -> list[str]:
    out = [f"rank {r.rank}  {r.device} on {r.host}"]
    if r.nodes:
        out.append("  nodes")
        rows = [["node", "engine", "labels", "tp", "group", "walks"]]
        for n in r.nodes:
            rows.append(
                [
                    n.name,
                    n.engine,
                    ", ".join(n.labels) or "-",
                    str(n.tp),
                    ", ".join(str(x) for x in n.ranks),
                    "all" if n.walks == ("*",) else ", ".join(n.walks),
                ]
            )
        out += _table(rows)
    else:
        out.append("  nodes   (none)")
    walks = ", ".join(
        p.walk + (" (replay)" if (p.walk, r.rank) in replays else "") for p in r.pieces
    )
    walks = walks or "(none)"
    out.append(f"  walks   {walks}")
    loops = [(p.walk, lp) for p in r.pieces for lp in p.loops]
    if loops:
        out.append("  loops")
        out += _table(
            [
                [
                    f"{walk}.{lp.name}",
                    f"max {lp.max}",
                    _ranks(lp.ranks),
                    f"inside {lp.parent}" if lp.parent else "",
                ]
                for walk, lp in loops
            ]
        )
    if r.streams:
        out.append("  streams (buffers owned here)")
        rows = []
        for s in r.streams:
            item = spec_nbytes(s.item)
            rows.append(
                [
                    s.name,
                    f"{s.producer[0]}.{s.producer[1]} -> {s.consumer[0]}.{s.consumer[1]}",
                    f"from {_ranks(s.producer_ranks)}",
                    f"{s.capacity} x {spec_text(s.item)}",
                    human_bytes(s.capacity * item) if item is not None else DYNAMIC,
                ]
            )
        out += _table(rows)
    m = r.memory
    out.append("  memory (static estimate)")
    out += _table(
        [
            ["KV cache", human_bytes(m.kv_bytes)],
            ["static buffers", human_bytes(m.static_buffer_bytes)],
            ["streams", human_bytes(m.stream_bytes)],
            ["total", human_bytes(m.total)],
        ]
    )
    return out


def _hop_rows(ix: PlanIndex, transfers: Iterable[Transfer]) -> list[list[str]]:
    return [
        [
            f"rank {t.src_rank} -> {t.dst_rank}",
            t.channel,
            "kv pages" if t.edge == "kv_copy" else _what(ix, t),
            _bytes(ix, t),
            f"({t.edge})",
            f"from {ix.producer(t)}",
        ]
        for t in transfers
    ]


def _bytes(ix: PlanIndex, t: Transfer) -> str:
    """A hop's size; "at most" when its type is a shape bucket (the largest bucket's)."""
    t_type = ix.transfer_type(t)
    bucket = t_type is not None and not t_type.is_static and t.nbytes is not None
    return ("at most " if bucket else "") + human_bytes(t.nbytes)


def _what(ix: PlanIndex, t: Transfer) -> str:
    return "node state" if t.edge == "state" else spec_text(ix.transfer_type(t))


def _transfers(plan: Plan, ix: PlanIndex) -> list[str]:
    out = ["cross-rank transfers"]
    traffic = cross_rank_summary(plan)
    moving = {w.walk for w in traffic}
    for w in traffic:
        walk = plan.walk(w.walk)
        where = f" ({_ranks(walk.ranks)})" if walk is not None else ""
        out.append(f"  {w.walk}{where}")
        for lt in w.per_iteration:
            times = ix.iterations(w.walk, lt.loop)
            out.append(f"    per iteration of {lt.loop} (at most {times} per request)")
            out += _table(_hop_rows(ix, lt.transfers), "      ")
            out.append(f"      = {human_bytes(lt.nbytes)} per iteration")
        if w.per_request:
            out.append("    per request")
            out += _table(_hop_rows(ix, w.per_request), "      ")
            out.append(f"      = {human_bytes(w.request_bytes)} per request")
        else:
            out.append("    per request: none")
        total, dynamic = request_total(ix, w)
        out.append(f"    total per request at max iterations: {total_text(total, dynamic)}")
    quiet = [w.name for w in plan.walks if w.name not in moving]
    if quiet:
        out.append("  no cross-rank transfers: " + ", ".join(quiet))
    return out
