"""A decode lane writes a row's loop counters when the row leaves (`Lanes._loop`): what it
writes equals what `Stepper.step_on` writes at each iteration the row stepped."""

from __future__ import annotations

from typing import Any, cast

from wgc_runtime.core.executor.lanes import Lanes, Row
from wgc_runtime.core.executor.state import LoopRun


def _joined(k0: int) -> LoopRun:
    """A loop run as `Stepper.step_on` leaves it when it starts iteration ``k0`` in place."""
    lr = LoopRun(spec=cast(Any, None), outer=(), chain=("l",))
    for i in range(k0):
        lr.stops[i] = False
        lr.remaining[i] = 0
    lr.remaining[k0] = 1
    lr.completed, lr.started = k0 - 1, k0 + 1
    return lr


def _state(lr: LoopRun) -> tuple[Any, ...]:
    return (list(lr.stops.items()), list(lr.remaining.items()), lr.completed, lr.started)


def test_the_deferred_counters_equal_the_per_step_ones() -> None:
    for k0, steps in ((1, 0), (1, 1), (3, 7), (5, 40)):
        stepped, deferred = _joined(k0), _joined(k0)
        for k in range(k0, k0 + steps):  # `step_on`'s writes, iteration by iteration
            stepped.stops[k] = False
            stepped.remaining[k] = 0
            stepped.completed = k
            stepped.started = k + 2
            stepped.remaining[k + 1] = 1
        row = Row(cast(Any, None), (2, k0 + steps), deferred, cast(Any, None), None, k0)
        Lanes._loop(row)  # pyright: ignore[reportPrivateUsage]
        assert _state(deferred) == _state(stepped), (k0, steps)
        assert row.synced == k0 + steps
        Lanes._loop(row)  # twice: nothing more
        assert _state(deferred) == _state(stepped)
