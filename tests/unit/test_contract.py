"""The contract between compiler and runtime: one torch-free schema, versioned and checked on load,
and a core install whose commands never import the runtime's dependencies."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wgc.cli import main
from wgc_runtime.contract.spec import SPEC_VERSION
from wgc_runtime.host.loading import DeploymentError, load_plan

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "zmq", "msgspec", "numpy", "safetensors")


def _imported_after(code: str) -> list[str]:
    """The heavy top-level modules a fresh interpreter has imported after running ``code``."""
    probe = (
        f"{code}\nimport sys\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.slow
def test_the_contract_records_import_with_the_standard_library_only() -> None:
    code = "import wgc_runtime.contract.spec, wgc_runtime.contract.flow, wgc_runtime.contract.kinds"
    assert _imported_after(code) == []
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print('wgc' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"  # nor the compiler


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["check", "wgc_models/"],
        ["fmt", "--check", "wgc_models/"],
        ["compile", "--all", "--check"],
        [
            "show",
            "wgc_models/orpheus/orpheus.walk",
            "--placement",
            "wgc_models/orpheus/placements/cpu-2rank.yaml",
        ],
        ["explain", "WG401"],
    ],
    ids=["check", "fmt", "compile", "show", "explain"],
)
def test_core_commands_never_import_the_runtime_dependencies(args: list[str]) -> None:
    code = (
        "import contextlib, io\nfrom wgc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):"
        f"\n    code = main.main({args!r}, standalone_mode=False)\n"
        "assert code in (0, None), code"
    )
    assert _imported_after(code) == []


# ---------------------------------------------------------------- versions


@pytest.fixture
def plan_copy(tmp_path: Path) -> Path:
    out = tmp_path / "orpheus-cpu"
    shutil.copytree(ROOT / "generated" / "orpheus" / "cpu", out)
    return out


def test_generated_modules_and_plan_json_carry_the_version() -> None:
    folder = ROOT / "generated" / "orpheus" / "cpu-2rank"
    assert json.loads((folder / "plan.json").read_text())["version"] == SPEC_VERSION
    for name in ("conductor.py", "rank_0.py", "rank_1.py"):
        assert f"\nSPEC_VERSION = {SPEC_VERSION}  #" in (folder / name).read_text()
    conductor, ranks = load_plan(folder)
    assert [r.rank for r in ranks] == [0, 1] and conductor.world_size == 2


def _set_version(path: Path, line: str | None) -> None:
    text = path.read_text(encoding="utf-8")
    old = f"SPEC_VERSION = {SPEC_VERSION}  #"
    assert old in text
    if line is None:
        text = text.replace(old, "# (no version)  #")
    else:
        text = text.replace(old, f"{line}  #")
    path.write_text(text, encoding="utf-8")


def test_a_module_of_another_version_is_refused_naming_both(plan_copy: Path) -> None:
    _set_version(plan_copy / "rank_0.py", f"SPEC_VERSION = {SPEC_VERSION + 7}")
    with pytest.raises(DeploymentError) as err:
        load_plan(plan_copy)
    text = str(err.value)
    assert f"spec version {SPEC_VERSION + 7}" in text
    assert f"this runtime reads spec version {SPEC_VERSION}" in text
    assert "rank_0.py" in text and "wgc compile" in text


def test_a_module_without_a_version_is_refused(plan_copy: Path) -> None:
    _set_version(plan_copy / "conductor.py", None)
    with pytest.raises(DeploymentError, match="names no spec version"):
        load_plan(plan_copy)


def test_wgc_run_refuses_a_stale_folder_before_starting(
    plan_copy: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    _set_version(plan_copy / "conductor.py", "SPEC_VERSION = 1")
    code = main.main(
        ["run", str(plan_copy), "--input", "text=hi", "--want", "audio"], standalone_mode=False
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert "spec version 1" in err and f"reads spec version {SPEC_VERSION}" in err
    assert "Traceback" not in err


def test_ranks_of_another_deployment_are_refused(plan_copy: Path, tmp_path: Path) -> None:
    other = ROOT / "generated" / "vjepa2_ac" / "cpu" / "rank_0.py"
    shutil.copy(other, plan_copy / "rank_0.py")
    with pytest.raises(DeploymentError, match="belongs to `vjepa2_ac`"):
        load_plan(plan_copy)
