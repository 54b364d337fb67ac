"""The launcher's supervisor: once a deployment is up, one thread that watches its processes,
restarts a worker that died, and answers for the launcher's inbox.

The supervisor owns the launcher's mesh after start-up (`Cluster.start` hands it over): it waits
on the inbox and on every local child's sentinel at once (``zmq.Poller`` takes both), so a death
is seen at once, and polls children that have no sentinel (Ray's) every turn.

**A worker dies.** The conductor is told at once (`RankDied`, with ``restarting`` when it will
come back). Within the restart budget (`RestartBudget`: at most ``restarts`` per rank within
``window_s``) the worker is started again with the same boot settings: it binds a new inbox,
says `Hello` (it gets everybody's addresses), loads its nodes and captures its steps again
(`RankExecutor.prepare_captures`), and reports `Ready`; then the conductor gets the new address
(`Peers`, which it relays to the other ranks) and `Ready`, and admits requests again. The time
from death to `Ready` is kept (`Cluster.restart_times`). A worker that fails to come back within
``ready_timeout`` is killed and counts as another death. Past the budget, or when the conductor
dies, the failure is final: `Cluster.failure` is set, `Cluster.wait` returns it, and the caller
(``wgc run``, ``wgc serve``) stops the run and exits non-zero.

**Questions from other threads** (`Cluster.usage`) are queued to this thread, which asks every
live child (`GetUsage`) and collects their `Usage`.
"""

from __future__ import annotations

import queue
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.host.processes.health import ChildDied
from wgc_runtime.host.processes.spawning import spawn_worker

if TYPE_CHECKING:
    from wgc_runtime.host.processes.launcher import Cluster

POLL_MS = 100


class RestartBudget:
    """At most ``limit`` restarts per process within ``window_s`` seconds."""

    def __init__(self, limit: int, window_s: float) -> None:
        self.limit = max(0, limit)
        self.window_s = window_s
        self._times: dict[str, deque[float]] = {}

    def allow(self, who: str, now: float) -> bool:
        """Whether ``who`` may be restarted now (and if so, spends one restart)."""
        times = self._times.setdefault(who, deque())
        while times and now - times[0] > self.window_s:
            times.popleft()
        if len(times) >= self.limit:
            return False
        times.append(now)
        return True

    def describe(self) -> str:
        return f"{self.limit} restart{'s' if self.limit != 1 else ''} within {self.window_s:.0f} s"


@dataclass(slots=True)
class _Restart:
    died_at: float
    deadline: float
    hello: bool = False


@dataclass(slots=True)
class UsageQuery:
    """`Cluster.usage`'s question, answered by the supervisor thread."""

    done: threading.Event = field(default_factory=threading.Event)
    answers: dict[str, c.Usage] = field(default_factory=dict)
    waiting: set[str] = field(default_factory=set)


class Supervisor:
    """See the module docstring."""

    def __init__(self, cluster: Cluster, budget: RestartBudget) -> None:
        self.cluster = cluster
        self.budget = budget
        self.restarting: dict[str, _Restart] = {}
        self.restarted: dict[str, int] = {}  # restarts begun, per process
        self.queries: queue.SimpleQueue[UsageQuery] = queue.SimpleQueue()
        self._open: list[UsageQuery] = []
        self._reaped: set[int] = set()  # pids whose death was handled
        self.thread = threading.Thread(target=self.run, name="wgc-supervisor", daemon=True)

    # ---------------------------------------------------------------- the loop

    def run(self) -> None:
        cluster = self.cluster
        mesh = cluster.mesh
        assert mesh is not None
        while not cluster._stopping and cluster.failure is None:
            poller = zmq.Poller()
            poller.register(mesh.inbox, zmq.POLLIN)
            for child in list(cluster.procs.values()):
                if child.sentinel is not None and child.pid not in self._reaped:
                    poller.register(child.sentinel, zmq.POLLIN)
            try:
                poller.poll(POLL_MS)
            except zmq.ZMQError:
                if cluster._stopping:
                    return
                raise
            if cluster._stopping:
                return
            for msg in mesh.poll(0):
                self.on_message(msg)
            for who, child in list(cluster.procs.items()):
                if child.exitcode is not None and child.pid not in self._reaped:
                    self._reaped.add(child.pid)
                    child.join(1.0)
                    self.on_death(who, child.exitcode)
            self._check_restarts()
            self._serve_queries()

    # ---------------------------------------------------------------- deaths and restarts

    def on_death(self, who: str, exitcode: int | None) -> None:
        cluster = self.cluster
        if cluster._stopping:
            return
        died = ChildDied(who, exitcode)
        now = time.monotonic()
        self.restarting.pop(who, None)
        if who == "conductor":
            cluster._fail(died)
            return
        if not self.budget.allow(who, now):
            spent = ChildDied(who, exitcode, f"no restart left ({self.budget.describe()})")
            self._tell_conductor(c.RankDied(who, str(died), False))
            cluster._fail(spent if self.budget.limit else died)
            return
        cluster._degraded.add(who)  # before anyone hears of it
        self.restarted[who] = self.restarted.get(who, 0) + 1
        self.restarting[who] = _Restart(now, now + cluster.ready_timeout)
        self._tell_conductor(c.RankDied(who, str(died), True))
        cluster.progress(f"wgc: {died}; restarting it")
        try:
            spawn_worker(cluster, int(who.split()[1]))
        except Exception as exc:
            cluster._fail(ChildDied(who, exitcode, f"it could not be started again: {exc}"))

    def _check_restarts(self) -> None:
        now = time.monotonic()
        for who, r in list(self.restarting.items()):
            if now > r.deadline:
                self.cluster.progress(f"wgc: {who} did not come back in time; killing it")
                self.restarting[who].deadline = float("inf")
                self.cluster.procs[who].send_signal(signal.SIGKILL)  # then handled as a death

    def on_message(self, msg: c.Message) -> None:
        cluster = self.cluster
        if isinstance(msg, c.Hello):
            who = cluster._who(msg.who)
            entry = c.PeerEntry(msg.who, msg.address, msg.host, msg.ipc, msg.client)
            cluster.table[who] = entry
            if who in self.restarting:
                self.restarting[who].hello = True
                assert cluster.mesh is not None
                cluster.mesh.connect(msg.who, msg.address, msg.host, msg.ipc)
                cluster.mesh.send(msg.who, [c.Peers(tuple(cluster.table.values()))])
        elif isinstance(msg, c.Ready):
            who = cluster._who(msg.who)
            r = self.restarting.pop(who, None)
            if r is None:
                return
            seconds = time.monotonic() - r.died_at
            cluster.restart_times.append(seconds)
            # the conductor relays the new address to the ranks before it sends them anything
            self._tell_conductor(c.Peers((cluster.table[who],)), c.Ready(msg.who, seconds))
            cluster._degraded.discard(who)
            cluster.progress(f"wgc: {who} is back ({seconds:.1f} s after it died)")
        elif isinstance(msg, c.StartFailed):
            cluster.progress(f"wgc: {cluster._who(msg.who)} failed to start again: {msg.error}")
        elif isinstance(msg, c.Progress):
            cluster.progress(f"  {cluster._who(msg.who)}: {msg.text}")
        elif isinstance(msg, c.Usage):
            who = cluster._who(msg.who)
            for q in self._open:
                if who in q.waiting:
                    q.waiting.discard(who)
                    q.answers[who] = msg
                    if not q.waiting:
                        q.done.set()

    def _tell_conductor(self, *msgs: c.Message) -> None:
        mesh = self.cluster.mesh
        child = self.cluster.procs.get("conductor")
        if mesh is None or child is None or child.exitcode is not None:
            return
        try:
            mesh.send("conductor", list(msgs))
        except Exception as exc:  # the conductor's death is seen through its sentinel
            self.cluster.progress(f"wgc: cannot reach the conductor: {exc}")

    # ---------------------------------------------------------------- usage

    def _serve_queries(self) -> None:
        cluster = self.cluster
        mesh = cluster.mesh
        assert mesh is not None
        while True:
            try:
                q = self.queries.get_nowait()
            except queue.Empty:
                break
            for who, child in cluster.procs.items():
                if child.exitcode is None and who not in self.restarting and who in cluster.table:
                    q.waiting.add(who)
                    mesh.send(cluster._peer(who), [c.GetUsage()])
            if q.waiting:
                self._open.append(q)
            else:
                q.done.set()
        self._open = [q for q in self._open if not q.done.is_set()]
