"""`wgc fmt`: the canonical layout, comment placement, the IR and idempotency invariants on the
examples, and the command line (`--check`, `--diff`, syntax errors, atomic writes)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgc.cli import main
from wgc.config import Env
from wgc.driver import Driver
from wgc.fmt import format_source
from wgc.parse.parser import Parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "wgc_models").glob("*/*.walk"))
PARSER = Parser()
DRIVER = Driver()


def fmt(text: str) -> str:
    out = format_source(text, "t.walk", PARSER).text
    assert out is not None
    return out


def model(text: str):
    return DRIVER.front_end("t.walk", text, verify=False).model


def check_invariants(text: str) -> str:
    out = fmt(text)
    assert fmt(out) == out, "not idempotent"
    assert model(out) == model(text), "IR changed"
    before = Counter(c.text for c in PARSER.parse(text, "t.walk").comments)
    assert Counter(c.text for c in PARSER.parse(out, "t.walk").comments) == before
    return out


# ---------------------------------------------------------------------- layout
def test_declarations_blank_lines_and_groups() -> None:
    src = (
        "model m\nparam a=1\nparam b = 2\n\n\n\nparam c = a*(b+1)\ntype T=f32[a,?]\n"
        "node N: stateless { in x:T out long_name : i64[] }"
    )
    assert check_invariants(src) == (
        "model m\n\nparam a = 1\nparam b = 2\n\nparam c = a * (b + 1)\n\ntype T = f32[a, ?]\n\n"
        "node N: stateless {\n  in  x:         T\n  out long_name: i64[]\n}\n"
    )


def test_one_line_blocks_stay_when_written_so() -> None:
    src = "node B: like A { label l }\nnode C: like A { label m }\nnode D: like A {\nlabel n }\n"
    assert check_invariants(src) == (
        "node B: like A { label l }\nnode C: like A { label m }\n\nnode D: like A {\n  label n\n}\n"
    )


def test_calls_bindings_and_par() -> None:
    src = (
        "walk w(a?: T, b) { par { A(a=a, b = c)->x=y, z { B() C() } {D(a)} }"
        " emit x as text persist a,b }"
    )
    assert check_invariants(src) == (
        "walk w(a?: T, b) {\n"
        "  par {\n"
        "    A(a, b = c) -> x = y, z\n"
        "    {\n      B()\n      C()\n    }\n"
        "    D(a)\n"
        "  }\n"
        "  emit x as text\n"
        "  persist a, b\n"
        "}\n"
    )


def test_par_aligns_arrows() -> None:
    src = "walk w() { par { A(x) -> y  LongName(x) -> z } }"
    assert "    A(x)        -> y\n    LongName(x) -> z\n" in check_invariants(src)


def test_loop_modifiers_and_yields() -> None:
    src = (
        "walk w() { loop l max n+1 nospeculate until s eager { A() }"
        " yield all c yield last a yield last b }"
    )
    assert check_invariants(src) == (
        "walk w() {\n  loop l max n + 1 until s eager nospeculate {\n    A()\n"
        "  } yield last a, b yield all c\n}\n"
    )


def test_flows() -> None:
    src = (
        "flow f when request.wants(text) or (option.x and not placed(A)) {\n"
        "for s in request.inputs { match s.modality { text => w(a = s)"
        " image|video => { if true { v() } else { if false { u() } } } _=>fail 'x' } }\n"
        'repeat 2 { w() } }\nflow g on s { w() }\nflow h = "m:f"\n'
    ).replace("'x'", '"\\q"')
    assert check_invariants(src) == (
        "flow f when request.wants(text) or (option.x and not placed(A)) {\n"
        "  for s in request.inputs {\n"
        "    match s.modality {\n"
        "      text          => w(a = s)\n"
        "      image | video => {\n"
        "        if true {\n          v()\n        } else if false {\n          u()\n        }\n"
        "      }\n"
        '      _             => fail "q"\n'
        "    }\n"
        "  }\n"
        "  repeat 2 { w() }\n"
        "}\n\n"
        "flow g on s { w() }\n"
        'flow h = "m:f"\n'
    )


def test_expression_parentheses() -> None:
    src = "param a = (1 - (2 - 3)) * -(x + 1) / (y / z)\nparam b = --1\n"
    assert check_invariants(src) == (
        "param a = (1 - (2 - 3)) * -(x + 1) / (y / z)\nparam b = -(-1)\n"
    )


def test_strings_requoted() -> None:
    assert check_invariants('param s = "a\\q\\"\\\\\\n\tb"\n') == 'param s = "aq\\"\\\\\\n\\tb"\n'


def test_long_argument_lists_wrap() -> None:
    args = ", ".join(f"argument_{i} = seg.field_{i}" for i in range(6))
    out = check_invariants(f"flow f {{ some_walk({args}) }}\n")
    lines = out.splitlines()
    assert all(len(line) <= 100 for line in lines)
    assert lines[2].startswith(" " * len("  some_walk("))


# ---------------------------------------------------------------------- comments
def test_comments_stay_where_they_were() -> None:
    src = (
        "# header\n\nmodel m   # the name\n"
        "node N: stateless {  # why\n  # before x\n\n  in x: T # x\n  # at the end\n}\n"
        "# trailing file comment\n"
    )
    assert check_invariants(src) == (
        "# header\n\nmodel m   # the name\n\n"
        "node N: stateless {  # why\n  # before x\n\n  in  x: T  # x\n  # at the end\n}\n"
        "# trailing file comment\n"
    )


def test_comments_inside_joined_lines_move_before_the_line() -> None:
    src = "walk w() {\n  A(a,  # first\n    # own\n    b) -> c  # last\n}\n"
    assert check_invariants(src) == ("walk w() {\n  # first\n  # own\n  A(a, b) -> c  # last\n}\n")


def test_comments_everywhere_are_kept() -> None:
    src = (
        "walk #a\n w #b\n ( #c\n x #d\n ) #e\n { #f\n loop #g\n l max #h\n 3 #i\n { #j\n } #k\n"
        " yield #l\n last #m\n x #n\n } #o\n"
    )
    check_invariants(src)


def test_blank_lines_trimmed_at_block_edges() -> None:
    src = "walk w() {\n\n\n  A()\n\n\n\n  B()\n\n}\n\n\n\n"
    assert check_invariants(src) == "walk w() {\n  A()\n\n  B()\n}\n"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name)
def test_examples(path: Path) -> None:
    check_invariants(path.read_text(encoding="utf-8"))


def test_ir_comparison_is_sensitive() -> None:
    assert model("walk w() { A(a) }") != model("walk w() { A(b) }")
    assert model("walk w() { A(a) }") == model("walk  w ( ) {\n A( a = a ) }")


# ---------------------------------------------------------------------- command line
def _run(args: list[str]):
    return CliRunner().invoke(main, args, obj=Env())


def test_cli_rewrites_only_changed_files(tmp_path: Path) -> None:
    ugly, pretty = tmp_path / "u.walk", tmp_path / "sub" / "p.walk"
    pretty.parent.mkdir()
    ugly.write_text("model  m")
    pretty.write_text("model m\n")
    before = pretty.stat().st_mtime_ns
    result = _run(["fmt", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert ugly.read_text() == "model m\n"
    assert pretty.stat().st_mtime_ns == before
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".wgc-fmt-")]


def test_cli_folder_formats_walk_files_only(tmp_path: Path) -> None:
    """A model folder's `placements/*.yaml` are `wgc check`'s, not the formatter's: a folder
    expands to its `.walk` files, and a placement file named alone matches nothing."""
    (tmp_path / "m.walk").write_text("model m\n")
    (tmp_path / "placements").mkdir()
    yaml = tmp_path / "placements" / "cpu.yaml"
    yaml.write_text("devices: [cpu]\n")
    result = _run(["fmt", "--check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 file left unchanged" in result.output and "syntax" not in result.output
    result = _run(["fmt", "--check", str(yaml)])
    assert result.exit_code == 1 and "matches no `.walk` files" in result.output


def test_cli_check_and_diff(tmp_path: Path) -> None:
    ugly = tmp_path / "u.walk"
    ugly.write_text("model  m")
    result = _run(["fmt", "--check", str(ugly)])
    assert result.exit_code == 1
    assert f"would reformat {ugly}" in result.output
    result = _run(["fmt", "--diff", str(ugly)])
    assert result.exit_code == 1
    assert "-model  m" in result.output and "+model m" in result.output
    assert ugly.read_text() == "model  m"
    ugly.write_text("model m\n")
    assert _run(["fmt", "--check", str(ugly)]).exit_code == 0


def test_cli_syntax_error_is_reported_and_file_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.walk"
    bad.write_text("model m\nnode A: {\n")
    result = _run(["fmt", str(bad)])
    assert result.exit_code == 1
    assert "error[WG001]" in result.output and "bad.walk:2:9" in result.output
    assert bad.read_text() == "model m\nnode A: {\n"


def test_cli_missing_path(tmp_path: Path) -> None:
    result = _run(["fmt", str(tmp_path / "nope.walk")])
    assert result.exit_code == 1
    assert "no such file" in result.output


def test_cli_stdin() -> None:
    result = CliRunner().invoke(main, ["fmt", "-"], input="model   m", obj=Env())
    assert result.exit_code == 0
    assert result.output == "model m\n"


def test_comments_in_wrapped_lines() -> None:
    args = ", ".join(f"argument_{i} = seg.field_{i}" for i in range(5))
    src = f"flow f {{\n  w(a = seg,  # one\n  {args})  # end\n}}\n"
    out = check_invariants(src)
    lines = out.splitlines()
    assert lines[1] == "  # one"
    assert lines[3].endswith(")  # end")


def test_comment_between_then_and_else() -> None:
    src = "flow f {\n  if option.a { x() }\n  # c\n  else { y() }\n}\n"
    assert check_invariants(src) == (
        "flow f {\n  if option.a {\n    x()\n    # c\n  } else {\n    y()\n  }\n}\n"
    )


def test_empty_and_comment_only_files() -> None:
    assert check_invariants("") == ""
    assert check_invariants("\n\n  # only\n\n") == "# only\n"


# `str.splitlines` breaks lines at these too; the lexer (and so every line number) only at `\n`
LINE_BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


@pytest.mark.parametrize("ch", LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKS])
def test_line_break_characters_in_comments_and_strings(ch: str) -> None:
    src = (
        f"model m  # a{ch}b\nparam x = 1  # c\n"
        f'node A: stateless {{\n  impl "x{ch}y"  # t{ch}u\n  in a: f32[1]  # p\n}}\n'
        f'flow f {{ fail "no{ch}pe"  # z\n}}  # end\n'
    )
    out = check_invariants(src)
    assert f"model m  # a{ch}b\n" in out and "param x = 1  # c\n" in out  # still trailing
    assert "in  a: f32[1]  # p\n" in out and "}  # end\n" in out


def test_cli_diff_cuts_lines_where_the_lexer_does(tmp_path: Path) -> None:
    ugly = tmp_path / "u.walk"
    ugly.write_text("model  m  # a\u2028b\n", encoding="utf-8")
    result = _run(["fmt", "--diff", str(ugly)])
    assert result.exit_code == 1
    assert "@@ -1 +1 @@\n-model  m  # a\u2028b\n+model m   # a\u2028b\n" in result.output
