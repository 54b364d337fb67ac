"""A SIGKILLed `wgc serve` leaves nothing that outlives the next start (issue 34, point 3).

`wgc serve faults.walk` compiles into a private temporary folder and runs its deployment with a
private ipc folder; SIGKILL of the `wgc serve` process itself removes neither (nothing runs to
remove them), its children follow it (their parent-death signal), and the next `wgc` start that
makes such a folder sweeps both (their owner file names a dead process)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.serve_support import _children_of, wgc_exe
from wgc_runtime.host.transport.arena import leaked_segments

pytest.importorskip("fastapi")
ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "e2e" / "faults"


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.mark.slow
def test_a_sigkilled_server_is_swept_at_the_next_start(tmp_path, monkeypatch) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the children's temporary directory
    walk = str(FAULTS / "faults.walk")
    placement = str(FAULTS / "placements" / "cpu-2rank.yaml")
    proc = subprocess.Popen(
        [*wgc_exe(), "serve", walk, "--placement", placement, "--port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url, deadline = "", time.monotonic() + 300
        while not url and time.monotonic() < deadline and proc.poll() is None:
            url = proc.stdout.readline().strip()
        assert url.startswith("http://"), "wgc serve did not start"
        kids = _children_of(proc.pid)
        left = sorted(p.name for p in tmp.iterdir())
        assert any(n.startswith("wgc-run-") for n in left), left
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    deadline = time.monotonic() + 15
    while any(_alive(k) for k in kids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(k) for k in kids), "a child outlived the SIGKILLed server"
    deadline = time.monotonic() + 15  # the resource tracker unlinks the arena when it sees
    while leaked_segments(f"wgc-{proc.pid}-") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leaked_segments(f"wgc-{proc.pid}-") == set(), "shared memory left in /dev/shm"
    stale = sorted(p.name for p in tmp.iterdir() if p.name.startswith("wgc-"))
    assert any(n.startswith("wgc-run-") for n in stale), stale  # nothing ran to remove them
    # the next start: a `wgc run` compiles into a new private folder, sweeping first
    out = tmp_path / "out"
    r = subprocess.run(
        [*wgc_exe(), "run", walk, "--placement", placement, "--local", "-i", "x=1,2,3,4",
         "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ},
    )  # fmt: skip
    remaining = sorted(p.name for p in tmp.iterdir() if p.name.startswith("wgc-"))
    assert not set(stale) & set(remaining), (remaining, r.stderr)
