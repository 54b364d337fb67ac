"""Start a compiled plan as processes: one conductor and one worker per rank, and keep them up.

`Cluster(plan_dir).start()`:

1. creates the host's shared-memory segment (one arena region per rank and one for the
   conductor), the deployment's secret (every message between its processes carries it, see
   `wgc_runtime.host.transport.sockets`), its CURVE keys when the placement names hosts (or
   ``curve=True``; `wgc_runtime.host.transport.keys`) and a private folder (mode 0700) for the
   processes' ``ipc://`` sockets, decides the conductor's client port (`client_port`: never open
   to strangers), and binds the launcher's own inbox;
2. starts the conductor and every worker (`spawning`; `children`: spawned here with
   multiprocessing's ``spawn`` context; the Ray launcher places workers on other machines); each
   binds its inbox and says hello; the launcher sends everybody the address table;
3. shows progress while workers import their nodes and warm up, and waits (with a deadline)
   until all are ready (`readiness`). A child that dies or fails to load ends the start with its
   message. The ready line says where the time went: before the launcher started (the CLI and the
   compile), until the slowest process was up (interpreter and imports: torch), and loading
   (nodes, captured steps); every process's own times follow.

**The launcher does not import torch** (nor numpy): it speaks the tensor-free launcher protocol
(`control_codec`) and creates the segment without mapping it (`segment`), so its own start costs
no torch import; the conductor and the workers import it.

While it serves, the supervisor (`supervisor`, a thread) watches the children: a worker that dies
is restarted within the restart budget (``restarts`` per rank within ``restart_window_s``; 0, the
default for a library caller and for ``wgc run``: never), and only the requests it held fail;
`health` says ``degraded`` meanwhile. A conductor that dies, or a worker past the budget, is a
final failure: `Cluster.failure` records it and `wait` returns it (``wgc run`` and ``wgc serve``
then stop and exit non-zero, naming the process).

`stop()` (also from ``finally``, ``atexit``, Ctrl-C and SIGTERM) asks every child to exit,
terminates and then kills stragglers, and unlinks the segment: no orphan processes, nothing left
in ``/dev/shm``. Children also die with the launcher if it is killed outright (a parent-death
signal and a watchdog thread, see `child.die_with_parent`), and multiprocessing's resource
tracker unlinks the segment then.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from wgc_runtime.contract import control as c
from wgc_runtime.host.loading import load_conductor
from wgc_runtime.host.processes import ray_launcher
from wgc_runtime.host.processes.children import Child, LocalChild, ending, stop_children
from wgc_runtime.host.processes.external import ExternalWorkers, write_join
from wgc_runtime.host.processes.health import ChildDied, Health
from wgc_runtime.host.processes.readiness import handshake, process_age, where_time_went
from wgc_runtime.host.processes.spawning import boot_of, spawn_conductor, spawn_worker
from wgc_runtime.host.processes.supervisor import RestartBudget, Supervisor, UsageQuery
from wgc_runtime.host.scratch import private_dir
from wgc_runtime.host.transport.client_port import client_port_kind, ipc_usable
from wgc_runtime.host.transport.control_codec import ControlCodec
from wgc_runtime.host.transport.keys import Authenticator, ClientKey, Keys
from wgc_runtime.host.transport.segment import Segment, region_size
from wgc_runtime.host.transport.sockets import (
    Mesh,
    bind_address,
    is_loopback,
    named_hosts,
    new_secret,
)
from wgc_runtime.host.transport.tuning import Tuning

Progress = Callable[[str], None]

# what children send the launcher
LAUNCHER_IN = (c.Hello, c.Progress, c.Ready, c.StartFailed, c.Usage)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Cluster:
    """The processes of one run of the plan in ``plan_dir`` (see the module docstring).

    ``curve``: CURVE on every socket (None: when the placement names hosts or ``listen`` is not
    loopback); ``listen``: the interface every socket binds (``0.0.0.0`` only when asked; None:
    `bind_address`'s rule). ``client_port`` (a deployment without ``curve``; None:
    ``$WGC_CLIENT_PORT``, else ``ipc``): ``ipc``, the client port is an ``ipc://`` socket in the
    private folder (this user's processes alone can connect; where ipc sockets are not available,
    ``curve``), or ``curve``, a loopback TCP port with CURVE. With CURVE everywhere it is a TCP port
    with the deployment's keys. Clients of a CURVE port need `client_key`. ``ray``: a Ray cluster's
    address (``auto``: the one this machine is in; None: ``$WGC_RAY``, if set): every worker is
    started on the Ray node of its rank's host (`ray_launcher`). ``external``: start no worker; wait
    for ranks started elsewhere (``wgc worker``) to join (`external`)."""

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
        restarts: int = 0,
        restart_window_s: float = 600.0,
        curve: bool | None = None,
        listen: str | None = None,
        client_port: str | None = None,
        ray: str | None = None,
        external: ExternalWorkers | None = None,
    ) -> None:
        self.plan_dir = os.fspath(plan_dir)
        self.spec = load_conductor(self.plan_dir)
        self.world = self.spec.world_size
        self.hosts = tuple(self.spec.hosts) or ("127.0.0.1",) * self.world
        self.progress = progress or (lambda line: None)
        self.ready_timeout = ready_timeout
        self.arena_bytes = arena_bytes
        self.threads = threads
        self.device = device  # overrides every rank's device (tests, debugging)
        self.config = dict(config or {})  # extra settings for the conductor (tests)
        wide = listen is not None and not is_loopback(listen)  # reachable from elsewhere
        self.curve = (named_hosts(self.hosts) or wide) if curve is None else curve
        self.listen = listen
        self.client_port = client_port_kind(client_port)  # WG894 for a kind it does not know
        self.client_ipc: str | None = None  # the client port's ipc path (`start`)
        self.port_keys: Keys | None = None  # its CURVE keys
        # a Ray cluster's address (or "auto"): workers on its nodes (`wgc run`: $WGC_RAY)
        self.ray = ray if ray is not None else (os.environ.get("WGC_RAY") or None)
        self.external = external
        self.budget = RestartBudget(restarts, restart_window_s)
        self.segment: Segment | None = None
        self.mesh: Mesh | None = None
        self.secret = b""
        self.keys: Keys | None = None
        self.ipc_dir: str | None = None
        self.procs: dict[str, Child] = {}
        self.table: dict[str, c.PeerEntry] = {}
        self.client_address: str | None = None
        self.failure: ChildDied | None = None
        self.restart_times: list[float] = []  # seconds from a worker's death to its `Ready`
        self.timings: dict[str, float] = {}  # where start-up went (see `start`)
        self._boot: dict[str, Any] = {}
        self._degraded: set[str] = set()
        self._stopping = False
        self._supervisor: Supervisor | None = None

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

    @property
    def conductor_host(self) -> str:
        return self.hosts[0]

    def host_of(self, rank: int) -> str:
        return self.hosts[rank] if rank < len(self.hosts) else self.hosts[0]

    def start(self) -> Cluster:
        atexit.register(self.stop)
        before = process_age()
        t0 = time.monotonic()
        slots = self.world + 1  # one region per rank, one for the conductor
        region = region_size(slots, self.arena_bytes or region_size(slots))
        tuning = Tuning.from_env()  # the environment now (its children read theirs at start)
        ring = tuning.ring_kib << 10 if tuning.ring else 0  # same-host rings after the regions
        self.segment = Segment(slots, region, tag=self.spec.model[:16], ring=ring)
        self.secret = new_secret()
        self.keys = Keys.generate() if self.curve else None
        # mode 0700: only this user's processes; a SIGKILLed launcher's is swept at the next start
        self.ipc_dir = private_dir("wgc-")
        self.client_ipc, self.port_keys = self._client_port(self.ipc_dir)
        own = self.conductor_host
        self.mesh = Mesh(
            "launcher",
            host=own,
            bind=bind_address(own, self.hosts, self.listen),
            secret=self.secret,
            ipc_dir=self.ipc_dir,
            keys=self.keys,
            codec=ControlCodec(LAUNCHER_IN),
        )
        self._boot = boot_of(self)
        if self.ray is not None:
            ray_launcher.connect(self.ray)
        if self.external is not None:
            plan = f"{self.spec.model} @ {self.spec.placement}"
            write_join(self.external.join_file, self._boot, self.hosts, plan)
        spawn_conductor(self)
        for r in range(self.world):
            spawn_worker(self, r)
        spawned = time.monotonic()
        self.progress(
            f"wgc: starting {self.spec.model} @ {self.spec.placement}: conductor + "
            f"{self.world} worker{'s' if self.world != 1 else ''}"
        )
        up, loaded = handshake(self, t0)
        total = time.monotonic() - t0
        self.timings = {
            "before_launcher": before or 0.0,
            "spawn": spawned - t0,
            "up": max(up.values(), default=0.0),
            "loaded": max(loaded.values(), default=0.0),
            "ready": total,
        }
        went = where_time_went(self.timings["before_launcher"], up, loaded)
        self.progress(f"wgc: ready in {total:.1f} s ({went})")
        self._supervisor = Supervisor(self, self.budget)
        self._supervisor.thread.start()  # it owns the mesh from here on
        return self

    def _client_port(self, ipc_dir: str) -> tuple[str | None, Keys | None]:
        """The client port's ipc path or its CURVE keys (see the class docstring)."""
        if self.curve:
            return None, self.keys
        path = os.path.join(ipc_dir, "client.sock")
        if self.client_port == "ipc" and ipc_usable(path):
            return path, None
        if self.client_port == "ipc":
            self.progress(f"wgc: no ipc socket at {path}: the client port is TCP with CURVE")
        return None, Keys.generate()

    # ------------------------------------------------------------------ serving

    def _fail(self, died: ChildDied) -> None:
        """A final failure (called by the supervisor)."""
        if self.failure is None:
            self.failure = died
            self.progress(f"wgc: error: {died}")

    def wait(self, timeout: float | None = None) -> ChildDied | None:
        """Block until the run fails for good (its `ChildDied`) or ``timeout`` passes (None). A
        worker the supervisor restarts is not a failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.failure is None and not self._stopping:
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        return self.failure

    def health(self) -> Health:
        if self.failure is not None or self._stopping or self._supervisor is None:
            why = str(self.failure) if self.failure else None
            return Health("down", restarts=len(self.restart_times), failure=why)
        restarting = tuple(sorted(self._degraded))
        status = "degraded" if restarting else "ok"
        restarted = tuple(sorted(dict(self._supervisor.restarted).items()))
        return Health(status, restarting, len(self.restart_times), restarted=restarted)

    def alive(self) -> dict[str, bool]:
        """Process -> whether it is up and serving (a worker being restarted is not yet); a
        local process is read from the kernel too (`ending`), not only from the supervisor."""
        return {
            who: p.exitcode is None
            and not (isinstance(p, LocalChild) and ending(p.pid))
            and who not in self._degraded
            for who, p in list(self.procs.items())
        }

    def usage(self, timeout: float = 5.0) -> dict[str, c.Usage]:
        """Every live process's `Usage` (what it holds now), as far as they answer in time."""
        if self._supervisor is None or self._stopping:
            return {}
        q = UsageQuery()
        self._supervisor.queries.put(q)
        q.done.wait(timeout)
        return dict(q.answers)

    @property
    def client_key(self) -> ClientKey | None:
        """What a client needs to connect (`Client(address, key=...)`; `ClientKey.save` writes
        it for another process); None when the client port is an ipc socket (set by `start`)."""
        return self.port_keys.client if self.port_keys is not None else None

    def kill(self, who: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to one child (tests: ``kill("rank 1")``)."""
        self.procs[who].send_signal(sig)

    @property
    def pids(self) -> dict[str, int]:
        return {who: p.pid for who, p in self.procs.items() if p.pid > 0}  # none: external

    @staticmethod
    def _who(raw: Any) -> str:
        return "conductor" if raw == "conductor" else f"rank {raw}"

    @staticmethod
    def _order(who: str) -> int:
        return -1 if who == "conductor" else int(who.split()[1])

    @staticmethod
    def _peer(who: str) -> int | str:
        return "conductor" if who == "conductor" else int(who.split()[1])

    # ------------------------------------------------------------------ stop

    def stop(self, grace: float = 3.0) -> None:
        """Stop every child and free the segment; idempotent and safe from any state."""
        if self._stopping and not self.procs and self.segment is None:
            return
        self._stopping = True
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        sup = self._supervisor
        if sup is not None and sup.thread is not threading.current_thread():
            sup.thread.join(2.0)  # it leaves within a poll once `_stopping` is set
        try:
            if self.mesh is not None:
                for who, proc in self.procs.items():
                    peer = self._peer(who)
                    if proc.exitcode is None and peer in self.mesh.peers:
                        with contextlib.suppress(Exception):
                            self.mesh.send(peer, [c.Shutdown()])
            stop_children(list(self.procs.values()), grace)
        finally:
            self.procs = {}
            if self.mesh is not None:
                self.mesh.close()
                if self.keys is not None:  # another deployment may start in this process
                    Authenticator.release(self.mesh.ctx)
                self.mesh = None
            if self.segment is not None:
                self.segment.close()
                self.segment = None
            if self.ipc_dir is not None:
                shutil.rmtree(self.ipc_dir, ignore_errors=True)
                self.ipc_dir = None
            if self.external is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.external.join_file)


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
