"""wgc's output does not depend on the hash seed, nor on the order the passes run in.

Python randomizes `str` hashing per process, so iterating a `set` of names (or a dict built from
one) can order output differently from run to run. CI diffs `wgc check --format json` and
`wgc show` output, so every command here is run in fresh interpreters under two hash seeds and
must print the same bytes: `check` of all examples, `show` (json and text) of every example, and
`check` (json and text) of a file with errors from many passes, whose diagnostics must also come
out in source order however the pipeline is ordered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import wgc.driver
from wgc.diagnostics.codes import stage_of
from wgc.diagnostics.render import render_json, render_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "wgc_models").rglob("*.walk"))
SEEDS = ("0", "12345")

# Errors and warnings from the builder and from many passes (names, types, disjointness,
# dataflow, flows, lints), several on one line and two at the same column (WG402, WG905).
MANY_ERRORS = """\
model many

param n = 4
param unused_p = 3
type Vec = f32[n]
type Gone = f32[2]
option fast: bool = true

node A: stateless {
  impl "m:A"
  in  x: Vec
  out y: Vec
  out flag: f32[]
}

node B: stateless {
  impl "m:B"
  in  y: i64[n]
  out z: Vec
}

node Lonely: stateless {
  impl "m:L"
  in  q: Vec
}

node A: stateless {
  impl "m:A2"
}

walk w1(x: Vec) {
  A(x) -> y, flag
  B(y) -> z
  C(z) -> q
  A(nope) -> y
  loop l max n until flag {
    A(x = z) -> z = y
  }
  emit ghost as text
  emit z as smell
}

walk orphan() {
  B(y = missing) -> z
}

flow main {
  w1(x = option.slow)
  nowalk()
}
"""


def _wgc(args: list[str], seed: str, cwd: Path) -> tuple[int, bytes, bytes]:
    env = {**os.environ, "PYTHONHASHSEED": seed, "NO_COLOR": "1"}
    env.pop("WGC_BACKTRACE", None)
    proc = subprocess.run(
        [sys.executable, "-m", "wgc.cli", *args], cwd=cwd, env=env, capture_output=True
    )
    return proc.returncode, proc.stdout, proc.stderr


def _same_under_all_seeds(commands: list[list[str]], cwd: Path) -> dict[str, tuple]:
    """Run every command under every seed (two at a time); fail on any byte difference."""
    jobs = [(cmd, seed) for cmd in commands for seed in SEEDS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outs = list(pool.map(lambda job: _wgc(job[0], job[1], cwd), jobs))
    results = {}
    for i, cmd in enumerate(commands):
        first, second = outs[2 * i], outs[2 * i + 1]
        assert first[0] != 2, f"internal error in `wgc {' '.join(cmd)}`:\n{first[2].decode()}"
        assert first == second, f"`wgc {' '.join(cmd)}` differs between PYTHONHASHSEED values"
        results[" ".join(cmd)] = first
    return results


@pytest.mark.slow
def test_examples_output_is_hash_seed_independent() -> None:
    assert EXAMPLES, "no examples found"
    commands = [["check", "--format", "json", "wgc_models/"]]
    commands += [["show", "--format", fmt, ex] for ex in EXAMPLES for fmt in ("json", "text")]
    results = _same_under_all_seeds(commands, ROOT)
    code, out, _ = results["check --format json wgc_models/"]
    assert code == 0 and json.loads(out)["errors"] == 0
    for ex in EXAMPLES:
        code, out, err = results[f"show --format json {ex}"]
        assert code == 0 and json.loads(out), err.decode()


@pytest.mark.slow
def test_many_errors_are_reported_in_the_same_order(tmp_path: Path) -> None:
    (tmp_path / "many.walk").write_text(MANY_ERRORS, encoding="utf-8")
    commands = [["check", "--format", fmt, "many.walk"] for fmt in ("json", "text")]
    results = _same_under_all_seeds(commands, tmp_path)
    code, out, _ = results["check --format json many.walk"]
    assert code == 1
    diags = json.loads(out)["diagnostics"]
    keys = [(d["line"], d["col"], d["code"], d["message"]) for d in diags]
    assert keys == sorted(keys)
    stages = {stage_of(d["code"]) for d in diags}
    assert len(stages) >= 5, stages  # the file really exercises many passes
    code, _, err = results["check --format text many.walk"]
    assert code == 1 and err.count(b"error[WG") + err.count(b"warning[WG") == len(diags)


def test_output_does_not_depend_on_pass_order(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = wgc.driver.Driver()
    forward = driver.front_end("many.walk", MANY_ERRORS)
    monkeypatch.setattr(wgc.driver, "PIPELINE", list(reversed(wgc.driver.PIPELINE)))
    backward = driver.front_end("many.walk", MANY_ERRORS)
    assert forward.diagnostics == backward.diagnostics
    assert render_json(forward.diagnostics) == render_json(backward.diagnostics)
    assert render_text(forward.diagnostics, forward.sources) == render_text(
        backward.diagnostics, backward.sources
    )
