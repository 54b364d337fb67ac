"""Start a compiled plan as processes: one conductor and one worker per rank, and watch them.

`Cluster(plan_dir).start()`:

1. creates the host's shared-memory arena (one region per rank and one for the conductor), the
   deployment's secret (every message between its processes carries it, see
   `wgc_runtime.host.transport.sockets`) and a private folder (mode 0700) for the processes'
   ``ipc://`` sockets, and binds the launcher's own inbox;
2. spawns the conductor and every worker with ``multiprocessing.get_context("spawn")`` (never
   fork: torch may already be imported) as daemonic children; each binds its inbox and says
   hello; the launcher sends everybody the address table;
3. shows progress while workers import their nodes and warm up, and waits (with a deadline)
   until all are ready. A child that dies or fails to load ends the start with its message.

While it serves, a monitor thread waits on the children's sentinels. **A worker that dies is not
restarted**: the launcher tells the conductor at once (so every in-flight request fails with
"rank N died" well within 5 s), records `Cluster.failure`, and the run ends non-zero
(`wgc run` reports which rank died).

`stop()` (also from ``finally``, ``atexit``, Ctrl-C and SIGTERM) asks every child to exit,
terminates and then kills stragglers, and unlinks the arena: no orphan processes, nothing left
in ``/dev/shm``. Children also die with the launcher if it is killed outright (a parent-death
signal and a watchdog thread, see `child.die_with_parent`), and multiprocessing's resource
tracker unlinks the arena then.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.host.loading import DeploymentError, load_conductor
from wgc_runtime.host.transport.arena import Arena, region_size
from wgc_runtime.host.transport.codec import Codec
from wgc_runtime.host.transport.sockets import Mesh, bind_host, new_secret

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ChildDied:
    who: str  # "rank 1" or "conductor"
    exitcode: int | None

    def __str__(self) -> str:
        code = self.exitcode
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exit code {code}"
        return f"{self.who} died ({how})"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Cluster:
    """The processes of one run of the plan in ``plan_dir`` (see the module docstring)."""

    def __init__(
        self,
        plan_dir: str | os.PathLike,
        *,
        progress: Progress | None = _stderr,
        ready_timeout: float = 300.0,
        arena_bytes: int | None = None,
        threads: int | None = 1,
        device: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        self.plan_dir = os.fspath(plan_dir)
        self.spec = load_conductor(self.plan_dir)
        self.world = self.spec.world_size
        self.progress = progress or (lambda line: None)
        self.ready_timeout = ready_timeout
        self.arena_bytes = arena_bytes
        self.threads = threads
        self.device = device  # overrides every rank's device (tests, debugging)
        self.config = dict(config or {})  # extra settings for the conductor (tests)
        self.arena: Arena | None = None
        self.mesh: Mesh | None = None
        self.secret = b""
        self.ipc_dir: str | None = None
        self.procs: dict[str, BaseProcess] = {}
        self.pids: dict[str, int] = {}
        self.client_address: str | None = None
        self.failure: ChildDied | None = None
        self._stopping = False
        self._monitor: threading.Thread | None = None
        self._conductor_address: str | None = None

    # ------------------------------------------------------------------ start

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Cluster:
        atexit.register(self.stop)
        hosts = self.spec.hosts or ("127.0.0.1",) * self.world
        bind = bind_host(hosts, hosts[0])
        slots = self.world + 1  # one region per rank, one for the conductor
        region = region_size(slots, self.arena_bytes or region_size(slots))
        self.arena = Arena.create(slots, region, tag=self.spec.model[:16])
        self.secret = new_secret()
        self.ipc_dir = tempfile.mkdtemp(prefix="wgc-")  # mode 0700: only this user's processes
        self.mesh = Mesh(
            "launcher", host=hosts[0], bind=bind, secret=self.secret, ipc_dir=self.ipc_dir
        )
        ctx = multiprocessing.get_context("spawn")
        t0 = time.monotonic()
        boot = {
            "parent": os.getpid(),
            "launcher": self.mesh.address,
            "plan_dir": self.plan_dir,
            "arena": self.arena.spec(),
            "bind": bind,
            "secret": self.secret,  # through the spawn pipe, never over a socket
            "ipc_dir": self.ipc_dir,
            "world": self.world,
            "threads": self.threads,
            "device": self.device,
            "config": self.config,
        }
        from wgc_runtime.host.processes.conductor_main import conductor_main
        from wgc_runtime.host.processes.worker_main import worker_main

        children: list[tuple[str, Any, dict[str, Any]]] = [
            ("conductor", conductor_main, {**boot, "host": hosts[0]})
        ]
        for r in range(self.world):
            host = hosts[r] if r < len(hosts) else hosts[0]
            children.append((f"rank {r}", worker_main, {**boot, "rank": r, "host": host}))
        for who, target, child_boot in children:
            proc = ctx.Process(
                target=target, args=(child_boot,), name=f"wgc-{who.replace(' ', '')}", daemon=True
            )
            proc.start()
            self.procs[who] = proc
            self.pids[who] = proc.pid or -1
        self.progress(
            f"wgc: starting {self.spec.model} @ {self.spec.placement}: conductor + "
            f"{self.world} worker{'s' if self.world != 1 else ''}"
        )
        self._handshake(t0)
        self.progress(f"wgc: ready in {time.monotonic() - t0:.1f} s")
        self._monitor = threading.Thread(target=self._watch, name="wgc-monitor", daemon=True)
        self._monitor.start()
        return self

    def _handshake(self, t0: float) -> None:
        assert self.mesh is not None
        deadline = t0 + self.ready_timeout
        table: dict[str, c.PeerEntry] = {}
        ready: set[str] = set()
        sent_peers = False
        while len(ready) < len(self.procs):
            self._check_alive(starting=True)
            if time.monotonic() > deadline:
                waiting = ", ".join(sorted(set(self.procs) - ready))
                raise DeploymentError(
                    f"not ready after {self.ready_timeout:.0f} s (still waiting for {waiting})"
                )
            for msg in self.mesh.poll(100):
                if isinstance(msg, c.Hello):
                    entry = c.PeerEntry(msg.who, msg.address, msg.host, msg.ipc)
                    table[_who(msg.who)] = entry
                    self.mesh.connect(msg.who, msg.address, msg.host, msg.ipc)
                    if msg.client:
                        self.client_address = msg.client
                        self._conductor_address = msg.address
                elif isinstance(msg, c.Progress):
                    self.progress(f"  {_who(msg.who)}: {msg.text}")
                elif isinstance(msg, c.Ready):
                    ready.add(_who(msg.who))
                    self.progress(f"  {_who(msg.who)}: ready ({msg.seconds:.1f} s)")
                elif isinstance(msg, c.StartFailed):
                    raise DeploymentError(f"{_who(msg.who)} failed to start: {msg.error}")
            if not sent_peers and len(table) == len(self.procs):
                peers = c.Peers(tuple(table.values()))
                for entry in table.values():
                    self.mesh.send(entry.who, [peers])
                sent_peers = True

    def _check_alive(self, starting: bool = False) -> None:
        for who, proc in self.procs.items():
            if proc.exitcode is not None:
                died = ChildDied(who, proc.exitcode)
                if starting:
                    raise DeploymentError(f"{died} while starting")
                self.failure = self.failure or died

    # ------------------------------------------------------------------ serving

    def _watch(self) -> None:
        """Wait on the children's sentinels; tell the conductor when a worker dies."""
        codec = Codec()
        # connected up front (the mesh's sockets belong to the main thread): a death notice must
        # not wait for a connection, and the socket lingers so closing it cannot drop the notice
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.SNDTIMEO, 1000)
        if self._conductor_address:
            sock.connect(self._conductor_address)
        try:
            while not self._stopping:
                sentinels: dict[int, str] = {p.sentinel: who for who, p in self.procs.items()}
                done = multiprocessing.connection.wait(list(sentinels), timeout=0.2)
                if self._stopping:
                    return
                for s in done:
                    who = sentinels[s]  # pyright: ignore[reportArgumentType]  (a sentinel is an int)
                    self.procs[who].join(1.0)  # reap it, so its exit code is known
                    died = ChildDied(who, self.procs[who].exitcode)
                    if self.failure is None:
                        self.failure = died
                        self.progress(f"wgc: error: {died}")
                    if who != "conductor" and self._conductor_address:
                        frames = codec.encode([c.RankDied(who, str(died))])
                        with contextlib.suppress(zmq.ZMQError):
                            sock.send_multipart([self.secret, *frames])
                if self.failure is not None:
                    return
        finally:
            sock.close()

    def wait(self, timeout: float | None = None) -> ChildDied | None:
        """Block until a child dies (its `ChildDied`) or ``timeout`` passes (None)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.failure is None and not self._stopping:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return self.failure

    def kill(self, who: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one child (tests: ``kill("rank 1")``)."""
        os.kill(self.pids[who], sig)

    # ------------------------------------------------------------------ stop

    def stop(self, grace: float = 3.0) -> None:
        """Stop every child and free the arena; idempotent and safe from any state."""
        if self._stopping and not self.procs and self.arena is None:
            return
        self._stopping = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        try:
            if self.mesh is not None:
                for who, proc in self.procs.items():
                    if proc.exitcode is None and _peer_of(who) in self.mesh.peers:
                        with contextlib.suppress(Exception):
                            self.mesh.send(_peer_of(who), [c.Shutdown()])
            deadline = time.monotonic() + grace
            for proc in self.procs.values():
                proc.join(max(0.0, deadline - time.monotonic()))
            for proc in self.procs.values():
                if proc.exitcode is None:
                    proc.terminate()
            for proc in self.procs.values():
                proc.join(1.0)
                if proc.exitcode is None:
                    proc.kill()
                    proc.join(1.0)
        finally:
            self.procs = {}
            if self._monitor is not None and self._monitor is not threading.current_thread():
                self._monitor.join(1.0)
            if self.mesh is not None:
                self.mesh.close()
                self.mesh = None
            if self.arena is not None:
                self.arena.close()
                self.arena = None
            if self.ipc_dir is not None:
                shutil.rmtree(self.ipc_dir, ignore_errors=True)
                self.ipc_dir = None


def _who(raw: Any) -> str:
    return "conductor" if raw == "conductor" else f"rank {raw}"


def _peer_of(who: str) -> int | str:
    return "conductor" if who == "conductor" else int(who.split()[1])


@contextlib.contextmanager
def terminate_as_interrupt():
    """Within the block SIGTERM raises KeyboardInterrupt in the main thread, so the same
    ``finally`` that handles Ctrl-C stops the children and unlinks the arena."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(_signum, _frame):
        raise KeyboardInterrupt()

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
