"""What every spawned child process (the conductor, each worker) does first, and how it leaves:
die with the launcher however it goes, ignore Ctrl-C (the launcher stops children in order),
turn SIGTERM into a clean stop, and exit without the interpreter's slow teardown."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
import time
from typing import Any

from wgc_runtime.host.loading import ensure_import_root

# -------------------------------------------------------------------------- child process hygiene

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, pdeathsig: bool = True, period: float = 0.2) -> None:
    """End this process when the launcher goes away, however it goes: the kernel sends SIGKILL
    on parent death (Linux ``prctl``; only when ``pdeathsig``: the kernel means the death of
    the spawning *thread*, so a child spawned from any thread but the launcher's main one would
    die with that thread), and a watchdog thread notices the parent's exit: asleep on a pidfd of
    it (Linux ≥ 5.3: no wake-up until then), else by polling for reparenting every ``period``."""
    if pdeathsig:
        with contextlib.suppress(Exception):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
    pidfd = _pidfd(parent_pid)

    def watch() -> None:
        if pidfd is not None:  # readable once the parent has exited
            with contextlib.suppress(OSError):
                select.select([pidfd], [], [])
                os._exit(1)
        while True:
            time.sleep(period)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="wgc-parent-watchdog", daemon=True).start()


def _pidfd(pid: int) -> int | None:
    """A pidfd of ``pid`` while it is still this process's parent, else None."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd = opener(pid)
    except OSError:  # an old kernel, or no such process
        return None
    if os.getppid() != pid:  # it died, and ``pid`` may be another process now
        os.close(fd)
        os._exit(1)
    return fd


class Stop(BaseException):
    """Raised in a child's main thread by SIGTERM: leave the loop, clean up, exit."""


def child_signals() -> None:
    """Ctrl-C reaches every process of the terminal's group: children ignore SIGINT and let the
    launcher stop them in order; SIGTERM stops a child cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(_signum, _frame):
        raise Stop()

    signal.signal(signal.SIGTERM, on_term)


def fast_exit(code: int) -> None:
    """Leave a child at once: its sockets and arena are closed already, and the interpreter's
    own teardown (torch's, mostly) would add a second or more to every shutdown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def child_setup(boot: dict[str, Any]) -> None:
    """The first thing a spawned child does."""
    die_with_parent(int(boot["parent"]), bool(boot.get("pdeathsig", True)))
    child_signals()
    ensure_import_root()
    if boot.get("threads"):
        import torch

        torch.set_num_threads(int(boot["threads"]))
