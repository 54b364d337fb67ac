"""What the launcher says about its children: a child's death (`ChildDied`, final or not) and
the deployment's health (`Health`: ok, degraded while a worker restarts, or down).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChildDied:
    who: str  # "rank 1" or "conductor"
    exitcode: int | None
    note: str = ""  # why it is final (a spent restart budget), if it is

    def __str__(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        return f"{self.who} died ({how})" + (f"; {self.note}" if self.note else "")


@dataclass(frozen=True, slots=True)
class Health:
    """``status``: ``ok`` (every process up), ``degraded`` (a worker is being restarted) or
    ``down`` (a final failure, or not started); ``restarted``: restarts per process."""

    status: str
    restarting: tuple[str, ...] = ()
    restarts: int = 0
    failure: str | None = None
    restarted: tuple[tuple[str, int], ...] = ()
