"""Pass `disjointness`: who writes a channel is never ambiguous.

Scopes are the walk body and each loop body (one iteration). A `par`'s branches write into the
scope that encloses the `par`; a nested loop writes only its yields into it. Invariants proved:

* WG401: the branches of a `par` write disjoint channel sets (they run at the same time).
* WG402: a channel is bound once per scope: no two call outputs in one scope bind it, and a call
  output does not rebind a walk input or an earlier binding. A `yield last/all` MAY rebind a
  channel of the enclosing scope (the loop's output updates the variable), and a loop body may
  bind a name that exists outside (that is loop-carrying or shadowing, not a second binding).
* WG403: a loop's `yield last` and `yield all` sets are disjoint, and no channel is yielded twice.
* WG404: every yielded channel is bound in the loop body (`Issue` YIELD_UNBOUND from a `yield`;
  the `until` case is the dataflow pass's WG604).
* WG405: a `par` branch never reads a sibling branch's write (`Issue` SIBLING_READ).
* WG406: a loop-local channel is not read after the loop (`Issue` LOOP_LOCAL). Also: a read
  after a loop of a channel the loop body rebinds without yielding it. Such a read silently sees
  the value from *before* the loop (the classic forgotten `yield last latents`), so it is
  reported too; to mean the old value, the body binds its own channel under another name.

Owns: WG401, WG402, WG403, WG404, WG405, WG406.
"""

from __future__ import annotations

from dataclasses import dataclass

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import did_you_mean
from wgc.ir.model import Model
from wgc.ir.walk import Block, Call, Emit, Issue, IssueKind, Loop, Par, Persist, Walk

NAME = "disjointness"
CODES = ("WG401", "WG402", "WG403", "WG404", "WG405", "WG406")


def run(model: Model) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for walk in model.walks:
        out.extend(_check_scope(walk, walk.body, top=True))
        out.extend(_ShadowedReads(walk).scope(walk.body, top=True))
        for loop in walk.loops:
            out.extend(_check_scope(walk, loop.body, top=False))
            out.extend(_check_yields(loop))
            out.extend(_ShadowedReads(walk).scope(loop.body, top=False))
        out.extend(_check_issues(walk))
    return out


# ---------------------------------------------------------------------------------- writes


@dataclass(frozen=True, slots=True)
class _Write:
    """One binding of ``channel`` in a scope."""

    channel: str
    span: Span
    kind: str  # "input" | "call" | "yield"
    branches: tuple[tuple[int, int], ...]  # (par id, branch index) from the scope inward
    call: int = -1  # the call's id, for "call" writes
    port: str = ""  # the port a "call" write binds from


def _scope_writes(walk: Walk, block: Block, top: bool) -> list[_Write]:
    """Every binding of the scope whose body is ``block``, in source order."""
    out = [_Write(i.name, i.span, "input", ()) for i in walk.inputs] if top else []
    _collect(block, (), out, [0])
    return out


def _collect(block: Block, branches: tuple, out: list[_Write], par_ids: list[int]) -> None:
    for s in block.stmts:
        if isinstance(s, Call):
            out.extend(_Write(w.channel, w.span, "call", branches, s.id, w.port) for w in s.writes)
        elif isinstance(s, Par):
            par_ids[0] += 1
            pid = par_ids[0]
            for bi, b in enumerate(s.branches):
                _collect(b, (*branches, (pid, bi)), out, par_ids)
        elif isinstance(s, Loop):  # only its yields are visible here
            bound = _bound_in(s.body)
            for n in (*s.yield_last, *s.yield_all):
                if n.name in bound:
                    out.append(_Write(n.name, n.span, "yield", branches))


def _bound_in(block: Block) -> set[str]:
    """Channels a loop body binds at its own level (what it can yield)."""
    writes: list[_Write] = []
    _collect(block, (), writes, [0])
    return {w.channel for w in writes}


def _siblings(a: _Write, b: _Write) -> bool:
    """True when ``a`` and ``b`` sit in different branches of one `par`."""
    for (pa, ba), (pb, bb) in zip(a.branches, b.branches, strict=False):
        if pa != pb:
            return False
        if ba != bb:
            return True
    return False


# ---------------------------------------------------------------------------------- WG401/402


def _check_scope(walk: Walk, block: Block, top: bool) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    by_channel: dict[str, list[_Write]] = {}
    for w in _scope_writes(walk, block, top):
        earlier = by_channel.setdefault(w.channel, [])
        d = _conflict(w, earlier)
        if d is not None:
            out.append(d)
        earlier.append(w)
    return out


def _conflict(w: _Write, earlier: list[_Write]) -> Diagnostic | None:
    sibling = next((e for e in earlier if _siblings(e, w)), None)
    if sibling is not None:
        return diag(
            "WG401",
            f"`par` branches both write channel `{w.channel}`",
            w.span,
            label="second write, in another branch",
            labels=[Label(sibling.span, "first written here")],
            help=f"branches run at the same time, so which `{w.channel}` wins is undefined: "
            f"bind a distinct name in each branch (e.g. `-> {w.channel}_2 = {w.port or '...'}`)"
            " and read each where it is needed",
        )
    if w.kind != "call":
        return None  # a loop's yield updates the enclosing scope's channel
    # two outputs of one call binding the same name are WG112 (the names pass)
    first = next((e for e in earlier if not (e.kind == "call" and e.call == w.call)), None)
    if first is None:
        return None
    what = "walk input declared here" if first.kind == "input" else "first bound here"
    return diag(
        "WG402",
        f"channel `{w.channel}` is bound twice in one scope",
        w.span,
        label="bound again here",
        labels=[Label(first.span, what)],
        help=f"bind a new name here (e.g. `-> {w.channel}_2 = {w.port}`) and read that; "
        "only a loop may update a channel, from one iteration to the next",
    )


# ---------------------------------------------------------------------------------- WG403


def _check_yields(loop: Loop) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    last = {}
    for n in loop.yield_last:
        if n.name in last:
            out.append(_twice(loop, n.name, n.span, last[n.name], "last"))
        else:
            last[n.name] = n.span
    every = {}
    for n in loop.yield_all:
        if n.name in every:
            out.append(_twice(loop, n.name, n.span, every[n.name], "all"))
            continue
        every[n.name] = n.span
        if n.name in last:
            out.append(
                diag(
                    "WG403",
                    f"channel `{n.name}` is yielded both `last` and `all` by loop `{loop.name}`",
                    n.span,
                    label="yielded `all` here",
                    labels=[Label(last[n.name], "and `last` here")],
                    help=f"after the loop, `{n.name}` names one value: yield it once, or bind the "
                    f"final value to another name in the body (e.g. `-> {n.name}_final = ...`) "
                    "and yield that `last`",
                )
            )
    return out


def _twice(loop: Loop, name: str, span: Span, first: Span, mode: str) -> Diagnostic:
    return diag(
        "WG403",
        f"channel `{name}` is yielded twice by loop `{loop.name}`",
        span,
        label="yielded again here",
        labels=[Label(first, "first yielded here")],
        help=f"list `{name}` once in `yield {mode}`",
    )


# ---------------------------------------------------------------------------------- issues


def _check_issues(walk: Walk) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for issue in walk.issues:
        if issue.kind is IssueKind.YIELD_UNBOUND and issue.reader == "yield":
            out.append(_yield_unbound(walk, issue))
        elif issue.kind is IssueKind.SIBLING_READ:
            out.append(_sibling_read(walk, issue))
        elif issue.kind is IssueKind.LOOP_LOCAL:
            out.append(_loop_local(issue))
    return out


def _yield_unbound(walk: Walk, issue: Issue) -> Diagnostic:
    loop = walk.loop(issue.loop or "")
    labels = [Label(issue.other, f"loop `{issue.loop}`")] if issue.other is not None else []
    if _bound_outside(walk, loop, issue.channel):
        fix = (
            f"`{issue.channel}` is bound outside the loop, and a loop yields only what its body "
            "binds: remove it from the `yield` list"
        )
    else:
        bound = sorted(_bound_in(loop.body)) if loop is not None else []
        hint = did_you_mean(issue.channel, bound, end=" ")
        fix = f"{hint}bind `{issue.channel}` in the loop body, or remove it from the `yield` list"
        if hint:
            fix = f"{hint}otherwise bind `{issue.channel}` in the loop body or drop it from `yield`"
    return diag(
        "WG404",
        f"loop `{issue.loop}` yields `{issue.channel}`, but its body never binds it",
        issue.span,
        label="not bound in the loop body",
        labels=labels,
        help=fix,
    )


def _bound_outside(walk: Walk, loop: Loop | None, channel: str) -> bool:
    if walk.input(channel) is not None:
        return True
    inside = {c.id for c in walk.calls if loop is not None and loop.name in c.loops}
    return any(w.channel == channel for c in walk.calls if c.id not in inside for w in c.writes)


def _sibling_read(walk: Walk, issue: Issue) -> Diagnostic:
    write = _sibling_write(walk, issue)
    labels = []
    if write is not None:
        labels.append(Label(write, "written here, in a sibling branch"))
    elif issue.other is not None:
        labels.append(Label(issue.other, "the sibling branch that writes it"))
    return diag(
        "WG405",
        f"`par` branch reads `{issue.channel}`, which a sibling branch writes",
        issue.span,
        label="read here",
        labels=labels,
        help=f"`par` branches run at the same time: compute `{issue.channel}` before the `par`, "
        "or move this call after the `par` (or into the branch that writes it)",
    )


def _sibling_write(walk: Walk, issue: Issue) -> Span | None:
    """The binding of ``issue.channel`` inside the sibling branch ``issue.other``."""
    for branch in _all_branches(walk.body):
        if branch.span == issue.other:
            writes: list[_Write] = []
            _collect(branch, (), writes, [0])
            return next((w.span for w in writes if w.channel == issue.channel), None)
    return None


def _all_branches(block: Block):
    for s in block.stmts:
        if isinstance(s, Par):
            for b in s.branches:
                yield b
                yield from _all_branches(b)
        elif isinstance(s, Loop):
            yield from _all_branches(s.body)


def _loop_local(issue: Issue) -> Diagnostic:
    labels = []
    if issue.other is not None:
        labels.append(Label(issue.other, f"`{issue.channel}` is local to this loop"))
    return diag(
        "WG406",
        f"`{issue.channel}` is bound inside loop `{issue.loop}` and is not visible after it",
        issue.span,
        label=f"read after loop `{issue.loop}`",
        labels=labels,
        help=f"add `yield last {issue.channel}` (its final value) or `yield all "
        f"{issue.channel}` (every iteration's value, stacked) after the loop body",
    )


class _ShadowedReads:
    """WG406 for reads after a loop that rebinds (carries) a channel but does not yield it."""

    def __init__(self, walk: Walk) -> None:
        self.walk = walk
        self.visible: set[str] = set()
        self.shadowed: dict[str, Loop] = {}  # channel -> the loop whose value it drops
        self.out: list[Diagnostic] = []

    def scope(self, block: Block, top: bool) -> list[Diagnostic]:
        self.visible = {i.name for i in self.walk.inputs} if top else set()
        self.stmts(block)
        return self.out

    def stmts(self, block: Block) -> None:
        for s in block.stmts:
            if isinstance(s, Call):
                for b in s.reads:
                    self.read(b.channel, b.span)
                for w in s.writes:
                    self.bind(w.channel)
            elif isinstance(s, Emit | Persist):
                self.read(s.channel, s.span)
            elif isinstance(s, Par):
                for b in s.branches:
                    self.stmts(b)
            elif isinstance(s, Loop):
                self.loop(s)

    def bind(self, channel: str) -> None:
        self.visible.add(channel)
        self.shadowed.pop(channel, None)

    def loop(self, loop: Loop) -> None:
        yielded = {n.name for n in (*loop.yield_last, *loop.yield_all)}
        bound = _bound_in(loop.body)
        if yielded <= bound:  # else WG404 already points at the broken yield list
            for ch in sorted(bound - yielded):
                if ch in self.visible:
                    self.shadowed[ch] = loop
        for ch in yielded & bound:
            self.bind(ch)

    def read(self, channel: str, span: Span) -> None:
        loop = self.shadowed.pop(channel, None)  # the first such read says it all
        if loop is None:
            return
        self.out.append(
            diag(
                "WG406",
                f"`{channel}` read after loop `{loop.name}` is the value from before the loop",
                span,
                label=f"does not see what loop `{loop.name}` computed",
                labels=[
                    Label(
                        loop.header_span or loop.span,
                        f"`{channel}` is rebound in this loop but not yielded",
                    )
                ],
                help=f"add `yield last {channel}` (its final value) or `yield all {channel}` "
                "(every iteration's value, stacked) after the loop body; to mean the value from "
                "before the loop, bind the loop's channel under another name",
            )
        )
