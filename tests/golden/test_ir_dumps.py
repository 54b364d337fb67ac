"""Golden IR dumps: `wgc show` text and json of every `wgc_models/**/*.walk`.

Each example's dumps are compared with `tests/golden/ir/<stem>.txt` and `.json`. After an
intended change, rewrite them with ``pytest tests/golden --bless`` and review the diff. A missing
golden is written only under ``--bless``; otherwise the test fails and says how to create it.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from wgc.driver import Driver
from wgc.show import render

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "ir"
EXAMPLES = sorted(p.relative_to(ROOT) for p in (ROOT / "wgc_models").glob("**/*.walk"))
FORMATS = (("text", ".txt"), ("json", ".json"))


def _dump(example: Path, fmt: str) -> str:
    # the relative path, so dumps do not depend on where the checkout lives
    result = Driver().front_end(example.as_posix(), (ROOT / example).read_text(encoding="utf-8"))
    errors = [f"{d.span}: {d.code} {d.message}" for d in result.errors]
    assert not errors and result.model is not None, "\n".join(errors)
    return render(result.model, fmt)


@pytest.mark.skipif(not EXAMPLES, reason="no wgc_models/**/*.walk yet")
@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.parametrize(("fmt", "suffix"), FORMATS, ids=[f for f, _ in FORMATS])
def test_ir_dump(example: Path, fmt: str, suffix: str, request: pytest.FixtureRequest) -> None:
    actual = _dump(example, fmt)
    golden = GOLDEN / f"{example.stem}{suffix}"
    rel = os.path.relpath(golden, ROOT)
    if request.config.getoption("--bless"):
        if not golden.exists() or golden.read_text(encoding="utf-8") != actual:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text(actual, encoding="utf-8")
        return
    if not golden.exists():
        pytest.fail(
            f"no golden `{rel}` for `{example}`; create it with `pytest tests/golden --bless`"
        )
    expected = golden.read_text(encoding="utf-8")
    if expected != actual:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                fromfile=rel,
                tofile=f"wgc show --format {fmt} {example}",
                n=2,
            )
        )
        pytest.fail(
            f"`{rel}` is out of date (if intended: `pytest tests/golden --bless`)\n{diff}",
            pytrace=False,
        )
