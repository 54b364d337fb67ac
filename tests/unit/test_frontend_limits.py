"""The front end's nesting limits (issue 14, point 6): past them a code, at them no RecursionError.

WG012 (`wgc.parse.depth`) bounds statement and expression nesting on the parse tree; WG708
(`wgc.ir.subflows`) bounds flows once subflows are expanded, Python's 20 nested loops included.
At the limits every stage (check, fmt, show in each format, compile) must run in a stack far
smaller than Python's default: that is what makes the limits safe.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgc.cli import main
from wgc.config import Env
from wgc.driver import Driver
from wgc.parse.depth import MAX_BLOCKS, MAX_EXPR
from wgc.parse.parser import Parser

HEAD = (
    "model deep\n\nparam p = {expr}\n\nnode A: stateless {{\n"
    '  impl "m:A"\n  in  x: f32[4]\n  out x: f32[4]\n  config k = p\n}}\n\n'
)
WALK = "walk w(x?: f32[4]) {\n  A(x) -> y = x\n  emit y as tensor\n}\n\n"
PLACEMENT = "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"
# frames the checks may use above the test's own stack: well under Python's default of 1,000
HEADROOM = 450


def _sum(operators: int) -> str:
    return " + ".join(["1"] * (operators + 1))


def nested_loops(depth: int, operators: int = 1) -> str:
    opens = "".join(f"loop l{i} max {_sum(operators)} {{\n" for i in range(depth))
    body = "A(x) -> y = x\nemit y as tensor\n"
    return (
        HEAD.format(expr=_sum(operators))
        + f"walk w(x?: f32[4]) {{\n{opens}{body}{'}' * depth}\n}}\n\nflow main {{ w() }}\n"
    )


def nested_flow(loops: int, ifs: int, operators: int = 1) -> str:
    opens = [f"repeat {_sum(operators)} {{"] * loops + ["if not option.o or true {"] * ifs
    return (
        HEAD.format(expr=_sum(operators)).replace("\n\nnode", "\n\noption o: bool = true\n\nnode")
        + WALK
        + "flow main {\n"
        + "\n".join(opens)
        + "\nw()\n"
        + "}" * (loops + ifs)
        + "\n}\n"
    )


def codes(text: str) -> set[str]:
    return {d.code for d in Driver().front_end("deep.walk", text).diagnostics}


def test_statements_nest_up_to_the_limit():
    assert "WG012" not in codes(nested_loops(MAX_BLOCKS))
    assert codes(nested_loops(MAX_BLOCKS + 1)) == {"WG012"}


def test_expressions_nest_up_to_the_limit():
    assert "WG012" not in codes(nested_loops(1, MAX_EXPR))
    parsed = Parser().parse(nested_loops(1, MAX_EXPR + 1), "deep.walk")
    assert parsed.tree is None and [d.code for d in parsed.diagnostics] == ["WG012"]
    assert parsed.diagnostics[0].span.line == 3  # the param, the first expression too deep


@pytest.mark.parametrize("depth", [5_000])
def test_far_past_the_limit_is_one_diagnostic(depth: int):
    assert codes(nested_loops(depth)) == {"WG012"}
    assert codes("model m\nparam p = " + "- " * depth + "1\n") == {"WG012"}


def test_flow_loops_up_to_pythons_limit():
    assert not codes(nested_flow(20, 12)) & {"WG012", "WG708"}
    found = codes(nested_flow(21, 0))  # with WG701 and WG906: the innermost call is dropped
    assert "WG708" in found and "WG012" not in found, found


def test_subflow_chains_are_bounded():
    chain = "".join(f"subflow s{i}() {{\n  s{i + 1}()\n}}\n" for i in range(MAX_BLOCKS + 5))
    text = HEAD.format(expr="1") + WALK + chain + f"subflow s{MAX_BLOCKS + 5}() {{ w() }}\n"
    assert codes(text + "flow main {\n  w()\n  s0()\n}\n") == {"WG708"}
    # each calling the next twice: 2^40 statements if nothing stopped it
    doubling = "".join(f"subflow d{i}() {{\n  d{i + 1}()\n  d{i + 1}()\n}}\n" for i in range(30))
    text = HEAD.format(expr="1") + WALK + doubling + "subflow d30() { w() }\n"
    assert codes(text + "flow main {\n  w()\n  d0()\n}\n") == {"WG708"}


def _frames() -> int:
    n, frame = 0, sys._getframe()
    while frame is not None:
        n, frame = n + 1, frame.f_back
    return n


@pytest.mark.parametrize(
    "text",
    [
        nested_loops(MAX_BLOCKS, MAX_EXPR),
        nested_flow(20, MAX_BLOCKS - 20, MAX_EXPR),
    ],
    ids=["walk", "flow"],
)
def test_every_command_fits_a_small_stack_at_the_limits(text: str, tmp_path: Path):
    walk = tmp_path / "deep.walk"
    walk.write_text(text, encoding="utf-8")
    placement = tmp_path / "p.yaml"
    placement.write_text(PLACEMENT, encoding="utf-8")
    commands = [
        ["check", str(walk)],
        ["fmt", "--check", str(walk)],
        ["show", str(walk)],
        *(["show", "--format", f, str(walk)] for f in ("json", "dot", "mermaid", "html")),
        ["show", "-p", str(placement), "--format", "html", str(walk)],
        ["compile", "-p", str(placement), "-o", str(tmp_path / "gen"), str(walk)],
    ]
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(_frames() + HEADROOM)
        results = [CliRunner().invoke(main, args, obj=Env()) for args in commands]
    finally:
        sys.setrecursionlimit(old)
    for args, res in zip(commands, results, strict=True):
        assert res.exit_code in (0, 1), (args[0], res.exit_code, res.output[-2000:])
        assert not isinstance(res.exception, RecursionError), args
    assert results[0].exit_code == 0, results[0].output
    assert results[-1].exit_code == 0, results[-1].output


# ------------------------------------------------------------------ placements
def _placement_codes(text: str) -> set[str]:
    from wgc.placement.load import load

    return {d.code for d in load("p.yaml", text)[1]}


@pytest.mark.parametrize("depth", [32, 33, 100_000])
def test_yaml_nesting_is_bounded_before_composing(depth: int):
    ranks = "[" * (depth - 3) + "0" + "]" * (depth - 3)  # the top mapping, `place`, a group
    text = f"devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: {ranks}\n"
    found = _placement_codes(text)
    assert ("WG824" in found) == (depth > 32), found
    assert found <= {"WG803", "WG824"}, found


@pytest.mark.parametrize(
    "text",
    [
        "node_groups:\n  - node_names: [A]\n    ranks: [16384]\n",
        "node_groups:\n  - node_names: [A]\n    ranks: [99999999999999999999]\n",
        "node_groups:\n  - node_names: [A]\n    ranks: [0]\nrank_devices: {1000000000000: 0}\n",
        "place:\n  - nodes: [A]\n    ranks: [1000000000000]\n",
    ],
)
def test_ranks_are_bounded_before_anything_is_built_per_rank(text: str):
    found = _placement_codes(text)
    assert found & {"WG809", "WG803"}, found
    ok = "node_groups:\n  - node_names: [A]\n    ranks: [16383]\n"
    assert not _placement_codes(ok) & {"WG809", "WG803"}


def test_a_huge_file_is_refused_before_it_is_lexed():
    from wgc.parse.parser import MAX_SOURCE_CHARS
    from wgc.placement.load import load

    text = "model m\n" + "#" * MAX_SOURCE_CHARS + "\n"
    assert codes(text) == {"WG010"}
    assert [d.code for d in load("p.yaml", text)[1]] == ["WG010"]
    assert "WG010" not in codes("model m\n" + "#" * (MAX_SOURCE_CHARS - 100) + "\n")


@pytest.mark.parametrize(("n", "refused"), [(256, False), (257, True), (100_000, True)])
def test_capture_lists_are_bounded(n: int, refused: bool):
    # issue 34: 100,000 capture sizes were read (and captured) one by one
    from wgc.placement.load import load

    sizes = ", ".join(str(b) for b in range(1, n + 1))
    text = (
        "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"
        f"batching: {{max_batch: {n}, capture: [{sizes}]}}\n"
    )
    diags = [d for d in load("p.yaml", text)[1] if d.code == "WG816"]
    assert bool(diags) == refused, diags
    if refused:
        assert len(diags) == 1 and f"{n:,} capture buckets: at most 256" in diags[0].message
