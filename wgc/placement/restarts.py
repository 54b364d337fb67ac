"""A placement's ``on_restart:`` (wgc's format): what a worker's restart does to the requests in
flight on each walk's pieces there.

    on_restart: replay                      # every walk
    on_restart: {tts: replay}               # this walk; the others fail (the default)
    on_restart: {default: replay, decode: fail}

``fail`` (the default): a request with state on the dead rank fails at once, naming the rank.
``replay``: it runs again from its start once the rank is back, as long as none of its outputs
reached the client (then it fails: a replay would send them twice); a request whose session
keeps state across requests fails too. A request replays only when every walk that left state
on the dead rank says ``replay``. The lowering writes each walk's policy on its `WalkSpec`
(``on_restart``); the conductor's restart path (`wgc_runtime.host.processes.recovery`) reads
it, and ``wgc show --placement`` prints it.

Codes: a value other than ``fail`` / ``replay`` is WG817 (the loader's); a walk the model does
not have is WG853 (`check`, run with the placement rules).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from wgc.diagnostics.diagnostic import Diagnostic, diag
from wgc.diagnostics.suggest import closest
from wgc.ir.model import Model
from wgc.placement.model import Named, Placement, Restarts
from wgc.placement.yamlnodes import span

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
    default, walks, seen = "fail", [], {}
    for k, v in node.value:
        name = r.str_(k, "a walk name in `on_restart`")
        if name is None:
            continue
        if name in seen:
            r.duplicate(k, seen[name], f"`{name}` in `on_restart`")
            continue
        seen[name] = k
        policy = r.choice((k, v), f"an `on_restart` policy for `{name}`", POLICIES)
        if name == DEFAULT_KEY:
            default = policy
        else:
            walks.append((Named(name, span(r.file, k)), policy))
    return Restarts(default=default, walks=tuple(walks), span=where)


def check(model: Model, placement: Placement) -> list[Diagnostic]:
    """WG853: every walk ``on_restart`` names is a walk of the model."""
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
    return out
