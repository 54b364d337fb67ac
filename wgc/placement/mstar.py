"""M*'s placement format, read as its configs are written (`wgc.placement.load` detects it).

Top level: `node_groups` (groups of `node_names` on `ranks`, optional `graph_walks`, `tp_size`,
`sp_size`, `residency`), `max_concurrent_requests`, `kv_cache` (`max_num_pages`, `page_size`;
`cpu_offload_pages` and `flashinfer_backend` are read and not used), `resources` (`kv`:
`page_size`, `max_num_pages`, `max_seq_len`; `attn`: `backend`; `gpu_memory_utilization`),
`rank_devices` (rank -> GPU index or device, a list or a mapping: several workers may share one
GPU), `sp_size` (the groups' default sequence-parallel size), the speculative-decoding keys
`speculative_tokens`, `speculative_schedule`, `speculative_draft` and `model_kwargs` (the model
constructors' arguments): each of those scalars sets the model's `param` of the same name when
the model declares one (so its nodes get it through `config k = speculative_tokens`), and is
ignored otherwise (a list or mapping value is recorded as ignored); and keys wgc reads but does
not use: `model`, `max_seq_len`; and `sessions` (`wgc.placement.sessions`). Keys read
and not used are recorded in `Placement.ignored_keys`.

M* names devices only through `rank_devices`: without it the world size is the largest rank + 1
and rank i runs on `auto:i`; with it every rank a group uses needs an entry (WG809). Nodes no
group names run on rank 0, M*'s driver rank. Where a setting here is also in `resources.kv`, the
`resources` one wins.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from wgc.diagnostics.diagnostic import Label, Span
from wgc.placement import sessions
from wgc.placement.model import Batching, Group, KvCache, ParamOverride, Placement
from wgc.placement.yamlnodes import kind, scalar, span

if TYPE_CHECKING:
    from wgc.placement.load import Entries, _Loader

KV = ("cpu_offload_pages", "flashinfer_backend", "max_num_pages", "page_size")
KV_IGNORED = ("cpu_offload_pages", "flashinfer_backend")
RESOURCES = ("kv", "attn", "gpu_memory_utilization")
RES_KV = ("max_seq_len", "page_size", "max_num_pages")
ATTN = ("backend",)
IGNORED_TOP = ("model", "max_seq_len")
SPECULATIVE = ("speculative_tokens", "speculative_schedule", "speculative_draft")


def load(r: _Loader, root: yaml.Node, top: Entries) -> Placement:
    for name in IGNORED_TOP:
        if name in top:
            r.ignored.append(name)
    r.default_sp = _sp_default(r, top.get("sp_size"))
    groups = r.groups(top.get("node_groups"), "node_groups")
    world = max((r_ for g in groups for r_ in g.ranks), default=0) + 1
    devices = _rank_devices(r, top.get("rank_devices"), groups, world)
    res = _resources(r, top.get("resources"))
    kv = _kv(r, top.get("kv_cache"), res.get("kv"))
    return Placement(
        name=Path(r.file).stem,
        file=r.file,
        format="mstar",
        devices=devices,
        hosts=(),
        groups=groups,
        kv_cache=kv,
        batching=Batching(),
        params=_model_params(r, top),
        max_concurrent_requests=r.max_concurrent(top.get("max_concurrent_requests")),
        attention=_attention(r, res.get("attn")),
        sessions=sessions.read(r, top.get("sessions")),
        span=span(r.file, root),
        default_ranks=(0,),
        groups_span=r.key_span(top.get("node_groups")),
        ignored_keys=tuple(r.ignored),
    )


def _model_params(r: _Loader, top: Entries) -> tuple[ParamOverride, ...]:
    """The speculative keys and `model_kwargs` entries as optional param overrides."""
    entries: list[tuple[str, str, yaml.Node, yaml.Node]] = []
    for name in SPECULATIVE:
        if name in top:
            k, v = top[name]
            entries.append((name, name, k, v))
    kwargs = top.get("model_kwargs")
    if kwargs is not None and r.map_(kwargs[1], "`model_kwargs`"):
        for k, v in kwargs[1].value:
            name = r.str_(k, "a `model_kwargs` key")
            if name is not None:
                entries.append((name, f"model_kwargs.{name}", k, v))
    out: list[ParamOverride] = []
    seen: set[str] = set()
    for name, where, k, v in entries:
        if name in seen or kind(v) not in ("int", "float", "bool", "str"):
            r.ignored.append(where)  # a list, a mapping, or a kwarg a speculative key sets
            continue
        seen.add(name)
        value = scalar(v)
        assert isinstance(value, int | float | str)  # what those kinds construct to
        out.append(ParamOverride(name, value, span(r.file, k), span(r.file, v), optional=True))
    return tuple(out)


def _sp_default(r: _Loader, entry) -> int:
    if entry is None:
        return 1
    node = entry[1]
    sp = r.int_(node, "`sp_size`")
    if sp is None:
        return 1
    if sp < 1:
        r.error(
            "WG822",
            f"`sp_size` is {sp}: a sequence-parallel size is at least 1",
            span(r.file, node),
            label="not a size",
            help="use `sp_size: 1` for no sequence parallelism",
        )
        return 1
    return sp


def _rank_devices(r: _Loader, entry, groups: tuple[Group, ...], world: int) -> tuple[str, ...]:
    """Rank -> device from `rank_devices` (a list by rank, or a mapping), `auto:i` without."""
    if entry is None:
        return tuple(f"auto:{i}" for i in range(world))
    key, node = entry
    given: dict[int, str] = {}
    if isinstance(node, yaml.SequenceNode):
        pairs = [(i, item, item) for i, item in enumerate(node.value)]
    elif r.map_(node, "`rank_devices`"):
        pairs = []
        for k, v in node.value:
            rank = r.int_(k, "a `rank_devices` key (a rank)")
            if rank is not None and r.rank_in_range(rank, span(r.file, k)):
                pairs.append((rank, v, k))
    else:
        return tuple(f"auto:{i}" for i in range(world))
    for rank, value, where in pairs:
        if rank in given:
            r.error("WG805", f"rank {rank} appears twice in `rank_devices`", span(r.file, where))
            continue
        device = _device(r, value)
        if device is not None:
            given[rank] = device
    size = max([world, *(k + 1 for k in given)])
    for g in groups:
        for rank, s in zip(g.ranks, g.rank_spans, strict=True):
            if rank not in given:
                r.rank_trouble = True
                r.error(
                    "WG809",
                    f"rank {rank} has no device: `rank_devices` does not list it",
                    s,
                    label="no device for this rank",
                    labels=[Label(span(r.file, key), "devices listed here")],
                    help=f"add rank {rank} to `rank_devices` (a GPU index, e.g. `{rank}: 0`)",
                )
    return tuple(given.get(i, f"auto:{i}") for i in range(size))


def _device(r: _Loader, node: yaml.Node) -> str | None:
    """A GPU index (several ranks may share one) or a device name."""
    if kind(node) == "int":
        index = scalar(node)
        assert isinstance(index, int)
        if index < 0:
            r.error(
                "WG818",
                f"GPU index {index} is negative",
                span(r.file, node),
                label="not a GPU",
                help="GPUs count from 0",
            )
            return None
        return f"auto:{index}"
    name = r.str_(node, "a device")
    if name is None:
        return None
    if not r.is_device(name):
        r.bad_device(node, name)
        return None
    return name


def _resources(r: _Loader, entry) -> Entries:
    if entry is None:
        return {}
    _, node = entry
    if not r.map_(node, "`resources`"):
        return {}
    e = r.keys(node, RESOURCES, (), "in `resources`")
    if "gpu_memory_utilization" in e:
        value = e["gpu_memory_utilization"][1]
        got = scalar(value)
        if (
            kind(value) not in ("int", "float")
            or isinstance(got, bool)
            or not isinstance(got, int | float)
            or not (math.isfinite(got) and 0 < got <= 1)
        ):
            r.error(
                "WG817",
                "`gpu_memory_utilization` must be a fraction in (0, 1]",
                span(r.file, value),
                label="not a fraction",
                help="the share of each GPU's memory the deployment may use, e.g. `0.9`",
            )
        r.ignored.append("resources.gpu_memory_utilization")
    return e


def _kv(r: _Loader, kv_entry, res_kv) -> KvCache:
    page_size = pages = None
    where: Span | None = None
    if kv_entry is not None and r.map_(kv_entry[1], "`kv_cache`"):
        e = r.keys(kv_entry[1], KV, r.wgc_kv_keys, "in `kv_cache`")
        r.ignored.extend(f"kv_cache.{k}" for k in KV_IGNORED if k in e)
        page_size = r.positive(e.get("page_size"), "`page_size`", "WG817")
        pages = r.positive(e.get("max_num_pages"), "`max_num_pages`", "WG817")
        where = span(r.file, kv_entry[1])
    if res_kv is not None and r.map_(res_kv[1], "`resources.kv`"):
        e = r.keys(res_kv[1], RES_KV, (), "in `resources.kv`")
        if "max_seq_len" in e:
            r.ignored.append("resources.kv.max_seq_len")
        page_size = r.positive(e.get("page_size"), "`page_size`", "WG817") or page_size
        pages = r.positive(e.get("max_num_pages"), "`max_num_pages`", "WG817") or pages
        where = span(r.file, res_kv[1])
    default = KvCache()
    if where is None:
        return default
    return KvCache(
        page_size=page_size or default.page_size, pages=pages or default.pages, span=where
    )


def _attention(r: _Loader, attn) -> str:
    if attn is None:
        return "auto"
    _, node = attn
    if not r.map_(node, "`resources.attn`"):
        return "auto"
    e = r.keys(node, ATTN, (), "in `resources.attn`")
    return r.attention(e.get("backend"))
