"""A placement's ``on_restart:`` (wgc's format): what a worker's restart does to the requests in
flight on each walk's pieces there (a walk's piece on a rank: what `wgc show` lists under the
rank's ``walks``).

    on_restart: replay                      # every walk
    on_restart: {tts: replay}               # this walk; the others fail (the default)
    on_restart: {default: replay, decode: fail}
    on_restart: {decode: {1: replay}}       # decode's piece on rank 1; its others fail
    on_restart: {decode: {default: replay, rank 0: fail}}

``fail`` (the default): a request with state on the dead rank fails at once, naming the rank.
``replay``: it runs again from its start once the rank is back; outputs already sent to the
client are not sent again (the replay is seeded as the lost run was, and checked against what
was sent: `wgc_runtime.core.conductor.replay`); a request whose session keeps state across
requests fails. A request replays only when every piece that left state on the dead rank says
``replay`` (a rank a walk leaves state on without a piece there, a stream's owner or a handoff's
target, takes the walk's own policy). The lowering writes each walk's policy on its `WalkSpec`
(``on_restart``, and ``piece_restarts`` for the pieces named by rank); the conductor's restart
path (`wgc_runtime.host.processes.recovery`) reads it, and ``wgc show --placement`` prints it.

Codes: a value other than ``fail`` / ``replay`` is WG817 (the loader's); a walk the model does
not have is WG853; a piece named by something other than its rank (``rank N`` or ``N``) is
WG899 (the loader's); a rank the walk has no piece on is WG898 (`check`, run with the placement
rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from wgc.diagnostics.diagnostic import Diagnostic, diag
from wgc.diagnostics.suggest import closest
from wgc.ir.model import Model
from wgc.placement.model import Named, PieceRestart, Placement, Restarts
from wgc.placement.reach import assignment
from wgc.placement.yamlnodes import scalar, span

if TYPE_CHECKING:
    from wgc.placement.load import _Loader

POLICIES = ("fail", "replay")
DEFAULT_KEY = "default"


def read(r: _Loader, entry) -> Restarts:
    if entry is None:
        return Restarts()
    _, node = entry
    where = span(r.file, node)
    if isinstance(node, yaml.ScalarNode):
        return Restarts(default=r.choice(entry, "an `on_restart` policy", POLICIES), span=where)
    if not r.map_(node, "`on_restart`"):
        return Restarts()
    default, walks, pieces, seen = "fail", [], [], {}
    for k, v in node.value:
        name = r.str_(k, "a walk name in `on_restart`")
        if name is None:
            continue
        if name in seen:
            r.duplicate(k, seen[name], f"`{name}` in `on_restart`")
            continue
        seen[name] = k
        if name != DEFAULT_KEY and isinstance(v, yaml.MappingNode):
            own, more = _pieces(r, name, v)
            walks.append((Named(name, span(r.file, k)), own))
            pieces += more
            continue
        policy = r.choice((k, v), f"an `on_restart` policy for `{name}`", POLICIES)
        if name == DEFAULT_KEY:
            default = policy
        else:
            walks.append((Named(name, span(r.file, k)), policy))
    # a walk given by its pieces without a `default` of its own takes the file's
    walks = [(n, default if p is None else p) for n, p in walks]
    return Restarts(default=default, walks=tuple(walks), span=where, pieces=tuple(pieces))


def _pieces(r: _Loader, walk: str, node: yaml.MappingNode) -> tuple[str | None, list]:
    """``{default: P, RANK: P, ...}`` of one walk: its own default (None: not given) and its
    pieces named by rank."""
    own, out, seen = None, [], {}
    for k, v in node.value:
        key = scalar(k)
        rank = _rank(key)
        label = DEFAULT_KEY if key == DEFAULT_KEY else rank
        if label is None:
            r.error(
                "WG899",
                f"`{k.value}` in `on_restart` for `{walk}` names no piece: a walk's piece is "
                "named by its rank",
                span(r.file, k),
                label="not a rank",
                help=f"write `rank 1: replay` or `1: replay` (or `default:` for `{walk}`'s "
                "other pieces); `wgc show --placement` lists each rank's walks",
            )
            continue
        if label in seen:
            r.duplicate(k, seen[label], f"`{k.value}` in `on_restart` for `{walk}`")
            continue
        seen[label] = k
        policy = r.choice((k, v), f"an `on_restart` policy for `{walk}`", POLICIES)
        if rank is None:
            own = policy
        else:
            out.append(PieceRestart(walk, rank, policy, span(r.file, k)))
    return own, out


def _rank(key: object) -> int | None:
    """The rank a piece key names (``3`` or ``rank 3``), else None."""
    if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < 2**31:
        return key
    if isinstance(key, str):
        head, _, number = key.partition(" ")
        if head == "rank" and number.isdigit() and len(number) < 10:
            return int(number)
    return None


def check(model: Model, placement: Placement) -> list[Diagnostic]:
    """WG853: every walk ``on_restart`` names is a walk of the model; WG898: every piece it
    names is on a rank the walk runs on."""
    names = [w.name for w in model.walks]
    out = []
    for named, _ in placement.on_restart.walks:
        if model.walk(named.name) is not None:
            continue
        close = closest(named.name, names)
        listed = ", ".join(f"`{n}`" for n in names[:12])
        out.append(
            diag(
                "WG853",
                f"`on_restart` names `{named.name}`, which is not a walk of `{model.name}`",
                named.span,
                label="unknown walk",
                help=f"did you mean `{close}`?" if close else f"the walks are {listed}",
            )
        )
    if not placement.on_restart.pieces:
        return out
    ranks: dict[str, set[int]] = {}
    for (walk, _), group in assignment(model, placement).items():
        ranks.setdefault(walk, set()).update(group.ranks)
    for piece in placement.on_restart.pieces:
        if model.walk(piece.walk) is None or piece.rank in ranks.get(piece.walk, ()):
            continue
        where = ranks.get(piece.walk)
        has = ", ".join(map(str, sorted(where))) if where else "none (it is not placed)"
        out.append(
            diag(
                "WG898",
                f"`on_restart` names rank {piece.rank} for `{piece.walk}`, which has no piece "
                "there",
                piece.span,
                label="no piece of the walk here",
                help=f"`{piece.walk}` runs on rank(s) {has}",
            )
        )
    return out
