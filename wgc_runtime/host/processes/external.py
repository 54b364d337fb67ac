"""Workers started by another launcher (SLURM, Kubernetes, a shell script): ``wgc worker``.

**The conductor side** (``wgc run/serve --external-workers JOIN.json``: `Cluster(plan, external=
ExternalWorkers(path))`) starts the conductor as usual but no worker: it writes the *join file*
(`write_join`: mode 0600, written whole then renamed, so a reader never sees half of it) with
what a worker needs to join, the same settings the local launcher hands its children through the
spawn pipe: the launcher's address, the deployment's secret and its CURVE keys, the plan's
folder, its hosts. Then it waits ``timeout`` seconds for every rank to say hello; a rank that
never does is an error naming it and the command that starts it (`never_joined`). The file is
removed when the run stops. Each rank is an `ExternalChild`: no process of this machine, so its
end is seen through its inbox (`Liveness`: a connection that sends nothing, watched by ZeroMQ's
socket monitor, with TCP keepalive for a host that vanished): a worker whose inbox closes is a
dead rank for the supervisor. A restart (``wgc serve``'s budget) waits for the outside launcher
to start the rank again (``restartPolicy``, ``srun --requeue``); it rejoins with the same file.

**The worker side** (``wgc worker --join JOIN.json --rank R``: `join_boot`, then `run_workers`)
waits for the file, reads it (never an argument: ``ps`` would show the secret), checks that the
plan folder here is the same plan, and spawns each rank's worker as the local launcher would
(`worker_main`, a child of the ``wgc worker`` process, dying with it). A worker on the
conductor's host shares its arena and ``ipc`` folder; elsewhere tensors cross as frames (the
Ray launcher's rule). ``wgc worker`` exits when its workers do (0 after the conductor's
``Shutdown``), and stops them and exits 1 when the conductor side goes away or cannot be reached.
A worker that is not on the conductor's host binds its inbox in an ``ipc`` folder of its own
(`wgc_runtime.host.scratch`: it carries an owner file); ``wgc worker`` sweeps the folders of dead
owners when it starts and when it exits, so a SIGKILLed worker's (or a SIGKILLed ``wgc worker``'s,
at the next start) is removed.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import TYPE_CHECKING, Any

import zmq
from zmq.utils.monitor import parse_monitor_message

from wgc_runtime.host.transport.keys import Keys
from wgc_runtime.host.transport.sockets import watch

if TYPE_CHECKING:
    from wgc_runtime.host.processes.launcher import Cluster

JOIN_VERSION = 1
CONNECT_TIMEOUT_S = 60.0  # how long `wgc worker` tries to reach the conductor side
SHUTDOWN_GRACE_S = 3.0  # how long workers may take to end on a departed conductor's Shutdown
_WATCHED = zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
# TCP keepalive, not ZMTP heartbeats (a PING makes an inbox's ZMQ_EVENTS say POLLIN with nothing
# to read): a peer host that vanished reads as gone after about 10 + 3 * 5 s
KEEPALIVE = (
    (zmq.TCP_KEEPALIVE, 1),
    (zmq.TCP_KEEPALIVE_IDLE, 10),
    (zmq.TCP_KEEPALIVE_INTVL, 5),
    (zmq.TCP_KEEPALIVE_CNT, 3),
)
_ids = itertools.count(2)  # `ExternalChild.pid`: no process here (see `Cluster.pids`)


class JoinError(RuntimeError):
    """A join file that cannot be used, or a conductor side that is not there (exit 1)."""


@dataclass(frozen=True, slots=True)
class ExternalWorkers:
    """Where the conductor side writes the join file, and how long it waits for the ranks."""

    join_file: str
    timeout: float = 300.0


def join_command(join_file: str, rank: int) -> str:
    return f"wgc worker --join {join_file} --rank {rank}"


# ---------------------------------------------------------------------------- conductor side


def plan_digest(plan_dir: str) -> str:
    """What the processes run, as one hash: every generated module of the plan folder."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(plan_dir)):
        if name.endswith(".py"):
            with open(os.path.join(plan_dir, name), "rb") as f:
                h.update(name.encode() + b"\0" + f.read() + b"\0")
    return h.hexdigest()


def write_join(path: str, boot: dict[str, Any], hosts: tuple[str, ...], plan: str) -> None:
    """The join file for the launcher's ``boot`` settings (see the module docstring); ``plan``:
    ``MODEL @ PLACEMENT``; the workers check the plan's `plan_digest` too."""
    shared = {k: v for k, v in boot.items() if k != "parent"}
    shared["secret"] = boot["secret"].hex()
    digest = plan_digest(boot["plan_dir"])
    doc = {
        "wgc_join": JOIN_VERSION,
        "plan": {"name": plan, "digest": digest},
        "boot": shared,
        "hosts": list(hosts),
    }
    # a fresh name (O_EXCL, mode 0600): nothing planted in a shared folder receives the secret
    fd, tmp = tempfile.mkstemp(prefix=".wgc-join-", dir=os.path.dirname(path) or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def never_joined(ext: ExternalWorkers, cluster: Cluster, waiting: list[str]) -> str:
    """The error for ranks that did not say hello within the timeout."""
    lines = [
        f"{', '.join(waiting)} never joined within {ext.timeout:.0f} s; start "
        + ("it" if len(waiting) == 1 else "each")
        + " where its placement puts it:"
    ]
    for who in waiting:
        rank = int(who.split()[1])
        lines.append(f"  on {cluster.host_of(rank)}: {join_command(ext.join_file, rank)}")
    return "\n".join(lines)


class Liveness:
    """Whether the socket at ``address`` is still there: a connection that never sends, whose
    close (or unanswered heartbeats) ZeroMQ's monitor reports."""

    def __init__(self, ctx: zmq.Context, address: str, keys: Keys | None) -> None:
        self.address = address
        self.sock = ctx.socket(zmq.PUSH)
        self.sock.setsockopt(zmq.LINGER, 0)
        for option, value in KEEPALIVE:  # a host that vanished (no FIN): the kernel's probes
            self.sock.setsockopt(option, value)
        if keys is not None:
            keys.peer.apply(self.sock)
        self.monitor = watch(self.sock, _WATCHED)
        self.sock.connect(address)
        self.connected = False
        self.gone = False

    def poll(self) -> bool:
        """Whether the peer went away after it was reached (reads the monitor's events)."""
        while not self.gone and self.monitor.poll(0):
            event = parse_monitor_message(self.monitor.recv_multipart())["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.connected = True
            elif event == zmq.EVENT_DISCONNECTED and self.connected:
                self.gone = True
        return self.gone

    def close(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            self.sock.disable_monitor()
        self.monitor.close(0)
        self.sock.close(0)


class ExternalChild:
    """The launcher's `children.Child` for a rank someone else starts: its end is its inbox
    closing (once it said hello); a kill (the supervisor's, for a rank that did not come back in
    time) only marks it dead here."""

    sentinel = None

    def __init__(self, cluster: Cluster, rank: int) -> None:
        self.cluster = cluster
        self.who = f"rank {rank}"
        self.pid = -next(_ids)  # no process on this machine
        self._live: Liveness | None = None
        self._code: int | None = None
        self._lock = threading.Lock()  # the supervisor and the HTTP server's health ask

    @property
    def exitcode(self) -> int | None:
        with self._lock:
            return self._poll()

    def _poll(self) -> int | None:
        if self._code is None:
            entry = self.cluster.table.get(self.who)
            mesh = self.cluster.mesh
            if entry is not None and mesh is not None:
                if self._live is None or self._live.address != entry.address:
                    if self._live is not None:
                        self._live.close()
                    self._live = Liveness(mesh.ctx, entry.address, self.cluster.keys)
                if self._live.poll():
                    self._end(-signal.SIGKILL)  # how it ended is known on its host only
        return self._code

    def _end(self, code: int) -> None:
        self._code = code
        if self._live is not None:
            self._live.close()
            self._live = None

    def send_signal(self, sig: int) -> None:
        with self._lock:
            if self._code is None and sig in (signal.SIGKILL, signal.SIGTERM):
                self._end(-sig)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.05)


# ---------------------------------------------------------------------------- worker side


def read_join(path: str, wait_s: float) -> dict[str, Any]:
    """The join file at ``path``, waiting up to ``wait_s`` seconds for it to appear."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise JoinError(
                f"no join file `{path}` after {wait_s:g} s: start the conductor side with "
                f"`--external-workers {path}` (on a folder every host sees)"
            )
        time.sleep(0.2)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("wgc_join") != JOIN_VERSION:
            raise ValueError(f"version {doc.get('wgc_join')!r}, this wgc reads {JOIN_VERSION}")
        doc["boot"]["secret"] = bytes.fromhex(doc["boot"]["secret"])
        return doc
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise JoinError(f"`{path}` is not a wgc join file: {exc}") from None


def join_boot(doc: dict[str, Any], rank: int, plan_dir: str | None = None) -> dict[str, Any]:
    """The boot settings of rank ``rank``'s worker from a join file (``plan_dir``: where the plan
    is on this host, when not at the conductor side's path)."""
    from wgc_runtime.host.loading import DeploymentError, load_conductor
    from wgc_runtime.host.transport.sockets import bind_address

    boot = dict(doc["boot"])
    hosts = tuple(doc["hosts"])
    world = int(boot["world"])
    if not 0 <= rank < world:
        raise JoinError(f"rank {rank} is not in this deployment (ranks 0..{world - 1})")
    boot["plan_dir"] = plan_dir or boot["plan_dir"]
    try:
        spec = load_conductor(boot["plan_dir"])
    except DeploymentError as exc:
        raise JoinError(f"the plan `{boot['plan_dir']}` cannot be loaded here: {exc}") from None
    theirs = doc.get("plan") or {}
    if spec.world_size != world or plan_digest(boot["plan_dir"]) != theirs.get("digest"):
        raise JoinError(
            f"the plan `{boot['plan_dir']}` ({spec.model} @ {spec.placement}, {spec.world_size} "
            f"ranks) is not the conductor side's ({theirs.get('name')}, {world} ranks): compile "
            "the same model and placement, or give `--plan` the conductor side's folder"
        )
    host = hosts[rank] if rank < len(hosts) else hosts[0]
    if host != boot["launcher_host"]:  # another machine: no shared memory, no ipc folder
        boot.update(arena=None, ipc_dir=None, launcher_ipc=None)
    boot.update(
        who=f"rank {rank}", host=host, bind=bind_address(host, hosts), rank=rank, untracked=True
    )
    return boot


def untrack_segment(name: str) -> None:
    """An attached segment this process tree did not create must not be unlinked by its
    resource tracker at exit (Python < 3.13 registers every attach): the conductor side owns it."""
    with contextlib.suppress(Exception):
        resource_tracker.unregister(f"/{name}", "shared_memory")


def _ended_cleanly(children: dict[str, Any], grace: float) -> bool:
    """Whether every child ends with exit code 0 within ``grace`` seconds."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        codes = [ch.exitcode for ch in children.values()]
        if all(c is not None for c in codes):
            return all(c == 0 for c in codes)
        time.sleep(0.05)
    return False


def run_workers(doc: dict[str, Any], boots: list[dict[str, Any]], say: Any) -> int:
    """Start a worker per boot (children of this process), watch them and the conductor side;
    the exit code (see the module docstring)."""
    from wgc_runtime.host.processes import entry
    from wgc_runtime.host.processes.children import LocalChild, stop_children
    from wgc_runtime.host.scratch import sweep

    sweep()  # what dead workers of this host left
    keys = Keys.of_boot(doc["boot"].get("keys"))
    ctx = zmq.Context()
    live = Liveness(ctx, doc["boot"]["launcher"], keys)
    me = os.getpid()
    children = {b["who"]: LocalChild(entry.worker, {**b, "parent": me}, b["who"]) for b in boots}
    code, t0, stopping = 0, time.monotonic(), False

    def on_term(_signum: int, _frame: Any) -> None:
        nonlocal stopping
        stopping = True

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        while not stopping:
            ended = {w: ch.exitcode for w, ch in children.items() if ch.exitcode is not None}
            if len(ended) == len(children):
                failed = {w: e for w, e in ended.items() if e != 0}
                for who, exitcode in failed.items():
                    say(f"wgc worker: {who} ended with exit code {exitcode}")
                code = 1 if failed else 0
                break
            if live.poll():
                # the conductor side's Shutdown and its departure race: workers that were told
                # to stop end on their own within a moment, and that is a clean end
                if _ended_cleanly(children, SHUTDOWN_GRACE_S):
                    break
                say(f"wgc worker: the conductor side at {live.address} went away; stopping")
                code = 1
                break
            if not live.connected and time.monotonic() - t0 > CONNECT_TIMEOUT_S:
                say(f"wgc worker: cannot reach the conductor side at {live.address}; stopping")
                code = 1
                break
            time.sleep(0.1)
    except KeyboardInterrupt:
        code = 130
    finally:
        signal.signal(signal.SIGTERM, old)
        stop_children(list(children.values()), grace=0.0)  # ended, or to be stopped now
        live.close()
        ctx.term()
        sweep()  # a worker of ours that was SIGKILLed left its folder
    return code
