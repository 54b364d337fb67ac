"""`wgc worker`'s own ipc folders are swept (issue 34): a worker not on the conductor's host
binds its inbox in a folder of its own, with an owner file, and `run_workers` sweeps the folders
of dead owners when it starts and when it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from wgc_runtime.host.processes.external import run_workers
from wgc_runtime.host.scratch import OWNER

CHILD = """
import sys, time
from wgc_runtime.host.transport.sockets import Mesh
mesh = Mesh(0, host="127.0.0.1", bind="127.0.0.1", secret=b"s" * 32)
print(mesh._ipc.dir, flush=True)
if sys.argv[1] == "close":
    mesh.close()
    print("closed", flush=True)
else:
    time.sleep(60)
"""


def _worker_mesh(tmp: Path, how: str) -> subprocess.Popen[str]:
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, how], stdout=subprocess.PIPE, text=True, env=env
    )


@pytest.mark.slow
def test_an_own_ipc_folder_carries_an_owner_and_goes_with_its_mesh(tmp_path: Path) -> None:
    proc = _worker_mesh(tmp_path, "close")
    assert proc.stdout is not None
    folder = Path(proc.stdout.readline().strip())
    assert proc.stdout.readline().strip() == "closed"
    proc.wait(30)
    assert folder.parent == tmp_path and folder.name.startswith("wgc-ipc-")
    assert not folder.exists()  # the owner file does not keep it


@pytest.mark.slow
def test_a_sigkilled_workers_folder_is_swept_by_wgc_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = _worker_mesh(tmp_path, "sleep")
    assert proc.stdout is not None
    folder = Path(proc.stdout.readline().strip())
    assert (folder / OWNER).read_text().split()[0] == str(proc.pid)
    assert any(p.suffix == ".sock" for p in folder.iterdir())
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert folder.is_dir()  # SIGKILL removes nothing
    live = tmp_path / "wgc-ipc-live"  # a folder whose owner runs (this test) is kept
    live.mkdir()
    (live / OWNER).write_text(f"{os.getpid()} {_start(os.getpid())}\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    doc = {"boot": {"launcher": "tcp://127.0.0.1:9", "keys": None}}
    said: list[str] = []
    assert run_workers(doc, [], said.append) == 0  # no rank here: it ends at once
    assert not folder.exists() and live.is_dir()


def _start(pid: int) -> str:
    from wgc_runtime.host.scratch import start_time

    return start_time(pid)
