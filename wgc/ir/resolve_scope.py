"""The binding tables of channel -> edge inference (`wgc.ir.resolve`): what each statement of a
block binds, per nesting level (the walk's top block, a loop body, a `par` branch), and how a read
at a position of a level finds the binding it sees."""

from __future__ import annotations

from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Span
from wgc.ir.types import TensorType
from wgc.ir.walk import Block, EdgeKind, End, EndKind, Loop, Par


@dataclass(frozen=True, slots=True)
class Def:
    """A binding of a channel: what kind of value, where it is produced, its type."""

    kind: str  # "input" | "port" | "last" | "all"
    end: End  # where the value is produced (for yields: the body's producer)
    type: TensorType | None
    loop: str | None = None  # for yields


# how a read sees a value: its edge kind, the binding, and the loop the edge belongs to
Found = tuple[EdgeKind, Def, str | None]


@dataclass
class Level:
    """One nesting level of a walk's blocks, with what each of its statements binds."""

    kind: str  # "top" | "loop" | "branch"
    block: Block
    parent: Level | None
    pos_in_parent: int  # index of the containing statement in the parent level
    defs: list[list[tuple[str, Def]]]  # per statement index: what it binds at this level
    loop: Loop | None = None
    par_index: int = -1  # for branches: which branch of the par
    siblings: tuple[dict[str, Def], ...] = ()  # for branches: every branch's visible writes

    def before(self, channel: str, pos: int) -> Def | None:
        for i in range(min(pos, len(self.defs)) - 1, -1, -1):
            for ch, d in reversed(self.defs[i]):
                if ch == channel:
                    return d
        return None

    def at_or_after(self, channel: str, pos: int) -> Def | None:
        for i in range(max(pos, 0), len(self.defs)):
            for ch, d in self.defs[i]:
                if ch == channel:
                    return d
        return None

    def last(self, channel: str) -> Def | None:
        return self.before(channel, len(self.defs))


NESTED: Def = Def("nested", End(EndKind.INPUT, name="<nested>"), None)


def yield_via(kind: EdgeKind, d: Def) -> tuple[EdgeKind | None, str | None]:
    """Whether a value read as ``kind`` is really a loop's yield the kind does not announce."""
    if d.kind not in ("last", "all") or kind in (EdgeKind.TERMINAL, EdgeKind.ACCUMULATED):
        return None, None
    return (EdgeKind.TERMINAL if d.kind == "last" else EdgeKind.ACCUMULATED), d.loop


def enclosing_loop_level(lv: Level | None) -> Level | None:
    """The nearest loop body at or around ``lv``."""
    while lv is not None:
        if lv.kind == "loop":
            return lv
        lv = lv.parent
    return None


def innermost_loop(lv: Level | None) -> str | None:
    """The name of the innermost loop around ``lv`` (None at the top)."""
    while lv is not None:
        if lv.kind == "loop" and lv.loop is not None:
            return lv.loop.name
        lv = lv.parent
    return None


def branch_span(level: Level, bi: int) -> Span | None:
    """Where branch ``bi`` of the `par` holding branch ``level`` is."""
    parent = level.parent
    if parent is None:
        return None
    par = parent.block.stmts[level.pos_in_parent]
    if isinstance(par, Par) and bi < len(par.branches):
        return par.branches[bi].span
    return None
