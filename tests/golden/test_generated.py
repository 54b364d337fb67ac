"""Golden generated code: `generated/<model>/<placement>/` is what `wgc compile` writes today.

Every example × placement (`wgc_models/<family>/placements/*.yaml` against the family's `.walk`) is
compiled afresh and compared file by file with the checked-in folder, including which generated
files exist. CI runs this, so a stale `generated/` fails with a diff. After an intended change,
regenerate with ``wgc compile --all`` or ``pytest tests/golden --bless`` and review the diff.
The checked-in modules must also be clean under ``ruff format --check`` and ``ruff check``, and
import with nothing but ``wgc_runtime`` and the standard library.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wgc.cli.compile import sync
from wgc.cli.targets import family_pairs
from wgc.driver import Driver

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"
PAIRS = family_pairs(ROOT)
DRIVER = Driver()


def _id(pair: tuple[str, str]) -> str:
    walk, placement = pair
    return f"{Path(walk).stem}-{Path(placement).stem}"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # sources are named relative to the repository root


@pytest.mark.skipif(not PAIRS, reason="no registered model family with placements")
@pytest.mark.parametrize("pair", PAIRS, ids=[_id(p) for p in PAIRS])
def test_generated_is_current(pair: tuple[str, str], request: pytest.FixtureRequest) -> None:
    walk, placement = pair  # relative to ROOT: the registered families of this checkout
    result = DRIVER.compile(walk, placement)
    assert result.ok, "\n".join(f"{d.span}: {d.code} {d.message}" for d in result.errors)
    out = ROOT / result.default_output()
    bless = request.config.getoption("--bless")
    outcome = sync(out, result.files, check=not bless)
    if bless or not outcome.diff:
        return
    rel = out.relative_to(ROOT)
    pytest.fail(
        f"`{rel}` is out of date (if intended: `wgc compile --all` or "
        f"`pytest tests/golden --bless`)\n{outcome.diff}",
        pytrace=False,
    )


def test_bagel_3xh100_writes_three_ranks_and_a_conductor() -> None:
    placement = "wgc_models/bagel/placements/3xh100.yaml"
    if not (ROOT / placement).is_file():
        pytest.skip("no BAGEL 3xh100 placement yet")
    result = DRIVER.compile("wgc_models/bagel/bagel.walk", placement)
    assert result.ok
    assert sorted(n for n in result.files if n.endswith(".py") and n != "__init__.py") == [
        "conductor.py",
        "rank_0.py",
        "rank_1.py",
        "rank_2.py",
    ]


def _ruff() -> str | None:
    local = Path(sys.executable).with_name("ruff")
    return str(local) if local.exists() else shutil.which("ruff")


@pytest.mark.slow
@pytest.mark.skipif(not GENERATED.is_dir(), reason="no generated/ yet")
@pytest.mark.skipif(_ruff() is None, reason="ruff is not installed")
@pytest.mark.parametrize("args", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_generated_is_ruff_clean(args: list[str]) -> None:
    run = subprocess.run([_ruff(), *args, "generated"], cwd=ROOT, capture_output=True, text=True)  # type: ignore[list-item]
    assert run.returncode == 0, run.stdout + run.stderr


_IMPORT_ALL = """
import importlib, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in sys.stdlib_module_names)
print("\\n".join(m for m in new if not m.startswith(("generated", "wgc_runtime"))))
"""


@pytest.mark.slow
@pytest.mark.skipif(not GENERATED.is_dir(), reason="no generated/ yet")
def test_generated_modules_import_only_the_runtime() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts)
        for p in GENERATED.glob("*/*/*.py")
        if p.name != "__init__.py"
    )
    # placement names may hold `-`: import_module splits on dots only, so they import as is
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "", f"generated modules imported: {run.stdout}"
