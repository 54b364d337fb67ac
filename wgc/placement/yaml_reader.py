"""Reading YAML values for the placement loader, with every problem a diagnostic: known keys
(unknown ones with a did-you-mean, the other format's with its spelling, duplicates), integers,
names, lists, mappings and choices. `wgc.placement.load` builds on `YamlReader`."""

from __future__ import annotations

from typing import TypeGuard

import yaml

from wgc.diagnostics.diagnostic import Diagnostic, Label, Span, diag
from wgc.diagnostics.suggest import closest
from wgc.ir.expr import in_range
from wgc.placement.yamlnodes import describe, kind, scalar, span

Entries = dict[str, tuple[yaml.Node, yaml.Node]]

FORMAT_NAME = {"wgc": "wgc's", "mstar": "M*'s"}
# The other format's spelling of a key, for "write `x` instead" help lines.
EQUIVALENT = {
    "node_groups": "place",
    "node_names": "nodes",
    "graph_walks": "walks",
    "tp_size": "tp",
    "sp_size": "sp",
    "place": "node_groups",
    "nodes": "node_names",
    "walks": "graph_walks",
    "tp": "tp_size",
    "sp": "sp_size",
}
_LIST_EXAMPLES = {
    "ranks": "[0]",
    "nodes": "[LLM]",
    "node_names": "[LLM]",
    "devices": "[cpu]",
    "capture": "[1, 2, 4, 8]",
    "place": "[{nodes: [LLM], ranks: [0]}]",
    "node_groups": "[{node_names: [LLM], ranks: [0]}]",
}


def other(fmt: str) -> str:
    return "mstar" if fmt == "wgc" else "wgc"


class YamlReader:
    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.text = text
        self.diags: list[Diagnostic] = []
        self.format = "wgc"
        self.deciding: yaml.Node | None = None  # the key that chose the format

    def choice(self, entry, what: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` (the first, ``auto``, when absent or wrong: reported)."""
        if entry is None:
            return choices[0]
        node = entry[1]
        name = self.str_(node, what)
        if name is None:
            return choices[0]
        if name not in choices:
            self.choice_error(node, name, what.removeprefix("an ").removeprefix("a "), choices)
            return choices[0]
        return name

    def choice_error(self, node: yaml.Node, got: str, what: str, choices) -> None:
        close = closest(got, choices)
        hint = f"did you mean `{close}`? " if close else ""
        self.error(
            "WG817",
            f"`{got}` is not a valid {what}",
            span(self.file, node),
            label="unknown value",
            help=f"{hint}expected one of {', '.join(f'`{c}`' for c in choices)}",
        )

    # ------------------------------------------------------------------ values
    def keys(self, node: yaml.MappingNode, own, other, where: str) -> Entries:
        """The known keys of ``node``; unknown, duplicate and other-format keys are reported."""
        out: Entries = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                self.wrong(k, "a key", "a name")
                continue
            name = str(k.value)
            if name in out:
                self.duplicate(k, out[name][0], f"key `{name}`")
            elif name in own:
                out[name] = (k, v)
            elif name in other:
                self.mixed(k, name)
            else:
                self.unknown_key(k, name, own, where)
        return out

    def unknown_key(self, k: yaml.Node, name: str, own, where: str) -> None:
        close = closest(name, own)
        known = ", ".join(f"`{o}`" for o in own)
        self.error(
            "WG802",
            f"unknown key `{name}` {where}",
            span(self.file, k),
            label="unknown key",
            help=f"did you mean `{close}`?" if close else f"the keys here are {known}",
        )

    def mixed(self, k: yaml.Node, name: str) -> None:
        ours, theirs = FORMAT_NAME[self.format], FORMAT_NAME[other(self.format)]
        labels = []
        if self.deciding is not None:
            labels.append(
                Label(span(self.file, self.deciding), f"this key makes the file {ours} format")
            )
        instead = EQUIVALENT.get(name)
        fix = f"write `{instead}` here" if instead else "remove it"
        self.error(
            "WG806",
            f"`{name}` is a key of {theirs} placement format, but this file uses {ours}",
            span(self.file, k),
            label=f"{theirs} key",
            labels=labels,
            help=f"use one format per file: {fix}, or convert the whole file",
        )

    def duplicate(self, k: yaml.Node, first: yaml.Node, what: str) -> None:
        self.error(
            "WG805",
            f"{what} is given twice",
            span(self.file, k),
            label="given again",
            labels=[Label(span(self.file, first), "first given here")],
            help="keep one of them (YAML would silently use the last)",
        )

    def positive(self, entry, what: str, code: str) -> int | None:
        if entry is None:
            return None
        node = entry[1]
        value = self.int_(node, what)
        if value is None:
            return None
        if value < 1:
            self.error(
                code,
                f"{what} must be positive, found {value}",
                span(self.file, node),
                label="not positive",
                help=f"set {what} to 1 or more",
            )
            return None
        return value

    def int_(self, node: yaml.Node, what: str) -> int | None:
        value = scalar(node)
        if kind(node) != "int" or not isinstance(value, int):
            self.wrong(node, what, "an integer")
            return None
        if not in_range(value):
            self.error(
                "WG803",
                f"{what} does not fit in a 64-bit integer",
                span(self.file, node),
                label="too large",
                help="placement integers are 64-bit (-2^63 to 2^63 - 1)",
            )
            return None
        return value

    def str_(self, node: yaml.Node, what: str) -> str | None:
        if isinstance(node, yaml.ScalarNode) and kind(node) != "null":
            return str(node.value)
        self.wrong(node, what, "a name")
        return None

    def list_(self, node: yaml.Node, what: str) -> list[yaml.Node] | None:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        key = what.strip("`")
        example = _LIST_EXAMPLES.get(key, "[a, b]")
        self.wrong(node, what, "a list", f"write a list, e.g. `{key}: {example}`")
        return None

    def map_(self, node: yaml.Node, what: str) -> TypeGuard[yaml.MappingNode]:
        if isinstance(node, yaml.MappingNode):
            return True
        self.wrong(node, what, "a mapping", "write `key: value` lines indented under it")
        return False

    def wrong(self, node: yaml.Node, what: str, expected: str, help: str | None = None) -> None:
        self.error(
            "WG803",
            f"{what} must be {expected}, found {describe(node)}",
            span(self.file, node),
            label=f"expected {expected}",
            help=help,
        )

    def key_span(self, entry) -> Span | None:
        return span(self.file, entry[0]) if entry is not None else None

    def value_span(self, entry) -> Span:
        return span(self.file, entry[1]) if entry is not None else Span(self.file, 1, 1, 1, 2)

    def error(self, code: str, message: str, where: Span, **kw) -> None:
        self.diags.append(diag(code, message, where, **kw))
