"""User text never becomes code: file names, placement names and strings that try to end their
comment, docstring or string literal in the generated modules stay text, and every generated
module parses (`render` checks it before anything is written)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from wgc.codegen.pyfmt import comment_text
from wgc.codegen.render import check_python
from wgc.driver import Driver

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = 'import os; os.system("touch PWNED")'
NAMES = [
    f"x\n{PAYLOAD}\n#",  # a newline ends a `#` comment
    f'q"""\n{PAYLOAD}\n#',  # triple quotes end a docstring
    f"u\u2028{PAYLOAD}\u2029#\x85",  # line breaks str.splitlines knows, Python does not
    f"c\r{PAYLOAD}\x0c\x0b\x1c#",
    'tail"',  # a quote just before the closing quotes of a docstring
    "back\\",  # a backslash just before them
]


def _load(path: Path, name: str) -> None:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_hostile_file_names_stay_text(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    walk = Path(f"{name}.walk")
    placement = Path(f"{name}-p.yaml")
    shutil.copy(ROOT / "wgc_models" / "orpheus" / "orpheus.walk", walk)
    shutil.copy(ROOT / "wgc_models" / "orpheus" / "placements" / "cpu-2rank.yaml", placement)
    result = Driver().compile(str(walk), str(placement))
    assert result.ok, [d.message for d in result.errors]
    out = tmp_path / "out"
    out.mkdir()
    for fname, text in result.files.items():
        (out / fname).write_text(text, encoding="utf-8")
        if fname.endswith(".py"):
            assert not any(line.startswith("import os") for line in text.split("\n")), fname
    for fname in ("conductor.py", "rank_0.py", "rank_1.py", "__init__.py"):
        _load(out / fname, f"hostile_{abs(hash((name, fname)))}")
    assert not (tmp_path / "PWNED").exists()
    assert not any(p.name == "PWNED" for p in tmp_path.rglob("*"))
    assert os.path.exists(out / "plan.json")


def test_comment_text_escapes_every_line_break() -> None:
    for ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00\t":
        text = comment_text(f"a{ch}b")
        assert text.isprintable() and "\n" not in text and ch not in text
    assert comment_text("plain é ✓") == "plain é ✓"


def test_render_refuses_a_module_that_does_not_parse() -> None:
    with pytest.raises(AssertionError, match="not valid Python"):
        check_python("rank_0.py", "# ok\ndef (:\n")
    check_python("rank_0.py", "X = 1\n")
