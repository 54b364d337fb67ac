"""Generated dispatch: a *plain* piece of a walk written as straight code (`direct_function`).

A piece is plain when the rank can run it start to end as soon as its one value arrives: every
call is of a stateless node, none in a loop, none reading or pushing a stream, no sink unit, no
captured step of the walk here, the piece starts on the value carrying the walk's header
(``needs_start`` false), exactly one input port is fed from elsewhere (a walk input or another
rank), every other input comes from an earlier call here, and every output goes to a later call
here, to a call on another rank, or to the client. Such a piece gets a function in its rank
module, ``direct_<walk>(bind)``: called once when the executor is built, it binds a caller per
call and a sender per destination that leaves the rank (`wgc_runtime.core.executor.direct`),
and returns ``run(w, value)``, which calls node after node with the values as local variables,
sending each value that leaves the rank right after the call that made it (the order the generic
executor routes in). Every other piece keeps ``direct`` None and runs in the generic executor.

The text is deterministic (the plan's tuples in order) and every call carries the ``.walk`` line
it comes from; names from the user reach the code as string literals, comments, or locals in
the ``v_`` namespace (``v_x1``, as in the generated flows).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from wgc.codegen import pyfmt
from wgc.codegen.pyfmt import INDENT, Atom, comment_text
from wgc_runtime.contract.kinds import DestKind, Edge, Engine, InputMode, SourceKind
from wgc_runtime.contract.spec import CallSpec, PieceSpec, PortIn, RankSpec

_LEAVING_EDGES = (Edge.INTERNAL, Edge.EMITTED)


@dataclass(frozen=True, slots=True)
class Plain:
    """A plain piece's calls in order and its one entry (call id, input port)."""

    calls: tuple[CallSpec, ...]
    entry: tuple[int, PortIn]


def plain(p: PieceSpec, r: RankSpec) -> Plain | None:
    """The piece as a `Plain` one, or None when it is not (see the module docstring)."""
    if p.loops or p.sinks or p.nested or p.producers or p.consumers or p.needs_start:
        return None
    if any(c.walk == p.walk for c in r.captures):
        return None
    engines = {n.name: n.engine for n in r.nodes}
    by_id = {c.id: c for c in p.calls}
    if not by_id or sorted(p.body) != sorted(by_id):
        return None
    done: set[int] = set()
    entry: tuple[int, PortIn] | None = None
    for cid in p.body:
        c = by_id[cid]
        if c.rank != p.rank or c.loops or c.pushes or engines.get(c.node) is not Engine.STATELESS:
            return None
        for port in c.inputs:
            src = port.src
            if port.mode is not InputMode.ONCE or src.kind is SourceKind.STREAM:
                return None
            if src.kind is SourceKind.CALL and src.rank == p.rank:
                if src.call not in done:
                    return None
            elif entry is None:
                entry = (cid, port)
            else:
                return None  # a second value from elsewhere: the generic executor waits for both
        for o in c.outputs:
            for d in o.dests:
                if d.loop or d.carried or d.edge not in _LEAVING_EDGES:
                    return None
                if d.kind is DestKind.CALL and d.rank == p.rank:
                    if d.call not in by_id or d.call in done or d.call == cid:
                        return None
                elif not (d.kind is DestKind.CALL and d.rank is not None) and (
                    d.kind is not DestKind.CLIENT
                ):
                    return None
        done.add(cid)
    if entry is None:
        return None
    return Plain(tuple(by_id[cid] for cid in p.body), entry)


def function_name(p: PieceSpec) -> str:
    """The generated function's name (walk names are identifiers)."""
    return f"direct_{p.walk}"


class _Names:
    """Local names for values: ``v_`` + the ``.walk`` channel, the namespace the generated
    flows give the author's names too (no generated or imported name starts with it)."""

    def __init__(self) -> None:
        self.taken: set[str] = set()

    def new(self, hint: str) -> str:
        base = "v_" + "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in hint)
        name, i = base, 2
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name


def direct_function(p: PieceSpec, r: RankSpec, where: Callable[[str], str]) -> str | None:
    """The text of ``direct_<walk>`` for a plain piece, or None (``where``: provenance text of
    a record's ``source``, as the rank module's comments write it)."""
    shape = plain(p, r)
    if shape is None:
        return None
    names = _Names()
    # the channel each local value is read as (its first reader here), else node_port
    channel: dict[tuple[int, str], str] = {}
    for c in shape.calls:
        for port in c.inputs:
            if port.src.kind is SourceKind.CALL and port.src.rank == p.rank:
                channel.setdefault((port.src.call or 0, port.src.port or ""), port.channel)
        for o in c.outputs:
            for d in o.dests:
                if d.kind is DestKind.CLIENT and d.channel:
                    channel.setdefault((c.id, o.port), d.channel)
    entry_cid, entry_port = shape.entry
    value_of: dict[tuple[int, str], str] = {}
    entry_name = names.new(entry_port.channel)
    binds: list[str] = []
    body: list[str] = []
    pad = INDENT * 2
    for c in shape.calls:
        caller = f"call_{c.id}"
        binds.append(f"{INDENT}{caller} = bind.call({c.id})  # {comment_text(c.node)}")
        args = []
        for port in c.inputs:
            if (c.id, port.port) == (entry_cid, entry_port.port):
                v = entry_name
            else:
                v = value_of[(port.src.call or 0, port.src.port or "")]
            args.append((pyfmt.string(port.port), Atom(v)))
        invoke = pyfmt.call(caller, [Atom("w"), pyfmt.dict_(args)])
        used = [o for o in c.outputs if o.dests]
        body.append(f"{pad}# {where(c.source)}")
        for o in used:
            value_of[(c.id, o.port)] = names.new(
                channel.get((c.id, o.port)) or f"{c.node}_{o.port}"
            )
        if not used:
            body.append(pad + pyfmt.layout(invoke, len(pad), 2))
        elif len(used) == 1:
            key = f"[{pyfmt.string(used[0].port).text}]"
            prefix = f"{value_of[(c.id, used[0].port)]} = "
            text = pyfmt.layout(invoke, len(pad) + len(prefix), 2, trailer=len(key))
            body.append(pad + prefix + text + key)
        else:
            body.append(pyfmt.statement("out = ", invoke, 2))
            for o in used:
                body.append(f"{pad}{value_of[(c.id, o.port)]} = out[{pyfmt.string(o.port).text}]")
        for o in used:
            for k, d in enumerate(o.dests):
                if d.kind is DestKind.CALL and d.rank == p.rank:
                    continue  # read as a local variable by the later call
                sender = f"send_{c.id}_{k}" if len(used) == 1 else f"send_{c.id}_{o.port}_{k}"
                to = (
                    f"rank {d.rank}, call {d.call} `{d.port}`"
                    if d.kind is DestKind.CALL
                    else f"the client as `{d.name}`"
                )
                port_text = pyfmt.string(o.port).text
                binds.append(
                    f"{INDENT}{sender} = bind.send({c.id}, {port_text}, {k})  # {comment_text(to)}"
                )
                body.append(f"{pad}{sender}(w, {value_of[(c.id, o.port)]})")
    name = function_name(p)
    doc = (
        f'{INDENT}"""Walk `{p.walk}` on rank {p.rank} as straight code: its value '
        f"`{comment_text(entry_port.channel)}` in, {len(shape.calls)} call(s), run by the "
        f'executor when the value arrives."""'
    )
    doc = _wrap_doc(doc)
    lines = [
        f"def {name}(bind):",
        doc,
        *binds,
        "",
        f"{INDENT}def run(w, {entry_name}):",
        *body,
        "",
        f"{INDENT}return run",
    ]
    return "\n".join(lines)


def _wrap_doc(doc: str) -> str:
    """The docstring line, wrapped at the width as the other generated docstrings are."""
    if len(doc) <= pyfmt.WIDTH:
        return doc
    text = doc.strip()[3:-3]
    lines = textwrap.wrap(text, pyfmt.WIDTH - len(INDENT) - 3, break_long_words=False)
    return f'{INDENT}"""' + f"\n{INDENT}".join(lines) + f'\n{INDENT}"""'
