"""`die_with_parent`'s watchdog without the parent-death signal (a child spawned from a thread):
it ends the child when its parent exits, and sleeps until then on a pidfd of the parent instead
of waking five times a second (every wake-up took the GIL from the process's main loop)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import os, sys, time
from wgc_runtime.host.processes.child import die_with_parent
die_with_parent(os.getppid(), pdeathsig=False)
print("ready", flush=True)
time.sleep(60)
"""
PARENT = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", {CHILD!r}], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline().strip() == "ready"
print(child.pid, flush=True)
sys.stdin.readline()  # exit when told, leaving the child behind
"""


def _watchdog_slices(pid: int) -> int:
    """How often the child's threads but its main one (asleep) were put on a CPU so far."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) != pid:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[2])
    return total


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux)")
def test_the_watchdog_sleeps_until_the_parent_exits_then_ends_the_child() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert parent.stdout is not None and parent.stdin is not None
    child = int(parent.stdout.readline())
    try:
        before = _watchdog_slices(child)
        time.sleep(1.0)
        assert _watchdog_slices(child) - before <= 1  # polling would have woken it ~5 times
        parent.stdin.write("\n")
        parent.stdin.flush()
        parent.wait(10)
        t0 = time.monotonic()
        while _alive(child) and time.monotonic() - t0 < 5:
            time.sleep(0.02)
        assert not _alive(child), "the child outlived its parent"
        assert time.monotonic() - t0 < 1.0
    finally:
        parent.kill()
        if _alive(child):
            os.kill(child, 9)
