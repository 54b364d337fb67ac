"""Robustness of the front end (issue 2, point 8): no input makes wgc raise.

Whatever the text (a valid generated program, one whose numbers are out of the 64-bit range, a
mutated one, grammar-shaped token soup, or arbitrary Unicode), `Driver().front_end` returns, and
everything it returns is well formed:

* every diagnostic has a registered code;
* every span (primary and secondary) is in the file: line 1 up to one past its last line, with
  columns >= 1 and the end not before the start, or the 0-span of a file-level diagnostic;
* a span's line is the line the text renderer quotes (lark counts lines by `\\n` only, so a
  renderer that split on other line breaks would quote the wrong line);
* all four renderers accept the result;
* the whole `wgc check` command line, run in-process on the text as a file, exits 0 or 1 (2
  is an internal compiler error) for each `--format`.

Placements (issue 14, point 6) get the same treatment: an example placement file mutated token
by token is loaded and checked against its family's model, and every diagnostic is well formed.
Deeply nested programs (statements, expressions) end in WG012/WG708 or check, never a crash.

Example counts: 200 per property locally; under CI (``CI`` set) `CI_EXAMPLES`, ~5,000 cases in
all (about two minutes). `WGC_FUZZ_SCALE` multiplies either; `WGC_FUZZ_EXAMPLES=N` asks for N
cases in all, spread as `CI_EXAMPLES` spreads them, drawn at random (the long local run of
issue 14's note, about an hour of one core: ``WGC_FUZZ_EXAMPLES=100000 .venv/bin/python -m
pytest -q tests/property/test_frontend_robust.py``). Under CI alone hypothesis is seeded
(``derandomize``): the same cases every run.

The corpus: every file in `tests/fuzz_corpus/` is replayed on every run (`.walk` files as
programs, `.yaml` files as placements of `CORPUS_MODEL`). A property that fails writes the
input hypothesis shrank it to there (`found-<property>-<hash>.walk|yaml`): fix the bug, keep the
file, and the crash stays tested.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from unittest.mock import patch

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from gen_walk import edit_tokens, mutated_programs, token_soup, walk_programs

from wgc.cli import main
from wgc.config import Env
from wgc.diagnostics.codes import REGISTRY
from wgc.diagnostics.diagnostic import Diagnostic, SourceMap, Span
from wgc.diagnostics.render import render_github, render_json, render_sarif, render_text
from wgc.driver import Driver, FrontEndResult

FILE = "fuzz.walk"
FORMATS = ("text", "json", "github", "sarif")
DEV_EXAMPLES = 200
# Under CI the properties run ~5,000 cases in all, weighted towards the inputs that are cheap
# to draw: a generated program costs ~10x a token soup and ~30x a random string.
CI_EXAMPLES = {
    "generated": 300,
    "big": 150,
    "mutated": 600,
    "soup": 1600,
    "text": 2500,
    "nested": 100,
    "placement": 300,
}
CORPUS = Path(__file__).resolve().parents[1] / "fuzz_corpus"
ROOT = Path(__file__).resolve().parents[2]
CORPUS_MODEL = ROOT / "wgc_models" / "bagel" / "bagel.walk"  # the corpus's placements' model
PLACEMENTS = sorted((ROOT / "wgc_models").glob("*/placements/*.yaml"))


def _robust(kind: str) -> settings:
    """Settings for one property: `DEV_EXAMPLES` locally, `CI_EXAMPLES[kind]` when `CI` is set,
    multiplied by `WGC_FUZZ_SCALE` (e.g. 0.1 for a quick run, 10 for a long soak); with
    `WGC_FUZZ_EXAMPLES`, that many cases in all, in `CI_EXAMPLES`'s proportions."""
    total = os.environ.get("WGC_FUZZ_EXAMPLES")
    if total:
        base = int(total) * CI_EXAMPLES[kind] / sum(CI_EXAMPLES.values())
    else:
        base = CI_EXAMPLES[kind] if os.environ.get("CI") else DEV_EXAMPLES
    scale = float(os.environ.get("WGC_FUZZ_SCALE") or 1)
    return settings(
        max_examples=max(1, round(base * scale)),
        deadline=None,
        derandomize=bool(os.environ.get("CI")) and not total,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


_saved: dict[str, Path] = {}


def _keep_if_failing(kind: str, text: str, suffix: str, check) -> None:
    """Run ``check(text)``; when it fails, write ``text`` to the corpus (replacing this
    property's earlier find of this run: hypothesis replays the shrunk input last) and re-raise."""
    try:
        check(text)
    except Exception:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        path = CORPUS / f"found-{kind}-{digest}{suffix}"
        old = _saved.get(kind)
        if old is not None and old != path:
            old.unlink(missing_ok=True)
        CORPUS.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8", errors="surrogatepass", newline="")
        _saved[kind] = path
        raise


DRIVER = Driver()
TMP = tempfile.TemporaryDirectory()  # one file, rewritten per example: cheaper than a dir each


# ------------------------------------------------------------------ checks
def _check_span(span: Span, text: str) -> None:
    if span.line == 0:  # file-level: the whole 0-span
        assert (span.col, span.end_line, span.end_col) == (0, 0, 0), span
        return
    assert span.file == FILE, span
    assert 1 <= span.line <= text.count("\n") + 2, (span, text.count("\n"))
    assert span.col >= 1 and span.end_col >= 1, span
    assert (span.end_line, span.end_col) >= (span.line, span.col), span


def _check_quoted_line(result: FrontEndResult, span: Span, text: str) -> None:
    lines = text.split("\n")
    if span.line == 0 or span.line > len(lines):
        return
    quoted = result.sources.line(FILE, span.line)
    assert quoted is None or quoted.rstrip("\r") == lines[span.line - 1].rstrip("\r"), span


def _check_diagnostic(result: FrontEndResult, d: Diagnostic, text: str) -> None:
    assert d.code in REGISTRY, d.code
    assert d.message, d
    for span in [d.span, *(label.span for label in d.labels)]:
        _check_span(span, text)
        _check_quoted_line(result, span, text)


def _render_all(result: FrontEndResult) -> None:
    assert isinstance(render_text(result.diagnostics, result.sources), str)
    assert isinstance(render_text(result.diagnostics, result.sources, color=True), str)
    doc = json.loads(render_json(result.diagnostics))
    assert len(doc["diagnostics"]) == len(result.diagnostics)
    assert render_github(result.diagnostics).count("\n") == len(result.diagnostics)
    sarif = json.loads(render_sarif(result.diagnostics))
    assert len(sarif["runs"][0]["results"]) == len(result.diagnostics)


def _check_cli(text: str) -> None:
    """`wgc check` on ``text`` as a file, in-process, once per output format (with this
    module's driver, as one `wgc check` process uses one: `wgc.cli.check._driver`)."""
    path = Path(TMP.name, FILE)
    path.write_text(text, encoding="utf-8", newline="")  # newline="": keep `\r` as drawn
    for fmt in FORMATS:
        with patch("wgc.driver.Driver", lambda: DRIVER):
            res = CliRunner().invoke(main, ["check", "--format", fmt, str(path)], obj=Env())
        assert res.exit_code in (0, 1), (fmt, res.exit_code, res.output)
        assert "internal compiler error" not in res.output, res.output
        if fmt in ("json", "sarif"):
            json.loads(res.stdout)


def _assert_robust(text: str) -> None:
    result = DRIVER.front_end(FILE, text)
    assert isinstance(result, FrontEndResult)
    for d in result.diagnostics:
        _check_diagnostic(result, d, text)
    if result.model is None:  # only a syntax error stops before the IR
        assert result.errors, "no IR but no error either"
    _render_all(result)
    _check_cli(text)


# ------------------------------------------------------------------ inputs
# numbers that overflow a float, an int64, Python's int-from-text limit (4,300 digits), or the
# float range once multiplied; and numbers at the edges of the range
BIG_NUMBERS = (
    "1e309",
    "1e308",
    "9223372036854775807",
    "9223372036854775808",
    "99999999999999999999999",
    "9" * 5000,
    "0" * 30 + "7",
    "1.7976931348623157e308",
)
_NUMBER_OR_SKIPPED = re.compile(
    r'#[^\n]*|"(?:[^"\\\n]|\\.)*"|[A-Za-z_]\w*|(\d[\d.]*(?:[eE][-+]?\d+)?)'
)


@st.composite
def programs_with_big_numbers(draw) -> str:
    """A generated program with some of its number literals replaced by `BIG_NUMBERS`."""

    def swap(m: re.Match) -> str:
        if m.group(1) is None or not draw(st.booleans()):  # a comment, string or name
            return m.group()
        return draw(st.sampled_from(BIG_NUMBERS))

    return _NUMBER_OR_SKIPPED.sub(swap, draw(walk_programs()))


_OPENERS = (
    "loop l{i} max 2 {{",
    "par {{",
    "par {{ {{",
)
_FLOW_OPENERS = (
    "for s{i} in request.inputs {{",
    "if option.o {{",
    "if not option.o or true {{",
    "repeat 2 {{",
    "match option.o {{ true => {{",
)
_HEAD = (
    "model deep\noption o: bool = true\nparam p = {expr}\n"
    'node A: stateless {{\n  impl "m:A"\n  in x: f32[4]\n  out x: f32[4]\n  config k = p\n}}\n'
)


@st.composite
def _nested_expr(draw) -> str:
    ops = draw(st.lists(st.sampled_from(["+", "-", "*", "/", "neg", "("]), max_size=160))
    text = "1"
    for op in ops:
        text = f"-{text}" if op == "neg" else f"({text})" if op == "(" else f"{text} {op} 1"
    return text


@st.composite
def nested_programs(draw) -> str:
    """Statements and expressions nested up to ~5x past the limits of `wgc.parse.depth`, in a
    walk or a flow, with a drawn expression in a param and a loop bound."""
    expr = draw(_nested_expr())
    depth = draw(st.integers(0, 160))
    if draw(st.booleans()):
        opens = [draw(st.sampled_from(_OPENERS)).format(i=i) for i in range(depth)]
        closes = "".join("}" * o.count("{") for o in reversed(opens))
        walk = f"walk w(x?: f32[4]) {{\n{chr(10).join(opens)}\nA(x) -> y = x\n{closes}\n}}\n"
        return _HEAD.format(expr=expr) + walk + "flow main { w() }\n"
    opens = [draw(st.sampled_from(_FLOW_OPENERS)).format(i=i) for i in range(depth)]
    closes = "".join("}" * o.count("{") for o in reversed(opens))
    walk = "walk w(x?: f32[4]) {\n  A(x) -> y = x\n  emit y as tensor\n}\n"
    return (
        _HEAD.format(expr=expr) + walk + f"flow main {{\n{chr(10).join(opens)}\nw()\n{closes}\n}}\n"
    )


_YAML_TOKEN = re.compile(r"\s+|#[^\n]*|[A-Za-z_][\w.:-]*|-?\d+|.", re.S)
_YAML_JUNK = ["[", "]", "{", "}", ":", "-", ",", "&a", "*a", "!!int", "'", '"', "|", ">", "\t",
              "99999999999999999999", "1000000000000", "-1", "0", "1e400", "~", "\n  "]  # fmt: skip


@st.composite
def mutated_placements(draw) -> str:
    """An example placement file with 1-6 token edits (delete, duplicate, swap, insert junk)."""
    path = draw(st.sampled_from(PLACEMENTS))
    toks = _YAML_TOKEN.findall(path.read_text(encoding="utf-8"))
    text = edit_tokens(draw, toks, 6, st.sampled_from(_YAML_JUNK))
    model = next(path.parent.parent.glob("*.walk"), CORPUS_MODEL).relative_to(ROOT)
    return f"# model: {model.as_posix()}\n" + text


_MODELS: dict[Path, FrontEndResult] = {}


def _assert_placement_robust(text: str) -> None:
    """Load ``text`` as a placement and check it against the model its first line names
    (``# model: PATH``, else `CORPUS_MODEL`): diagnostics registered, in the file, renderable."""
    from wgc.placement.check import check_placement

    first = text.split("\n", 1)[0]
    named = ROOT / first[len("# model: ") :] if first.startswith("# model: ") else None
    model_path = named if named is not None and named.is_file() else CORPUS_MODEL
    if model_path not in _MODELS:
        _MODELS[model_path] = DRIVER.front_end(str(model_path))
    model = _MODELS[model_path].model
    result = check_placement(model, "fuzz.yaml", text)
    sources = SourceMap()
    sources.add("fuzz.yaml", text)
    for d in result.diagnostics:
        assert d.code in REGISTRY, d.code
        assert d.message, d
        for sp in [d.span, *(label.span for label in d.labels)]:
            if sp.file == "fuzz.yaml" and sp.line:
                assert 1 <= sp.line <= text.count("\n") + 2, (sp, d.code)
    _render_all_placement(result.diagnostics, sources)


def _render_all_placement(diags, sources) -> None:
    assert isinstance(render_text(diags, sources), str)
    assert len(json.loads(render_json(diags))["diagnostics"]) == len(diags)
    assert len(json.loads(render_sarif(diags))["runs"][0]["results"]) == len(diags)


# ------------------------------------------------------------------ properties
@pytest.mark.slow
@_robust("generated")
@given(walk_programs())
def test_generated_programs_never_crash(text: str) -> None:
    _keep_if_failing("generated", text, ".walk", _assert_robust)


@pytest.mark.slow
@_robust("big")
@given(programs_with_big_numbers())
def test_out_of_range_numbers_never_crash(text: str) -> None:
    _keep_if_failing("big", text, ".walk", _assert_robust)


@pytest.mark.slow
@_robust("mutated")
@given(mutated_programs())
def test_mutated_programs_never_crash(text: str) -> None:
    _keep_if_failing("mutated", text, ".walk", _assert_robust)


@pytest.mark.slow
@_robust("soup")
@given(token_soup())
def test_token_soup_never_crashes(text: str) -> None:
    _keep_if_failing("soup", text, ".walk", _assert_robust)


@_robust("text")
@given(st.text(max_size=200))
def test_arbitrary_text_never_crashes(text: str) -> None:
    _keep_if_failing("text", text, ".walk", _assert_robust)


@pytest.mark.slow
@_robust("nested")
@given(nested_programs())
def test_deeply_nested_programs_never_crash(text: str) -> None:
    _keep_if_failing("nested", text, ".walk", _assert_robust)


@_robust("placement")
@given(mutated_placements())
def test_mutated_placements_never_crash(text: str) -> None:
    _keep_if_failing("placement", text, ".yaml", _assert_placement_robust)


# ------------------------------------------------------------------ the corpus
CORPUS_FILES = sorted(p for p in CORPUS.glob("*") if p.suffix in (".walk", ".yaml"))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.name for p in CORPUS_FILES])
def test_corpus_replays(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="surrogatepass")
    (_assert_robust if path.suffix == ".walk" else _assert_placement_robust)(text)


# ------------------------------------------------------------------ regressions found by fuzzing
@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "model m\x0c# form feed\nnode",  # a line break lark does not count
        "model m # \u2028 comment\nnode",
        "model m\r\nnode A : stateless {\r\n",
        "\x00",
        "\ufeffmodel m",
        "model m\nparam p = 1e309\ntype T = f32[p]\n",
        "model m\nparam p = " + "9" * 5000 + "\n",
        "walk w(x?: f32[1]) {\n  loop l max 1e309 {\n    A(x) -> x\n  } yield last x\n}\n",
        "flow f { repeat option.n * 1e400 { w() } }\nwalk w() { }\n",
        # a per-mode default and a plain duplicate of the same option (the fuzzer's find)
        'option a: bool = match option.a { "a" => 0 }\noption a: bool = true\n',
    ],
)
def test_known_edge_cases(text: str) -> None:
    _assert_robust(text)


def test_check_reports_an_overflowing_loop_bound_as_a_user_error(tmp_path: Path) -> None:
    # issue 16: `max 1e309` raised OverflowError in the loop_shape pass (exit 2, a traceback)
    path = tmp_path / "big.walk"
    path.write_text(
        'model big\nnode A: stateless {\n  impl "m:A"\n  in  x: f32[4]\n  out x: f32[4]\n}\n'
        "walk w(x?: f32[4]) {\n  loop l max 1e309 {\n    A(x) -> x\n  } yield last x\n"
        "  emit x as tensor\n}\nflow main { w() }\n",
        encoding="utf-8",
    )
    res = CliRunner().invoke(main, ["check", str(path)], obj=Env())
    assert res.exit_code == 1, res.output
    assert "error[WG303]: loop bound is not a static integer" in res.stderr
    assert f"{path}:8:14" in res.stderr and "Traceback" not in res.output
