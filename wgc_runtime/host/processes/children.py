"""The launcher's handle on one child process, however it was started.

`Child` is what the launcher and its supervisor need of a process: its pid, whether and how it
ended (``exitcode``: None while it runs, negative for a signal, as multiprocessing reports it), a
file descriptor that becomes readable when it ends (``sentinel``, so the supervisor can wait on
it together with its inbox; None where there is none and the supervisor polls ``exitcode``),
signals, and joining. `LocalChild` is a process this launcher spawned with multiprocessing's
``spawn`` context (never fork: torch may already be imported where the launcher runs); the Ray
launcher has its own (`wgc_runtime.host.processes.ray_launcher`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any, Protocol


class Child(Protocol):
    pid: int

    @property
    def exitcode(self) -> int | None: ...

    @property
    def sentinel(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def join(self, timeout: float) -> None: ...


class LocalChild:
    """A child spawned here (see the module docstring)."""

    def __init__(self, target: Callable[[dict[str, Any]], None], boot: dict[str, Any], name: str):
        ctx = multiprocessing.get_context("spawn")
        # the kernel's parent-death signal fires when the spawning *thread* ends: only a child
        # of the main thread may use it (a Cluster started from a worker thread, or a rank the
        # supervisor's thread restarts, relies on the watchdog alone: `child.die_with_parent`)
        boot = {**boot, "pdeathsig": threading.current_thread() is threading.main_thread()}
        self.proc: BaseProcess = ctx.Process(target=target, args=(boot,), name=name, daemon=True)
        self.proc.start()
        self.pid = self.proc.pid or -1

    @property
    def exitcode(self) -> int | None:
        return self.proc.exitcode

    @property
    def sentinel(self) -> int | None:
        return self.proc.sentinel

    def send_signal(self, sig: int) -> None:
        if self.proc.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def join(self, timeout: float) -> None:
        self.proc.join(timeout)


_PF_EXITING = 0x4  # the kernel's task flag: the process is inside exit, tearing down
_SIGKILL_BIT = 1 << (signal.SIGKILL - 1)


def ending(pid: int) -> bool:
    """Whether process ``pid`` is dead or cannot live on, read from the kernel now (Linux's
    ``/proc``; elsewhere False, and the exit code alone tells): a zombie, a process inside
    exit (a SIGKILLed process frees its memory for tens of milliseconds before its parent can
    reap it), or one with a SIGKILL pending. So `/health` says a killed worker is down at once,
    not when the supervisor next hears of it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            status = f.read()
    except FileNotFoundError:
        return True  # reaped: gone
    except OSError:
        return False  # no /proc here (or not readable): the exit code decides
    return ending_from(stat, status)


def ending_from(stat: str, status: str) -> bool:
    """`ending` on the text of ``/proc/PID/stat`` and ``/proc/PID/status``."""
    fields = stat.rpartition(")")[2].split()  # the name, in parentheses, may hold anything
    if len(fields) < 7:
        return False
    state, flags = fields[0], int(fields[6]) if fields[6].isdigit() else 0
    if state in ("Z", "X", "x") or flags & _PF_EXITING:
        return True
    for line in status.splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            try:
                if int(value.strip(), 16) & _SIGKILL_BIT:
                    return True
            except ValueError:
                continue
    return False


def stop_children(children: list[Child], grace: float) -> None:
    """Wait up to ``grace`` seconds for ``children`` to leave, then SIGTERM, then SIGKILL."""
    import time

    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
    for child in children:
        if child.exitcode is None:
            child.send_signal(signal.SIGTERM)
    for child in children:
        child.join(1.0)
        if child.exitcode is None:
            child.send_signal(signal.SIGKILL)
            child.join(1.0)
