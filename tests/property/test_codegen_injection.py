"""Property: no file name or string a user writes can become code in the generated modules.

Random file names (any characters a file name may hold: newlines, quotes, backslashes, Unicode
line and paragraph separators, control characters) and random `fail` messages and `impl` strings
(everything the `.walk` lexer lets through) are compiled; every generated module must parse and,
executed, must not run the payload planted in the text (it would raise). The subprocess import
of hostile names lives in `tests/unit/test_codegen_safety.py`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wgc.driver import Driver
from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Fail, Segment

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Driver()
PAYLOAD = "raise SystemExit('INJECTED')"
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\t\x00"
PIECES = st.sampled_from(
    [*BREAKS, '"', "'", '"""', "'''", "\\", "#", "{", "}", "é", "✓", "\U0001f600", "\n" + PAYLOAD]
)
TEXT = st.lists(st.one_of(PIECES, st.text(max_size=3)), max_size=8).map("".join)
STRING = TEXT.map(lambda s: s.replace("\r", ""))

MODEL = """\
model hostile

node A: stateless {{
  impl "{impl}"
  in  x: f32[4]
  out y: f32[4]
}}

walk w(x: f32[4]) {{
  A(x) -> y
  emit y as tensor
}}

flow main {{
  for seg in request.inputs {{
    match seg.modality {{
      tensor => w(x = seg)
      _ => fail "{message}"
    }}
  }}
}}
"""
PLACEMENT = "devices: [cpu]\nplace:\n  - nodes: [A]\n    ranks: [0]\n"


def walk_string(text: str) -> str:
    """``text`` as the body of a `.walk` string literal (the lexer takes `\\\\`, `\\"`, `\\n`;
    a carriage return cannot be written in one: reading a file turns it into a newline)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def file_name(text: str) -> str:
    """A name a POSIX file system accepts: no `/`, no NUL, not empty, not too long."""
    name = text.replace("/", "_").replace("\x00", "_")[:60]
    return name or "_"


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(walk_name=TEXT, placement_name=TEXT, message=STRING, impl=STRING)
def test_no_user_text_becomes_code(walk_name, placement_name, message, impl) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="wgc-inject-"))
    try:
        walk = tmp / f"{file_name(walk_name)}.walk"
        placement = tmp / f"{file_name(placement_name)}.yaml"
        source = MODEL.format(impl=walk_string("m:A" + impl), message=walk_string(message))
        walk.write_text(source, encoding="utf-8")
        placement.write_text(PLACEMENT, encoding="utf-8")
        result = DRIVER.compile(str(walk), str(placement))
        assert result.ok, [(d.code, d.message) for d in result.diagnostics]
        for name, text in result.files.items():
            if not name.endswith(".py"):
                continue
            code = compile(text, name, "exec")  # parses (render checked it too)
            namespace: dict = {"__name__": f"hostile_{name[:-3]}"}
            exec(code, namespace)  # a planted statement would raise SystemExit here
            assert PAYLOAD not in {line.strip() for line in text.split("\n")}
        conductor = {"__name__": "hostile_conductor_again"}
        exec(compile(result.files["conductor.py"], "conductor.py", "exec"), conductor)
        spec = conductor["CONDUCTOR"]
        assert isinstance(spec, ConductorSpec)
        req = spec.request([Segment("audio")], [])
        body = spec.flows[0].body
        assert body is not None
        (step,) = body(req)  # not a tensor: the `fail` arm, message intact
        assert isinstance(step, Fail) and step.message == message
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
