"""Go-to-definition of an `impl` follows a module's re-export to the class's own file
(`wgc.lsp.impl.find_class`): absolute and relative imports, aliases, and a bounded depth."""

from __future__ import annotations

from pathlib import Path

from wgc.lsp.impl import find_class


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root / "fam" / "model.walk"


def test_a_reexported_class_is_found_where_it_is_defined(tmp_path: Path) -> None:
    walk = _write(
        tmp_path,
        {
            "fam/model.walk": "",
            "fam/__init__.py": "",
            "fam/nodes.py": "from fam.vocoder import Vocoder\nfrom .lm import LM as Speaker\n",
            "fam/vocoder.py": '"""v"""\n\n\nclass Vocoder:\n    """Decodes."""\n',
            "fam/lm.py": "import torch\n\nclass LM:\n    pass\n",
        },
    )
    vocoder = find_class("fam.nodes:Vocoder", str(walk))
    assert vocoder is not None
    assert Path(vocoder.file).name == "vocoder.py" and vocoder.line == 3
    assert vocoder.docstring == "Decodes."
    speaker = find_class("fam.nodes:Speaker", str(walk))  # a relative import, renamed
    assert speaker is not None and Path(speaker.file).name == "lm.py" and speaker.line == 2


def test_a_name_not_found_or_an_import_cycle_settles_on_the_module(tmp_path: Path) -> None:
    walk = _write(
        tmp_path,
        {
            "fam/model.walk": "",
            "fam/a.py": "from fam.b import X\n",
            "fam/b.py": "from fam.a import X\n",
        },
    )
    found = find_class("fam.a:X", str(walk))
    assert found is not None and found.line == 0 and Path(found.file).parent.name == "fam"
    missing = find_class("fam.a:Nothing", str(walk))
    assert missing is not None and Path(missing.file).name == "a.py" and missing.line == 0
