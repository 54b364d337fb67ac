"""Where a model's names are written in its placement files.

A placement names nodes in its groups' `nodes:` lists (M*'s format: `node_groups`' `nodes:`),
walks in their `walks:` lists and as the keys of `on_restart:`, and params as the keys of
`params:`. These are found on the YAML
node graph (PyYAML's composer keeps every scalar's position), so a node called `cpu` is never
confused with the device `cpu`. Rename and find-references use them; completion of placement keys
reads the loader's own key tables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

from wgc.placement.groups import GROUP
from wgc.placement.load import BATCHING, KV, TOP

_LIST_KINDS = {"nodes": "node", "node_names": "node", "walks": "walk", "graph_walks": "walk"}


@dataclass(frozen=True, slots=True)
class YamlName:
    kind: str  # "node", "walk", "param"
    name: str
    line: int  # 0-based
    start: int
    end: int


def names_in(text: str) -> list[YamlName]:
    """Every node, walk and param name written in the placement ``text`` (none if unreadable)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    out: list[YamlName] = []
    _visit(root, out)
    return out


def _scalar(node: yaml.Node, kind: str, out: list[YamlName]) -> None:
    if isinstance(node, yaml.ScalarNode) and node.start_mark.line == node.end_mark.line:
        out.append(
            YamlName(
                kind, node.value, node.start_mark.line, node.start_mark.column, node.end_mark.column
            )
        )


def _visit(node: yaml.Node | None, out: list[YamlName]) -> None:
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _visit(item, out)
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            k = key.value if isinstance(key, yaml.ScalarNode) else None
            if k in _LIST_KINDS and isinstance(value, yaml.SequenceNode):
                for item in value.value:
                    _scalar(item, _LIST_KINDS[k], out)
            elif k == "params" and isinstance(value, yaml.MappingNode):
                for pkey, _ in value.value:
                    _scalar(pkey, "param", out)
            elif k == "on_restart" and isinstance(value, yaml.MappingNode):
                for wkey, _ in value.value:
                    if getattr(wkey, "value", None) != "default":
                        _scalar(wkey, "walk", out)
            else:
                _visit(value, out)


def placements_of(model_path: str) -> list[str]:
    """The placement files paired with ``model_path`` by the folder convention."""
    folder = Path(model_path).parent / "placements"
    if not folder.is_dir() or len(list(Path(model_path).parent.glob("*.walk"))) != 1:
        return []
    return sorted(os.path.normpath(p) for p in folder.iterdir() if p.suffix in (".yaml", ".yml"))


def placement_keys(path: list[str]) -> tuple[str, ...]:
    """The keys a placement accepts in the mapping at ``path`` (keys from the top)."""
    if not path:
        return TOP["wgc"]
    if path[-1] == "kv_cache":
        return KV["wgc"]
    if path[-1] == "batching":
        return BATCHING
    if path[-1] in ("place", "node_groups"):
        return GROUP["wgc"]
    return ()
