"""Start-up failures of the deployment's own making are one line, exit 1, no traceback, and
always that line (never "rank 0 died while starting", whichever of its reason and its exit the
launcher sees first): a placement whose KV pool cannot fit its device, refused before anything
is allocated (a `kv_cache.pages` of 2^62 overflowed inside torch); node modules of no
registered family that do not import from the folder `wgc run` starts in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.runtime_support import ROOT


@pytest.mark.slow
def test_a_kv_pool_past_the_device_is_a_clear_exit_1(tmp_path) -> None:
    yaml = (ROOT / "wgc_models/llama/placements/cpu.yaml").read_text()
    assert "pages: 512" in yaml
    placement = tmp_path / "huge.yaml"
    placement.write_text(yaml.replace("pages: 512", f"pages: {2**62}"))
    walk = ROOT / "wgc_models/llama/llama.walk"
    cmd = [sys.executable, "-m", "wgc.cli", "run", str(walk), "--placement", str(placement)]
    r = subprocess.run(
        [*cmd, "--input", "text=hi", "--want", "text"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    # refused before any process starts (`wgc.cli.preflight`: the rank's weights and KV cache
    # against the host's memory); the rank's own check (`PoolTooLarge`) stays behind it
    assert "error[WG826]: rank 0 needs" in r.stderr and ", KV cache 3.78e+22 bytes," in r.stderr
    assert "lower `kv_cache.pages`" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_node_modules_missing_from_the_folder_wgc_runs_in_say_so(tmp_path) -> None:
    # a registered family's nodes import from any folder (tests/unit/test_targets.py); a module
    # of the user's own, named by a .walk beside no such package, is looked for in the folder
    source = (ROOT / "wgc_models/orpheus/orpheus.walk").read_text()
    assert '"orpheus.nodes:' in source
    walk = tmp_path / "model" / "orpheus.walk"
    walk.parent.mkdir()
    walk.write_text(source.replace('"orpheus.nodes:', '"mymodels.orpheus.nodes:'))
    (walk.parent / "placements").symlink_to(ROOT / "wgc_models/orpheus/placements")
    for _ in range(3):  # the reason, every time: not "died while starting"
        r = subprocess.run(
            [sys.executable, "-m", "wgc.cli", "run", str(walk), "--input", "text=hi"],
            cwd=tmp_path, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 1, r.stderr
        assert "error: rank 0 failed to start: node `LLM`: cannot import" in r.stderr
        assert f"imported from the folder wgc runs in, {tmp_path}" in r.stderr
        assert "Traceback" not in r.stderr
