"""Liveness read directly (issue 34, point 2): a killed process is down at once, and a client
whose conductor is gone is told so, not left to its idle timeout."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from wgc_runtime.host.processes.children import ending, ending_from

STAT = "4242 (wgc rank) 1) {state} 1 4242 4242 0 -1 {flags} 0 0 0 0 1 2 0 0 20 0 3 0 1\n"
STATUS = "Name:\twgc\nState:\tS (sleeping)\nSigPnd:\t{pending}\nShdPnd:\t0000000000000000\n"


@pytest.mark.parametrize(
    ("state", "flags", "pending", "dead"),
    [
        ("S", 4194560, "0000000000000000", False),  # asleep, flags without PF_EXITING
        ("R", 4194564, "0000000000000000", True),  # PF_EXITING: freeing its memory
        ("Z", 4194560, "0000000000000000", True),  # a zombie not reaped yet
        ("S", 4194560, "0000000000000100", True),  # SIGKILL pending
        ("S", 4194560, "0000000000004000", False),  # SIGTERM pending: it may handle it
    ],
)
def test_ending_reads_the_kernels_word(state: str, flags: int, pending: str, dead: bool) -> None:
    stat = STAT.format(state=state, flags=flags)
    assert ending_from(stat, STATUS.format(pending=pending)) is dead


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_killed_child_is_ending_before_it_is_reaped() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not ending(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        for _ in range(200):  # a zombie, until reaped (never by us before the check)
            if ending(proc.pid):
                break
            time.sleep(0.01)
        assert ending(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert ending(proc.pid)  # reaped: no /proc entry


def test_a_client_whose_conductor_is_gone_is_told_so() -> None:
    from wgc_runtime.host.client import Client, RequestFailed

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with (
        Client(f"tcp://127.0.0.1:{port}", idle_timeout=600) as client,
        pytest.raises(RequestFailed, match="nothing accepts the connection there"),
    ):
        client.submit([]).collect()
