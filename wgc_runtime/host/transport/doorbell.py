"""The same-host rings' doorbell (`ring.Rings`): how a sleeping receiver is woken, and why no
wake-up is lost.

A receiver that found nothing in its rings sets its *sleeping* word, looks at its rings once
more, and blocks in ``poll`` on its ZeroMQ inbox and its doorbell: a FIFO in the deployment's
private ``ipc`` folder (`open_bell`: opened read-write by its receiver, so no EOF and no blocking
open). A sender rings it (one byte, non-blocking) only when the sleeping word is set.

Each side stores, then loads another word: the sender its record's index, then the sleeping
word; the receiver its sleeping word, then the rings' indices. x86 may let such a load pass the
store before it, and then both could miss each other: the sender sees no sleeper, the receiver
no record, and it sleeps with a record waiting. So each side passes a `Fence` between the two
(an uncontended lock taken and given back: locked instructions, a full fence on x86-64, the only
machines the rings run on). The loops' waits are bounded too (a worker's 20 ms idle poll, the
conductor's next timer, `wgc_runtime.host.processes.timers`): a lost wake-up, were there one,
would delay, never hang.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading


class Fence:
    """A full memory fence (see the module docstring); call it."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __call__(self) -> None:
        lock = self._lock
        lock.acquire()
        lock.release()


def open_bell(path: str, mode: int) -> int:
    """The FIFO at ``path`` (made on first use), opened non-blocking."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    fd = os.open(path, mode | os.O_NONBLOCK)
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a FIFO")
    return fd
