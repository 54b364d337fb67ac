"""KV caches in the plan: each kv-cache node's pool per rank, the label copies between rank
groups, and what admission promises each request.

* **Pools** (`KvPoolSpec` on every kv-cache `NodeSpec`): the placement's ``kv_cache:`` (page
  size, pages, dtype) with the node's geometry from its config: ``layers`` (default 1), and
  ``kv_heads`` × ``head_dim`` for the width, else ``kv_heads = 1`` and ``head_dim`` = its
  ``config hidden``, else the model's ``param hidden``, else 1. Under tensor parallelism a rank
  holds its shard of the heads. The memory estimate is exactly what the runtime allocates.
* **Copies.** A ``like X { label L }`` node reads X's label L. On X's group, when X runs on no
  other group, it reads X's pool (``shared``); anywhere else (X's state may be on another
  group when the copy runs) it has a pool of its own, and every walk that calls it there
  starts with a copy of the request's label L from where X's state lives (`KvCopy`, a planned
  transfer with its bytes in `wgc show --placement`).
* **Admission.** ``tokens_per_request`` is the node's ``config kv_tokens`` (what one request may
  hold per label) times its labels, or, without it, a bound from one run of each walk calling
  the node: per call, the longest leading dim of its inputs (`DYNAMIC_TOKENS` for a dynamic
  one), times the ``max`` of every loop around it. Declare ``kv_tokens`` for real models: the
  bound knows nothing of prompts. `budgets` lists every pool for the conductor.
* **Handoffs.** A node-state move between groups (P/D) of a node whose cache declares
  ``kv_tokens`` has a size from the declared geometry (`handoff_bytes`): one request's labels at
  that bound.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from wgc.ir.decls import EngineKind
from wgc.ir.decls import Node as NodeDecl
from wgc.ir.model import Model
from wgc.lower.plan import Transfer
from wgc.lower.typespec import type_spec
from wgc_runtime.contract.conductor import KvBudget, KvCopy
from wgc_runtime.contract.spec import KV_ITEMSIZE, KvCacheSpec, KvPoolSpec, NodeSpec

DYNAMIC_TOKENS = 64  # a dynamic leading dim counts this many tokens in the admission bound


def _int(v: object) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return int(v) if v > 0 else None


def owner_of(model: Model, node: NodeDecl) -> str:
    """Whose cache a kv-cache node uses: its own, or for ``like X { label L }``, X's."""
    if node.like is not None and node.label is not None and model.node(node.like) is not None:
        return node.like
    return node.name


def geometry(model: Model, node: NodeDecl) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of a node's cache, from its config (module docstring)."""
    cfg = dict(node.config)
    layers = _int(cfg.get("layers")) or 1
    heads, head_dim = _int(cfg.get("kv_heads")), _int(cfg.get("head_dim"))
    if heads and head_dim:
        return layers, heads, head_dim
    hidden = model.param("hidden")
    width = _int(cfg.get("hidden")) or _int(hidden.value if hidden else None) or 1
    return layers, 1, width


def labels_of(node: NodeDecl) -> tuple[str, ...]:
    return node.labels or ("main",)


def _per_label_tokens(model: Model, node: NodeDecl) -> int:
    declared = _int(dict(node.config).get("kv_tokens"))
    if declared:
        return declared
    total = 0
    loops = {lp.name: lp for w in model.walks for lp in w.loops}
    for w in model.walks:
        for c in w.calls:
            if c.node != node.name:
                continue
            tokens = 0
            for p in node.inputs:
                if all(b.port != p.name for b in c.reads) and not model.streams_into(
                    node.name, p.name
                ):
                    continue
                t = type_spec(p.type)
                lead = t.dims[0] if t is not None and t.dims else 1
                tokens = max(tokens, lead if isinstance(lead, int) else DYNAMIC_TOKENS)
            for name in c.loops:
                lp = loops.get(name)
                tokens *= max(1, lp.max if lp is not None and lp.max is not None else 1)
            total += tokens
    return max(1, total)


def pool_spec(model: Model, node: NodeDecl, kv: KvCacheSpec, tp: int, shared: bool) -> KvPoolSpec:
    """The pool of kv-cache node ``node`` on one rank of a group of ``tp`` shards."""
    owner_name = owner_of(model, node)
    owner = node if owner_name == node.name else (model.node(owner_name) or node)
    layers, heads, head_dim = geometry(model, owner)
    per_label = _per_label_tokens(model, owner)
    per_label = -(-per_label // kv.page_size) * kv.page_size  # every label rounds up to pages
    labels = (node.label,) if owner is not node and node.label else labels_of(node)
    return KvPoolSpec(
        owner=owner.name,
        labels=labels,
        layers=layers,
        kv_heads=-(-heads // max(1, tp)),
        head_dim=head_dim,
        page_size=kv.page_size,
        pages=kv.pages,
        dtype=kv.dtype,
        tokens_per_request=per_label * len(labels),
        shared=shared,
        writable=node.writable and owner is not node,
    )


def with_pools(
    model: Model, nodes: dict[int, list[NodeSpec]], kv: KvCacheSpec
) -> dict[int, list[NodeSpec]]:
    """Every rank's node specs, each kv-cache node with its pool (a copy on its owner's group
    marked ``shared``)."""
    groups: dict[str, set[tuple[int, ...]]] = {}
    for specs in nodes.values():
        for n in specs:
            groups.setdefault(n.name, set()).add(n.ranks)
    out: dict[int, list[NodeSpec]] = {}
    for r, specs in nodes.items():
        row = []
        for n in specs:
            decl = model.node(n.name)
            if decl is None or decl.engine is not EngineKind.KV_CACHE:
                row.append(n)
                continue
            owner = owner_of(model, decl)
            # the owner's pool here holds the request's labels only if the owner never runs
            # elsewhere: with walks on other groups its state moves, and a walk of the copy
            # may find it on another group (then the copy gets a pool and a `KvCopy`)
            shared = owner != n.name and groups.get(owner, set()) == {n.ranks}
            row.append(dataclasses.replace(n, kv=pool_spec(model, decl, kv, n.tp, shared)))
        out[r] = row
    return out


def budgets(nodes: Iterable[NodeSpec]) -> tuple[KvBudget, ...]:
    """One budget per pool of the deployment (per node and rank group; shared copies have
    none), in node order."""
    seen: dict[tuple[str, tuple[int, ...]], KvBudget] = {}
    for n in nodes:
        if n.kv is None or n.kv.shared:
            continue
        key = (n.name, n.ranks)
        if key not in seen:
            seen[key] = KvBudget(
                node=n.name,
                ranks=n.ranks,
                pages=n.kv.pages,
                pages_per_request=n.kv.pages_per_request,
            )
    return tuple(seen.values())


def copies(
    model: Model, walk_groups: dict[str, dict[str, tuple[int, ...]]], shared: set[str]
) -> dict[str, tuple[KvCopy, ...]]:
    """Walk -> the label copies due before it: every ``like X { label L }`` node the walk calls
    on a group of its own (not ``shared``), from the group running X (the first in walk
    order; the conductor uses wherever the request's X state lives)."""
    owner_group: dict[str, tuple[int, ...]] = {}
    for groups in walk_groups.values():
        for node, ranks in groups.items():
            owner_group.setdefault(node, ranks)
    out: dict[str, tuple[KvCopy, ...]] = {}
    for walk, groups in walk_groups.items():
        found = []
        for node, ranks in groups.items():
            decl = model.node(node)
            if decl is None or node in shared or decl.engine is not EngineKind.KV_CACHE:
                continue
            owner = owner_of(model, decl)
            if owner == node or owner not in owner_group or decl.label is None:
                continue
            found.append(
                KvCopy(
                    owner=owner,
                    label=decl.label,
                    from_ranks=owner_group[owner],
                    node=node,
                    to_ranks=ranks,
                )
            )
        if found:
            out[walk] = tuple(found)
    return out


def handoff_bytes(model: Model, pools: dict[str, KvPoolSpec]) -> dict[str, int]:
    """The bytes of one request's KV state, per kv-cache node whose cache declares its
    ``config kv_tokens`` (what a P/D handoff moves at most: every label at its admission bound,
    all heads, whatever the groups' tensor parallelism); a node without it is left out (its
    bound is the compiler's guess, so `wgc show` calls its handoff dynamic)."""
    out: dict[str, int] = {}
    for name, spec in pools.items():
        owner = model.node(spec.owner)
        if owner is None or not _int(dict(owner.config).get("kv_tokens")):
            continue
        layers, heads, head_dim = geometry(model, owner)
        per_token = 2 * layers * heads * head_dim * KV_ITEMSIZE.get(spec.dtype, 2)
        out[name] = spec.tokens_per_request * per_token
    return out


def copy_transfers(
    walk: str, found: Iterable[KvCopy], pools: dict[str, KvPoolSpec]
) -> list[Transfer]:
    """The cross-rank hops of a walk's label copies, with the bytes of one request's label
    (at its admission bound)."""
    out = []
    for cp in found:
        spec = pools.get(cp.node)
        if spec is None:
            continue
        itemsize = KV_ITEMSIZE.get(spec.dtype, 2)
        per_token = 2 * spec.layers * spec.kv_heads * spec.head_dim * itemsize
        nbytes = spec.tokens_per_request * per_token
        pairs = (
            zip(cp.from_ranks, cp.to_ranks, strict=True)
            if len(cp.from_ranks) == len(cp.to_ranks)
            else ((cp.from_ranks[0], dst) for dst in cp.to_ranks)
        )
        for src, dst in pairs:
            if src != dst:
                out.append(
                    Transfer(
                        walk=walk,
                        channel=f"kv:{cp.label}",
                        src_rank=src,
                        dst_rank=dst,
                        edge="kv_copy",
                        per="request",
                        loop=None,
                        nbytes=nbytes,
                        port=cp.owner,
                    )
                )
    return out
