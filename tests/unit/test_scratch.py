"""Private temporary folders are swept once their owner is gone (issue 34, point 3)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from wgc_runtime.host.scratch import OWNER, private_dir, stale, start_time, sweep


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.slow
def test_a_folder_of_a_dead_owner_is_swept_and_the_others_are_kept(tmp_path: Path) -> None:
    mine = Path(private_dir("wgc-run-m-", str(tmp_path)))
    assert (mine / OWNER).read_text().split()[0] == str(os.getpid())
    dead = tmp_path / "wgc-ipc1"
    dead.mkdir()
    (dead / OWNER).write_text(f"{_dead_pid()} 123\n")
    (dead / "rank0.sock").write_text("")
    reused = tmp_path / "wgc-reused"  # a live pid, but started at another time: not its owner
    reused.mkdir()
    (reused / OWNER).write_text(f"{os.getpid()} 1\n")
    foreign = tmp_path / "wgc-test-ring-x"  # no owner file: not made by `private_dir`
    foreign.mkdir()
    other = tmp_path / "not-wgc"
    other.mkdir()
    (other / OWNER).write_text(f"{_dead_pid()} 1\n")
    removed = sweep(str(tmp_path))
    assert sorted(removed) == sorted(
        [str(dead), str(reused)] if start_time(os.getpid()) else [str(dead)]
    )
    assert mine.is_dir() and foreign.is_dir() and other.is_dir() and not dead.exists()
    assert not stale(mine)


@pytest.mark.slow
def test_a_new_private_folder_sweeps_first(tmp_path: Path) -> None:
    dead = tmp_path / "wgc-old"
    dead.mkdir()
    (dead / OWNER).write_text(f"{_dead_pid()} 5\n")
    private_dir("wgc-", str(tmp_path))
    assert not dead.exists()
