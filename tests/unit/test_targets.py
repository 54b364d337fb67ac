"""Model families by name (`wgc_runtime.contract.families`, `wgc.cli.targets`): the ``wgc.models``
entry points, ``impl`` strings resolved in a family's package, family and placement names on the
command line (WG840, WG841, their explanations' commands), and `wgc run orpheus` from a folder
that holds no model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.narrow import present
from wgc.cli import main
from wgc.cli.targets import family_pairs, is_name, model_file, placement_file, resolve_names
from wgc.config import Env
from wgc.diagnostics.codes import COMMAND, REGISTRY
from wgc.diagnostics.explain import explanation
from wgc_runtime.contract.families import families, family, resolve_impl, resolve_module

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = (
    "bagel",
    "gpt2",
    "llama",
    "orpheus",
    "pi05",
    "qwen3_omni",
    "vjepa2_ac",
    "wan22",
    "whisper",
)


def _wgc(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), obj=Env())
    return result.exit_code, result.output


def test_every_bundled_family_is_registered_with_its_model_file() -> None:
    found = families()
    assert set(BUNDLED) <= set(found)
    for name in BUNDLED:
        fam = found[name]
        assert fam.package == f"wgc_models.{name}"
        walk = fam.walk()
        assert walk is not None and walk == ROOT / "wgc_models" / name / f"{name}.walk"
    # every folder of wgc_models with a .walk file is registered (one line in pyproject.toml)
    folders = {p.parent.name for p in (ROOT / "wgc_models").glob("*/*.walk")}
    assert folders == set(BUNDLED)


def test_impl_strings_resolve_in_a_family_and_leave_other_modules_alone() -> None:
    assert resolve_impl("orpheus.nodes:LLM") == "wgc_models.orpheus.nodes:LLM"
    assert resolve_module("qwen3_omni.talker") == "wgc_models.qwen3_omni.talker"
    assert resolve_impl("wgc_models.orpheus.nodes:LLM") == "wgc_models.orpheus.nodes:LLM"
    assert resolve_impl("mypkg.nodes:X") == "mypkg.nodes:X"
    assert resolve_impl("orpheusx.nodes:X") == "orpheusx.nodes:X"  # a whole component only
    assert resolve_impl(":X") == ":X" and resolve_impl("") == ""
    assert family("nope") is None


def test_the_bundled_walk_files_use_the_short_form_and_it_imports() -> None:
    import importlib

    for walk in (ROOT / "wgc_models").glob("*/*.walk"):
        text = walk.read_text(encoding="utf-8")
        assert '"wgc_models.' not in text, walk
    module, _, cls = resolve_impl("orpheus.nodes:LLM").partition(":")
    assert isinstance(getattr(importlib.import_module(module), cls), type)


def test_names_and_paths() -> None:
    assert is_name("orpheus") and is_name("cpu-2rank")
    assert not is_name("x.walk") and not is_name("a/b") and not is_name("*.walk")
    assert model_file("orpheus").endswith("wgc_models/orpheus/orpheus.walk")
    assert model_file("no/such.walk") == "no/such.walk"  # a path: the command's own error
    walk = model_file("orpheus")
    assert present(placement_file("cpu-2rank", walk)).endswith("orpheus/placements/cpu-2rank.yaml")
    assert placement_file(None, walk) is None
    assert placement_file("x.yaml", walk) == "x.yaml"


def test_family_pairs_cover_every_placement() -> None:
    pairs = family_pairs(ROOT)
    want = set()
    for p in (ROOT / "wgc_models").glob("*/placements/*.yaml"):
        family = p.parent.parent.name
        # a placement named after another model of the folder is that model's (`spec-cpu`)
        walk = "speculative" if p.stem.startswith("spec-") else family
        want.add((f"wgc_models/{family}/{walk}.walk", p.relative_to(ROOT).as_posix()))
    assert set(pairs) == want and len(pairs) == len(want)
    spec = ("wgc_models/llama/speculative.walk", "wgc_models/llama/placements/spec-cpu.yaml")
    assert spec in want


def test_a_family_name_runs_the_model_its_named_placement_is_for() -> None:
    # `wgc run llama -p spec-cpu` runs speculative.walk, as `wgc compile --all` pairs them
    walk, where = resolve_names("llama", "spec-cpu")
    assert walk.as_posix().endswith("wgc_models/llama/speculative.walk")
    assert present(where).endswith("llama/placements/spec-cpu.yaml")
    walk, _ = resolve_names("llama", "cpu")
    assert walk.as_posix().endswith("wgc_models/llama/llama.walk")
    given = model_file("llama")  # a model given as a path keeps that model
    assert resolve_names(given, "spec-cpu")[0] == Path(given)


def test_an_unknown_family_is_wg840_with_the_closest_name() -> None:
    code, out = _wgc("check", "orpheos")
    assert code == 1
    lines = out.strip().splitlines()
    assert lines[0] == "error[WG840]: `orpheos` is neither a file nor a registered model family"
    assert lines[1].startswith("  = help: did you mean `orpheus`? (registered families: bagel,")
    code, out = _wgc("run", "zzz", "-i", "text=hi")
    assert code == 1 and "error[WG840]" in out and "did you mean" not in out


def test_an_unknown_placement_is_wg841_with_the_closest_name(tmp_path: Path) -> None:
    code, out = _wgc("compile", "orpheus", "--placement", "cpu-2ranks", "-o", str(tmp_path))
    assert code == 1
    lines = out.strip().splitlines()
    assert lines[0].startswith("error[WG841]: `cpu-2ranks` is neither a file nor a placement in")
    assert "did you mean `cpu-2rank`?" in lines[1] and "placements there: " in lines[1]


def _commands(text: str) -> list[list[str]]:
    """The ``wgc ...`` lines of an explanation's ```sh blocks (failing, then fixed)."""
    blocks = [b.split("```", 1)[0] for b in text.split("```sh\n")[1:]]
    return [line.split()[1:] for b in blocks for line in b.splitlines() if line.startswith("wgc ")]


@pytest.mark.parametrize("code", sorted(COMMAND))
def test_command_codes_are_registered_and_explained(code: str, tmp_path: Path) -> None:
    assert REGISTRY[code].stage == "command"
    text = explanation(code)
    assert text.startswith(f"# {code}: {REGISTRY[code].title}\n")
    failing, fixed = (
        [str(tmp_path / a) if a == "gen" else a for a in args] for args in _commands(text)
    )
    exit_code, out = _wgc(*failing)
    assert exit_code == 1 and out.startswith(f"error[{code}]: "), out
    exit_code, out = _wgc(*fixed)
    assert exit_code == 0, out


def test_a_family_and_a_placement_by_name_compile(tmp_path: Path) -> None:
    code, out = _wgc("compile", "orpheus", "-p", "cpu-2rank", "-o", str(tmp_path / "gen"))
    assert code == 0, out
    assert (tmp_path / "gen" / "rank_1.py").is_file()
    code, out = _wgc("show", "llama", "--placement", "cpu")
    assert code == 0, out


@pytest.mark.slow
def test_wgc_run_by_family_name_from_any_folder(tmp_path: Path) -> None:
    """The installed package, not the working folder, holds the model: `wgc run orpheus` from
    an empty folder compiles its default placement and its nodes import by the short form."""
    wgc = Path(sys.executable).parent / "wgc"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [str(wgc), "run", "orpheus", "-p", "cpu", "-i", "text=hi", "-w", "audio", "-o", "out"],
        cwd=tmp_path,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "out" / "audio.wav").stat().st_size > 44
    assert not (tmp_path / "wgc_models").exists()


def test_the_runtime_names_no_model() -> None:
    """`wgc_runtime` knows no model: not by import (ruff's bans) and not by name either."""
    import re

    words = re.compile(r"orpheus|llama|bagel|qwen|vjepa|pi0|wan2|whisper|snac", re.IGNORECASE)
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "wgc_runtime").rglob("*"))
        if path.suffix in (".py", ".toml")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if words.search(line)
    ]
    assert not found, "\n".join(found)
