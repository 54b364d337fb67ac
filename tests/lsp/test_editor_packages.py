"""The VS Code package: its TextMate grammar gives every token of every example a scope (checked
with vscode-textmate and vscode-oniguruma, the engine VS Code itself runs, from the npm registry),
its manifest names files that exist, and its extension script starts `wgc lsp` and shows the plan
(run against stand-ins for VS Code's API). The `.vsix`
itself is built by `.ci/run` (`vsce package`), which takes a minute of npm downloads.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"
CHECKER = VSCODE / "test"


def _need(tool: str) -> str:
    found = shutil.which(tool)
    if found is None:
        pytest.skip(f"`{tool}` is not on PATH: the editor package checks need Node.js and npm")
    return found


def test_every_token_of_every_example_gets_a_scope() -> None:
    node, npm = _need("node"), _need("npm")
    if not (CHECKER / "node_modules" / "vscode-textmate").is_dir():
        install = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--silent"],
            cwd=CHECKER, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if install.returncode != 0:
            pytest.skip(f"npm could not install vscode-textmate: {install.stderr[-500:]}")
    examples = sorted(str(p) for p in ROOT.glob("wgc_models/*/*.walk"))
    out = subprocess.run(
        [node, "check-grammar.js", str(VSCODE / "syntaxes/walk.tmLanguage.json"), *examples],
        cwd=CHECKER, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["tokens"] > 1000 * len(examples) // 2
    assert result["unscoped"] == []


def test_manifest_names_what_exists() -> None:
    manifest = json.loads((VSCODE / "package.json").read_text())
    assert (VSCODE / manifest["main"]).is_file()
    (language,) = manifest["contributes"]["languages"]
    assert language["extensions"] == [".walk"]
    assert (VSCODE / language["configuration"]).is_file()
    (grammar,) = manifest["contributes"]["grammars"]
    assert json.loads((VSCODE / grammar["path"]).read_text())["scopeName"] == grammar["scopeName"]
    commands = {c["command"] for c in manifest["contributes"]["commands"]}
    script = (VSCODE / manifest["main"]).read_text()
    for command in commands:
        assert f'"{command}"' in script, f"{command} is contributed but never registered"
    assert '"wgc/plan"' in script and '"lsp"' in script
    subprocess.run([_need("node"), "--check", str(VSCODE / manifest["main"])], check=True)


def test_extension_starts_the_server_and_shows_the_plan() -> None:
    """extension.js against stand-ins for VS Code's API and the language client."""
    out = subprocess.run(
        [_need("node"), "extension-smoke.js"], cwd=CHECKER, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
