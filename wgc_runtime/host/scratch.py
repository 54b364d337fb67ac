"""Private temporary folders that outlive nobody: what a SIGKILLed owner left is swept later.

`wgc run` / `wgc serve` make folders in the temporary directory (the compile of a `.walk` file,
the deployment's ipc sockets, the client key) and remove them when they stop. A process killed
with SIGKILL removes nothing, so each such folder carries an owner file (``.wgc-owner``: the
owner's pid and its start time, as the kernel counts it) and `sweep` removes every folder whose
owner is gone: it runs before any new folder is made (`private_dir`), so the next start cleans
up after the last one. Only folders named ``wgc-*`` that this user owns and that carry an owner
file are touched; a pid reused by another process is told apart by its start time.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

OWNER = ".wgc-owner"


def start_time(pid: int) -> str:
    """The start time of ``pid`` (clock ticks after boot, from ``/proc``); "" where unknown,
    "gone" when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rpartition(")")[2].split()
    except FileNotFoundError:
        return "gone" if os.path.isdir("/proc/self") else _alive_elsewhere(pid)
    except OSError:
        return ""
    return fields[19] if len(fields) > 19 else ""


def _alive_elsewhere(pid: int) -> str:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except OSError:
        return ""
    return ""


def private_dir(prefix: str, base: str | None = None) -> str:
    """A new folder (mode 0700) named ``prefix...`` in ``base`` (default: the temporary
    directory), owned by this process; the stale folders of dead owners are swept first."""
    base = base or tempfile.gettempdir()
    sweep(base)
    folder = tempfile.mkdtemp(prefix=prefix, dir=base)
    pid = os.getpid()
    Path(folder, OWNER).write_text(f"{pid} {start_time(pid)}\n", encoding="ascii")
    return folder


def stale(folder: Path) -> bool:
    """Whether ``folder``'s owner (its owner file) is gone."""
    try:
        pid_text, _, started = folder.joinpath(OWNER).read_text(encoding="ascii").partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False  # no owner file (not made here, or still being made): not ours to judge
    now = start_time(pid)
    return now == "gone" or (bool(now) and bool(started.strip()) and now != started.strip())


def sweep(base: str | None = None) -> list[str]:
    """Remove every ``wgc-*`` folder in ``base`` that this user owns and whose owner is gone;
    the folders removed."""
    base = base or tempfile.gettempdir()
    removed = []
    uid = os.getuid() if hasattr(os, "getuid") else None
    with contextlib.suppress(OSError), os.scandir(base) as entries:
        for entry in entries:
            if not entry.name.startswith("wgc-"):
                continue
            with contextlib.suppress(OSError):
                if not entry.is_dir(follow_symlinks=False):
                    continue
                if uid is not None and entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if stale(Path(entry.path)):
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(entry.path)
    return removed
