"""A busy worker holds what its short turns queued and sends it as one batch per peer, within
its bound; an idle one never holds a message into a wait (`worker_main.SendHold`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import Edge
from wgc_runtime.host.processes import worker_main
from wgc_runtime.host.processes.worker_main import IDLE_POLL_MS, SendHold, WorkerLoop


def test_an_idle_rank_sends_at_once() -> None:
    hold = SendHold(0.010)
    assert hold.send_now(now=1.0, turn_s=0.001, busy=False)
    assert hold.since is None


def test_short_busy_turns_hold_until_the_bound() -> None:
    hold = SendHold(0.010)
    # 3 ms turns: held while the oldest message plus one more turn stays under 10 ms
    assert not hold.send_now(now=1.000, turn_s=0.003, busy=True)
    assert not hold.send_now(now=1.003, turn_s=0.003, busy=True)
    assert not hold.send_now(now=1.006, turn_s=0.003, busy=True)  # 6 + 3 ms: under 10
    assert hold.send_now(now=1.009, turn_s=0.003, busy=True)  # 9 + 3 ms would pass it
    assert hold.since is None  # the next message starts a new wait
    assert not hold.send_now(now=1.012, turn_s=0.003, busy=True)
    assert hold.since == 1.012


def test_a_long_turn_sends_every_turn_and_zero_never_holds() -> None:
    hold = SendHold(0.010)
    assert hold.send_now(now=1.0, turn_s=0.015, busy=True)  # a vocoder batch: no holding
    never = SendHold(0.0)
    assert never.send_now(now=1.0, turn_s=0.0, busy=True)


class _Clock:
    """A turn takes ``turn_s`` of this clock (one `step`)."""

    def __init__(self) -> None:
        self.t = 100.0

    def perf_counter(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t


class _Executor:
    """Busy for ``busy_turns`` turns, each queuing one message for rank 1 and one for the
    conductor; then idle."""

    def __init__(self, outbox, clock: _Clock, busy_turns: int, turn_s: float) -> None:
        self.outbox, self.clock = outbox, clock
        self.busy_turns, self.turn_s = busy_turns, turn_s
        self.turns = 0

    def step(self) -> bool:
        self.clock.t += self.turn_s
        if self.turns >= self.busy_turns:
            return False
        self.turns += 1
        if self.acks:  # a stream owner's turn: credits back to a producer
            self.outbox(1, m.StreamAck(f"r{self.turns}", "tokens", 1, 0))
        else:  # a decode step's value for the next rank
            self.outbox(1, m.Value(f"r{self.turns}", 1, "w", 0, "x", Edge.INPUT))
        self.outbox(m.CONDUCTOR, m.Release(f"r{self.turns}"))
        return True

    def end_turn(self) -> None:
        pass

    def idle(self) -> bool:  # `RankExecutor.idle`: ``work_ahead`` calls do some, then none
        self.idle_calls += 1
        if self.idle_error is not None and self.idle_calls == 1:
            raise self.idle_error
        if self.work_ahead > 0:
            self.work_ahead -= 1
            return True
        return False

    idle_calls = 0
    work_ahead = 0
    idle_error: Exception | None = None

    def pending(self) -> bool:
        return self.turns < self.busy_turns and not self.last_alone

    last_alone = False  # the last busy turn leaves no work for the next one
    acks = False  # its turns give stream credits back (`StreamAck`) instead


class _Mesh:
    def __init__(self, loop_ref: list, polls: int) -> None:
        self.loop_ref, self.polls_left = loop_ref, polls
        self.sent: list[tuple[object, list]] = []
        self.polls: list[tuple[float, int]] = []  # (timeout, messages still queued)
        self.guard = SimpleNamespace(dropped=0, cut_offs=0)

    def send(self, peer, msgs) -> None:
        self.sent.append((peer, list(msgs)))

    def poll(self, timeout_ms: float) -> list:
        loop = self.loop_ref[0]
        self.polls.append((timeout_ms, len(loop.out)))
        self.polls_left -= 1
        if self.polls_left <= 0:
            loop.running = False
        return []

    def flush_releases(self) -> None:
        pass


def _run_loop(
    monkeypatch: pytest.MonkeyPatch, turn_s: float, busy_turns: int = 10, made: list | None = None
) -> _Mesh:
    clock = _Clock()
    monkeypatch.setattr(worker_main, "time", clock)
    holder: list = []
    made = [] if made is None else made

    def executor(rank_spec, nodes, outbox, max_batch, device, direct=True):
        made.append(_Executor(outbox, clock, busy_turns=busy_turns, turn_s=turn_s))
        return made[0]

    monkeypatch.setattr("wgc_runtime.core.executor.RankExecutor", executor)
    mesh = _Mesh(holder, polls=14)
    spec = SimpleNamespace(rank=0, batching=SimpleNamespace(max_batch=16))
    loop = WorkerLoop(spec, {}, mesh, "cpu")  # pyright: ignore[reportArgumentType]
    loop.hold = SendHold(0.010)
    holder.append(loop)
    loop.run()
    return mesh


@pytest.mark.parametrize(("turn_s", "most_sends"), [(0.003, 4), (0.02, 10)])
def test_the_loop_batches_short_turns_and_never_waits_holding(
    monkeypatch: pytest.MonkeyPatch, turn_s: float, most_sends: int
) -> None:
    mesh = _run_loop(monkeypatch, turn_s)

    # every message arrived, in order per peer, as batches
    to_rank = [msg.request for peer, msgs in mesh.sent if peer == 1 for msg in msgs]
    to_conductor = [msg.request for peer, msgs in mesh.sent if peer == "conductor" for msg in msgs]
    want = [f"r{i}" for i in range(1, 11)]
    assert to_rank == want and to_conductor == want
    sends = len([1 for peer, _ in mesh.sent if peer == 1])
    assert sends <= most_sends  # 3 ms turns: every 3rd-4th turn; 20 ms turns: every turn
    if turn_s > 0.010:
        assert sends == 10
    # a wait (a poll with a timeout) never starts with messages still held
    assert all(queued == 0 for timeout, queued in mesh.polls if timeout == IDLE_POLL_MS)
    assert any(timeout == IDLE_POLL_MS for timeout, _ in mesh.polls)


def test_a_turn_that_leaves_no_work_sends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hop of a chain (one call, then nothing ready): its message goes at the end of the turn
    that made it, not one idle turn later."""
    monkeypatch.setattr(_Executor, "last_alone", True)
    mesh = _run_loop(monkeypatch, 0.001, busy_turns=1)
    assert [msg.request for _, msgs in mesh.sent for msg in msgs] == ["r1", "r1"]
    assert mesh.polls[0] == (0, 0)  # sent before the first poll


def test_an_idle_rank_does_its_nodes_work_ahead_before_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing to run, the loop asks the executor for work ahead (`RankExecutor.idle`) and
    looks for messages without waiting while there is some; it waits only once there is none.
    While a turn runs work, it never asks."""
    monkeypatch.setattr(_Executor, "work_ahead", 3)
    made: list[_Executor] = []
    mesh = _run_loop(monkeypatch, 0.001, busy_turns=2, made=made)
    (ex,) = made
    timeouts = [t for t, _ in mesh.polls]
    # two busy turns (no asking), three turns of work ahead, then waits
    assert timeouts[:5] == [0] * 5 and timeouts[5:] == [IDLE_POLL_MS] * (len(timeouts) - 5)
    assert ex.work_ahead == 0 and ex.idle_calls == len(timeouts) - 2


def test_work_ahead_that_fails_is_reported_and_the_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_Executor, "idle_error", RuntimeError("boom"))
    made: list[_Executor] = []
    mesh = _run_loop(monkeypatch, 0.001, busy_turns=1, made=made)
    err = capsys.readouterr().err
    assert "work ahead" in err and "boom" in err
    assert [msg.request for _, msgs in mesh.sent for msg in msgs] == ["r1", "r1"]
    assert any(t == IDLE_POLL_MS for t, _ in mesh.polls)


def test_a_turn_that_gives_credits_back_sends_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy stream owner (a vocoder rank running chunk walks back to back) never holds the
    credits a producer may wait for: each short turn's `StreamAck` goes at its end."""
    monkeypatch.setattr(_Executor, "acks", True)
    mesh = _run_loop(monkeypatch, 0.003)
    to_rank = [msg for peer, msgs in mesh.sent if peer == 1 for msg in msgs]
    assert [type(x) for x in to_rank] == [m.StreamAck] * 10
    assert len([1 for peer, _ in mesh.sent if peer == 1]) == 10  # one send per turn
