"""A placement whose KV pool cannot fit its device is refused when the rank starts, before
anything is allocated: `wgc run` exits 1 with the pool's size, the device's and what to change
(a `kv_cache.pages` of 2^62 overflowed inside torch, with a traceback)."""

from __future__ import annotations

import subprocess
import sys

from tests.e2e.runtime_support import ROOT


def test_a_kv_pool_past_the_device_is_a_clear_exit_1(tmp_path) -> None:
    yaml = (ROOT / "examples/llama/placements/cpu.yaml").read_text()
    assert "pages: 512" in yaml
    placement = tmp_path / "huge.yaml"
    placement.write_text(yaml.replace("pages: 512", f"pages: {2**62}"))
    walk = ROOT / "examples/llama/llama.walk"
    cmd = [sys.executable, "-m", "wgc.cli", "run", str(walk), "--placement", str(placement)]
    r = subprocess.run(
        [*cmd, "--input", "text=hi", "--want", "text"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "error: rank 0 failed to start: the KV pool needs" in r.stderr
    assert "lower `kv_cache.pages` in the placement" in r.stderr
    assert "Traceback" not in r.stderr
