"""The conductor's timers (`wgc_runtime.host.processes.timers`): an idle conductor sleeps until
its deadlines' tick or the clients' keep-alive is due, not a fixed 20 ms."""

from __future__ import annotations

from wgc_runtime.host.processes.timers import (
    KEEPALIVE_S,
    TICK_MAX_S,
    TICK_MIN_S,
    Timers,
    tick_every,
)


def test_the_tick_is_a_twentieth_of_the_shortest_timeout_within_bounds() -> None:
    assert tick_every(600.0, 120.0, 600.0) == TICK_MAX_S  # the defaults: 6 s, capped
    assert tick_every(600.0, 2.0, 600.0) == 0.1
    assert tick_every(0.1, 120.0, 600.0) == TICK_MIN_S  # a tiny walk timeout: the floor


def test_the_loop_sleeps_until_the_next_timer_is_due() -> None:
    timers = Timers(0.5)
    assert timers.sleep_ms(100.0) == 0  # the first turn ticks and keeps alive at once
    assert timers.tick(100.0) and timers.keepalive(100.0)
    assert not timers.tick(100.2) and not timers.keepalive(100.2)
    assert timers.sleep_ms(100.2) == 300  # the tick at 100.5 comes before the keep-alive
    assert timers.tick(100.5)
    assert timers.sleep_ms(100.5) == round(KEEPALIVE_S * 1000 - 500)  # now the keep-alive
    assert timers.keepalive(100.0 + KEEPALIVE_S)
