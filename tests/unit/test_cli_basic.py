"""The `wgc` command line: explain, check's path handling, and exit codes."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from wgc.cli import main
from wgc.config import Env
from wgc.diagnostics import Diagnostic, SourceMap, Span, diag
from wgc.diagnostics import explain as explain_module

EXPLANATION = """\
# WG401: `par` branches write the same channel

Two branches of a `par` run at the same time.

## Failing example

```walk
failing program
```

## Fixed example

```walk
fixed program
```
"""


@dataclass
class FakeResult:
    model: object = None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: SourceMap = field(default_factory=SourceMap)


def _invoke(args: list[str], env: Env | None = None):
    runner = CliRunner()
    return runner.invoke(main, args, obj=env or Env())


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Diagnostic]]:
    """Install a stand-in `wgc.driver` whose results are looked up by file name."""
    by_file: dict[str, list[Diagnostic]] = {}

    class FakeDriver:
        def front_end(self, path: str, stop_after: str | None = None) -> FakeResult:
            sources = SourceMap()
            sources.add(path, Path(path).read_text())
            return FakeResult(diagnostics=by_file.get(Path(path).name, []), sources=sources)

    module = types.ModuleType("wgc.driver")
    module.Driver = FakeDriver  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wgc.driver", module)
    return by_file


def test_explain_prints_explanation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explain_module, "load_text", lambda code: EXPLANATION)
    for spelling in ("WG401", "wg401", "401"):
        result = _invoke(["explain", spelling])
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith("# WG401:")
    assert explain_module.examples("WG401") == ("failing program\n", "fixed program\n")


def test_explain_unknown_code_suggests() -> None:
    result = _invoke(["explain", "wg4o1"])
    assert result.exit_code == 1
    assert "unknown diagnostic code `WG4O1`" in result.stderr
    assert "did you mean `WG401`" in result.stderr
    assert "Traceback" not in result.output


def test_explain_without_file_is_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(explain_module, "load_text", lambda code: None)
    result = _invoke(["explain", "WG401"])
    assert result.exit_code == 1
    assert "no written explanation" in result.stderr


def test_explain_list_groups_by_stage() -> None:
    result = _invoke(["explain", "--list"])
    assert result.exit_code == 0
    out = result.stdout
    assert "syntax (WG0xx)" in out
    assert "channel disjointness (WG4xx)" in out
    assert "WG401  error    `par` branches write the same channel" in out
    assert out.index("syntax (WG0xx)") < out.index("WG001") < out.index("names (WG1xx)")


def test_check_missing_path_is_user_error(tmp_path: Path) -> None:
    result = _invoke(["check", str(tmp_path / "nope.walk")])
    assert result.exit_code == 1
    assert "error: no such file or directory" in result.stderr
    assert "Traceback" not in result.output


def test_check_glob_matching_nothing_is_user_error(tmp_path: Path) -> None:
    result = _invoke(["check", str(tmp_path / "*.walk")])
    assert result.exit_code == 1
    assert "matches no `.walk` files" in result.stderr


def test_check_internal_error_exits_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fake_driver: dict
) -> None:
    def boom(self, path: str, stop_after: str | None = None) -> FakeResult:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(sys.modules["wgc.driver"].Driver, "front_end", boom)
    walk = tmp_path / "a b.walk"
    walk.write_text("model m {}\n")
    result = _invoke(["check", str(walk)])
    assert result.exit_code == 2
    err = result.stderr
    assert "error: internal compiler error: RuntimeError: kaboom" in err
    assert "note: this is a bug in wgc; please report it with this command line:" in err
    assert f"wgc check '{walk}'" in err
    assert "Traceback" not in err

    result = _invoke(["check", str(walk)], Env(backtrace=True))
    assert result.exit_code == 2
    assert "Traceback" in result.stderr


def test_check_expands_directories_and_reports(tmp_path: Path, fake_driver: dict) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / ".hidden").mkdir()
    for name in ("a.walk", "sub/b.walk", ".hidden/c.walk", "notes.txt"):
        (tmp_path / name).write_text("model m {}\n")
    fake_driver["b.walk"] = [
        diag("WG901", "unused node `X`", Span(str(tmp_path / "sub/b.walk"), 1, 1, 1, 6))
    ]
    result = _invoke(["check", str(tmp_path), str(tmp_path / "a.walk")])
    assert result.exit_code == 0, result.output
    assert "warning[WG901]: unused node `X`" in result.stderr
    assert result.stderr.rstrip().endswith("checked 2 files: 0 errors, 1 warning")

    result = _invoke(["check", "-W", "--format", "json", str(tmp_path)])
    assert result.exit_code == 1
    assert '"warnings": 1' in result.stdout


def test_check_errors_exit_1(tmp_path: Path, fake_driver: dict) -> None:
    walk = tmp_path / "bad.walk"
    walk.write_text("model m {}\n")
    fake_driver["bad.walk"] = [diag("WG102", "unknown node `Q`", Span(str(walk), 1, 1, 1, 6))]
    result = _invoke(["check", "--quiet", str(walk)])
    assert result.exit_code == 1
    assert "error[WG102]" in result.stderr
    assert "checked" not in result.stderr


def test_usage_errors_exit_1_not_2() -> None:
    result = _invoke(["check", "--format", "xml", "x.walk"])
    assert result.exit_code == 1


def test_version() -> None:
    result = _invoke(["--version"])
    assert result.exit_code == 0
    assert "0.1.0" in result.stdout
