"""`wgc show`: the text and json dumps, the drawing model, every renderer, and the command."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgc.cli import main
from wgc.config import Env
from wgc.driver import Driver
from wgc.ir.model import Model
from wgc.show import FORMATS, render
from wgc.show.graph import build_graph

ROOT = Path(__file__).resolve().parents[2]
_RUN_WGC = "from wgc.cli import main; main()"

SMALL = """\
model small
param n = 4
param steps = n * 2
type Item = f32[n]
node A: stateless {
  impl "m:A"
  in  x: Item
  out y: Item
}
node B: kv_cache {
  impl "m:B"
  in  y: Item
  in  h: Item
  out state: Item
  out done: bool[]
}
node C: stateless {
  impl "m:C"
  in  win: f32[32]
  out audio: f32[8]
}
stream ys: B.state -> C.win
  chunk sliding(window = 8, stride = 4)
  final drop
walk gen(x: Item, h: Item) {
  A(x) -> y
  loop steps_loop max steps until done {
    B(y, h) -> h = state, done
  } yield last h
  persist h
}
walk chunk() {
  C() -> audio
  emit audio as audio
}
flow main {
  for seg in request.inputs {
    gen(x = seg, h = seg)
  }
}
flow codec on ys {
  chunk()
}
"""

PAR = """\
model p
type V = f32[4]
node N: stateless {
  impl "m:N"
  in  a: V
  out b: V
}
node M: stateless {
  impl "m:M"
  in  l: V
  in  r: V
  out a: V
}
walk w(a?: V) {
  loop lp max 3 eager nospeculate {
    par {
      N(a) -> l = b
      N(a) -> r = b
    }
    M(l, r) -> a
  } yield all a
  emit a as tensor
}
flow main { w() }
"""


def _model(text: str, name: str = "small.walk") -> Model:
    result = Driver().front_end(name, text)
    assert not result.errors, [d.message for d in result.errors]
    assert result.model is not None
    return result.model


def _invoke(args: list[str]):
    return CliRunner().invoke(main, args, obj=Env())


@pytest.fixture
def small(tmp_path: Path) -> Path:
    path = tmp_path / "small.walk"
    path.write_text(SMALL)
    return path


# ---------------------------------------------------------------- text
def test_text_dump_shows_declarations_with_values() -> None:
    text = render(_model(SMALL), "text")
    assert "  steps = n * 2 = 8\n" in text
    assert "  Item = f32[n]\n" in text
    assert "  B: kv_cache(labels = [main])\n" in text
    assert "    in  h: Item = f32[n]\n" in text
    assert "  ys: B.state -> C.win\n    chunk sliding(window = 8, stride = 4)\n" in text
    assert "    final drop\n" in text


def test_text_dump_shows_statement_tree_and_edges() -> None:
    text = render(_model(SMALL), "text")
    assert "  #0 A(x <- x) -> y = y\n" in text
    assert "  loop steps_loop max steps = 8 until done {\n" in text
    assert "    #1 B(y <- y, h <- h) -> h = state, done = done\n" in text
    assert "  } yield last h\n" in text
    assert "      h: #1 B.state -> #1 B.h [loop steps_loop] : f32[n]\n" in text
    assert "    loop_invariant\n      y: #0 A.y -> #1 B.y [loop steps_loop]" in text
    assert "      ys: stream ys -> #0 C.win : f32[32]\n" in text
    assert "flow codec on ys {\n  chunk()\n}\n" in text


def test_text_dump_of_par_eager_and_yield_all() -> None:
    text = render(_model(PAR), "text")
    assert "loop lp max 3 eager nospeculate {" in text
    assert "    par {\n      #0 N(a <- a) -> l = b\n      #1 N(a <- a) -> r = b\n    }\n" in text
    assert "} yield all a" in text
    assert "accumulated\n      a: #2 M.a -> client tensor" not in text  # emit is its own kind
    assert "      a: #2 M.a -> client tensor [loop lp] : f32[3, 4]\n" in text
    assert "flow main {\n  w()\n}" in text


def test_walk_filter_prints_one_walk() -> None:
    text = render(_model(SMALL), "text", "chunk")
    assert "walk chunk()" in text
    assert "walk gen" not in text and "flow " not in text


# ---------------------------------------------------------------- json
def test_json_is_versioned_sorted_and_complete() -> None:
    out = render(_model(SMALL), "json")
    doc = json.loads(out)
    assert doc["version"] == 1
    assert out == json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    assert [w["name"] for w in doc["walks"]] == ["gen", "chunk"]
    gen = doc["walks"][0]
    assert gen["body"][1] == {
        "stmt": "loop",
        "name": "steps_loop",
        "body": [{"stmt": "call", "id": 1}],
    }
    carried = [e for e in gen["edges"] if e["kind"] == "loop_carried"]
    assert carried[0]["src"] == {"kind": "call", "call": 1, "port": "state", "name": None}
    assert re.fullmatch(r"small\.walk:\d+:\d+", gen["span"])
    assert doc["streams"][0]["policy"]["text"] == "sliding(window = 8, stride = 4)"
    assert doc["params"][1] == {
        "name": "steps",
        "expr": "n * 2",
        "value": 8,
        "span": "small.walk:3:1",
    }


def test_json_walk_filter() -> None:
    doc = json.loads(render(_model(SMALL), "json", "gen"))
    assert doc["walk"] == "gen"
    assert [w["name"] for w in doc["walks"]] == ["gen"]
    assert doc["flows"] == []


# ---------------------------------------------------------------- the drawing model
def test_graph_clusters_nodes_and_hubs() -> None:
    g = build_graph(_model(SMALL))
    assert [(c.id, c.kind, c.parent) for c in g.clusters] == [
        ("cw_gen", "walk", None),
        ("cl_gen_steps_loop", "loop", "cw_gen"),
        ("cw_chunk", "walk", None),
    ]
    assert g.clusters[1].label == "loop steps_loop max 8 until done · yield last h"
    hubs = [(n.id, n.sub) for n in g.nodes if n.cluster is None]
    assert hubs == [("s_ys", "sliding(8, 4)"), ("client", ""), ("persisted", "")]
    kinds = {(e.src, e.dst): (e.kind, e.label) for e in g.edges}
    assert kinds[("w_gen_c1", "w_gen_c1")] == ("loop_carried", "h")
    assert kinds[("w_gen_c1", "s_ys")] == ("streamed", "state")
    assert kinds[("s_ys", "w_chunk_c0")] == ("streamed", "win")
    assert kinds[("w_chunk_c0", "client")] == ("emitted", "audio")
    assert kinds[("w_gen_c1", "persisted")] == ("persisted", "h")


def test_graph_merges_parallel_edges_and_groups_par() -> None:
    g = build_graph(_model(PAR))
    assert [c.kind for c in g.clusters] == ["walk", "loop", "par"]
    carried = [e for e in g.edges if e.kind == "loop_carried"]
    # M carries `a` back to both N calls: one edge per target, never one per binding
    assert sorted((e.src, e.dst) for e in carried) == [("w_w_c2", "w_w_c0"), ("w_w_c2", "w_w_c1")]


# ---------------------------------------------------------------- renderers
def test_dot_is_graphviz_source() -> None:
    dot = render(_model(SMALL), "dot")
    assert dot.startswith('digraph "small" {')
    assert dot.count("{") == dot.count("}")
    assert 'subgraph "cluster_cl_gen_steps_loop"' in dot
    assert 'label="loop steps_loop max 8 until done · yield last h"' in dot
    back = [line for line in dot.splitlines() if '"w_gen_c1" -> "w_gen_c1"' in line]
    assert len(back) == 1 and back[0].endswith("style=dashed, constraint=false];")
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_mermaid_is_a_flowchart() -> None:
    text = render(_model(PAR), "mermaid")
    assert text.startswith("flowchart LR\n")
    assert text.count("subgraph ") == text.count("\n  end\n") + text.count(
        "\n    end\n"
    ) + text.count("\n      end\n")
    assert '["N<br/>#35;0"]' in text  # `#` is Mermaid's entity marker
    assert "-.->" in text and "linkStyle" in text


def test_html_is_self_contained() -> None:
    page = render(_model(SMALL), "html")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page and "<link" not in page and "@import" not in page
    # the only URL is the SVG namespace, which browsers never fetch
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
    assert 'id="walk-gen"' in page and 'href="#walk-gen"' in page
    assert "loop steps_loop max 8 until done" in page
    assert 'marker-end="url(#arrow-loop_carried)"' in page


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_every_example(fmt: str) -> None:
    examples = sorted((ROOT / "wgc_models").glob("**/*.walk"))
    if not examples:
        pytest.skip("no examples yet")
    driver = Driver()
    for path in examples:
        result = driver.front_end(str(path))
        assert result.model is not None and not result.errors, path
        assert render(result.model, fmt)
        for w in result.model.walks:
            assert render(result.model, fmt, w.name)


# ---------------------------------------------------------------- the command
def test_show_prints_text_by_default(small: Path) -> None:
    result = _invoke(["show", str(small)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("model small  # ")
    assert result.stderr == ""


def test_show_writes_output_file(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "small.html"
    result = _invoke(["show", str(small), "--format", "html", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert result.stdout == ""


def test_show_unknown_walk_suggests(small: Path) -> None:
    result = _invoke(["show", str(small), "--walk", "chunks"])
    assert result.exit_code == 1
    assert "no walk named `chunks`" in result.stderr
    assert "did you mean `chunk`?" in result.stderr


def test_show_errors_stop_with_diagnostics(tmp_path: Path) -> None:
    bad = tmp_path / "bad.walk"
    bad.write_text(SMALL.replace("A(x) -> y", "A(x) -> y\n  Nope(y)"))
    result = _invoke(["show", str(bad)])
    assert result.exit_code == 1
    assert "error[" in result.stderr
    assert result.stdout == ""


def test_show_warnings_do_not_stop(tmp_path: Path) -> None:
    warned = tmp_path / "warned.walk"
    warned.write_text(SMALL.replace("param n = 4\n", "param n = 4\nparam unused_param = 1\n"))
    result = _invoke(["show", str(warned), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "warning[" in result.stderr
    assert json.loads(result.stdout)["version"] == 1


def test_show_missing_file() -> None:
    result = _invoke(["show", "no/such.walk"])
    assert result.exit_code == 1
    assert "no such file" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "html", "dot", "text"])
def test_output_is_independent_of_hash_seed(small: Path, fmt: str) -> None:
    # Qwen3-Omni has streams, loops and several flows: the most ordering to get wrong
    example = ROOT / "wgc_models" / "qwen3_omni" / "qwen3_omni.walk"
    path = example if example.exists() else small
    outs = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", _RUN_WGC, "show", str(path), "--format", fmt],
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        )
        outs.append(done.stdout)
    assert outs[0] == outs[1]
    assert outs[0]
