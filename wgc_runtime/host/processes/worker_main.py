"""A worker process: one rank of the plan, driving a `RankExecutor` from its sockets.

``worker_main(boot)`` (the spawn target): die with the launcher, attach the host's arena, bind
the inbox and say `Hello`, import ``rank_<r>.py`` (its spec version checked), construct its
nodes on the rank's device (reporting `Progress`), learn the `Peers`, report `Ready`, then loop:

1. run what is ready (``executor.step()``; the executor batches per (node, walk), up to the
   rank's ``batching.max_batch``);
2. hand messages for this rank straight back to the executor (same rank: by reference, no
   transport), send the rest, one batch per peer (small tensors inline, large ones as arena
   descriptors on this host, frames elsewhere) — or, while the rank is busy and its turns are
   short, hold them over a few turns (`SendHold`: every send wakes the peer and both sides'
   ZeroMQ I/O threads, ~50 µs of the sender's CPU alone for a lone send on a small machine,
   and a 3 ms decode step would send every turn); a rank with no work for its next turn,
   about to wait, sends at once, and so does one whose turn gave stream credits back
   (`StreamAck`: a producer may be waiting for them; a vocoder rank that runs its chunk walks
   back to back under a standing rule is busy, and would hold them otherwise). Consecutive
   stream items for one rank go as one `StreamItems` message (a decode step's 16 tokens: one
   tensor to encode and decode, `messages.pack_items`), taken apart again at the receiving
   rank's inbox;
3. poll the inbox (without waiting while work is ready, else up to 20 ms, busy-polling first
   for `Tuning.busy_poll_us` after activity) and deliver what arrived (frames that do not decode
   are dropped by the transport); tell arena owners which blocks this rank is done with.

**Outputs of a routed request** (`wgc_runtime.contract.route`) go from the rank's
client-out socket (`client_out`, guarded like the conductor's client port) to the client the
request id names, in the same flush as the counts that follow them to the conductor; one the
socket cannot deliver goes to the conductor, which passes it on. A connecting client's `Ping`
there is answered (`Pong`) between turns.

It leaves on `Shutdown` from the launcher or SIGTERM, and dies with the launcher. A failure while
starting is reported to the launcher (`StartFailed`) with its message. **An exception while
delivering one message** (a message that validates but makes no sense here, or a bug) is logged
(`Trouble`: once per kind of message per minute, with its traceback the first time) and fails
that message's request; the process goes on. An exception escaping ``executor.step()`` ends the
process with its traceback on stderr; the launcher's supervisor then restarts the rank (or
fails the run when it has no restart budget). `Peers` at any time rewires the mesh (a restarted
peer's new address, relayed by the conductor); `GetUsage` answers `Usage` (live requests, KV
pages in use per pool, frames dropped, and the executor's `NodeStats`: node calls, stream
buffers).
"""

from __future__ import annotations

import cProfile
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.engines.kv_pool import PoolTooLarge
from wgc_runtime.host import loading
from wgc_runtime.host.processes import child
from wgc_runtime.host.processes.external import untrack_segment
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.client_port import FRAME_HEADROOM, ClientPort
from wgc_runtime.host.transport.endpoints import EVENTS, POLLIN
from wgc_runtime.host.transport.keys import Keys
from wgc_runtime.host.transport.ring import Rings
from wgc_runtime.host.transport.ring import attach as _attach_rings
from wgc_runtime.host.transport.sockets import Mesh, Peer
from wgc_runtime.host.transport.tuning import TUNING

IDLE_POLL_MS = 20
TROUBLE_EVERY_S = 60.0


class Trouble:
    """Exceptions a process survived, logged once per kind per minute (the first with its
    traceback): a flood of one bad message cannot flood stderr."""

    def __init__(self, who: str, every_s: float = TROUBLE_EVERY_S) -> None:
        self.who = who
        self.every_s = every_s
        self.count = 0
        self._last: dict[str, float] = {}
        self._seen: set[str] = set()

    def report(self, what: str, exc: BaseException) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self._last.get(what, -1e18) < self.every_s:
            return
        self._last[what] = now
        print(f"wgc: {self.who} could not handle {what}: {exc!r}", file=sys.stderr, flush=True)
        if what not in self._seen and len(self._seen) < 64:
            self._seen.add(what)
            traceback.print_exception(exc, file=sys.stderr)


def peer_of(to: int) -> Peer:
    return "conductor" if to == m.CONDUCTOR else int(to)


class SendHold:
    """When a busy rank sends what its turns queued: at once when it is idle or its next turn
    has no work yet (it is about to wait for messages, so holding could only delay), else once
    the oldest message has waited ``hold_s`` or would pass it by holding over one more turn as
    long as the last (a long turn, e.g. a vocoder batch, sends every turn; a ~3 ms decode step
    sends every few). A message is held at most ``hold_s`` plus the misjudged turn;
    ``hold_s = 0`` sends every turn."""

    def __init__(self, hold_s: float) -> None:
        self.hold_s = hold_s
        self.since: float | None = None  # the end of the turn that queued the oldest message

    def send_now(self, now: float, turn_s: float, busy: bool) -> bool:
        """At the end of a turn that took ``turn_s`` and left messages queued: send them?"""
        if self.since is None:
            self.since = now
        if busy and now - self.since + turn_s < self.hold_s:
            return False
        self.since = None
        return True


class WorkerLoop:
    """The loop of one rank (see the module docstring)."""

    def __init__(
        self,
        rank_spec: Any,
        nodes: dict[str, Any],
        mesh: Mesh,
        device: str,
        port: ClientPort | None = None,
    ) -> None:
        from wgc_runtime.core.executor import RankExecutor

        self.rank = rank_spec.rank
        self.mesh = mesh
        self.port = port  # the client-out socket (`client_out`)
        self.local: deque[m.Message] = deque()
        self.out: list[tuple[int, m.Message]] = []
        self.credits = False  # `self.out` holds a `StreamAck`: send it this turn (`SendHold`)
        self.executor = RankExecutor(
            rank_spec,
            nodes,
            self._outbox,
            max_batch=rank_spec.batching.max_batch,
            device=device,
            direct=TUNING.direct,
        )
        self.running = True
        self.trouble = Trouble(f"rank {self.rank}")
        self.hold = SendHold(TUNING.hold_us / 1e6)

    def _outbox(self, to: int, msg: m.Message) -> None:
        if to == self.rank:
            self.local.append(msg)  # same rank: handed over by reference
        else:
            self.out.append((to, msg))
            if msg.__class__ is m.StreamAck:
                self.credits = True

    def flush(self) -> None:
        out, self.out = self.out, []
        self.credits = False
        grouped = batches(out)
        direct = grouped.pop(m.CLIENT, None)
        if direct:  # before the counts that follow them to the conductor
            undelivered = self.to_clients(direct)
            if undelivered:
                grouped[m.CONDUCTOR] = [*undelivered, *grouped.get(m.CONDUCTOR, ())]
        for to, msgs in grouped.items():
            # a decode step's items for one owner travel as one message (`StreamItems`)
            self.mesh.send(peer_of(to), m.pack_items(msgs) if to >= 0 else msgs)

    def to_clients(self, outs: list[m.Message]) -> list[m.Message]:
        """Send routed requests' outputs to their clients (`contract.route`); what cannot go
        (no port, a client not connected here, or not reading) goes through the conductor."""
        by_client: dict[bytes, list[m.Message]] = {}
        for msg in outs:
            where = m.route(getattr(msg, "request", ""))
            by_client.setdefault(where[0] if where is not None else b"", []).append(msg)
        undelivered: list[m.Message] = []
        for ident, msgs in by_client.items():
            if self.port is None or not ident or not self.port.send(ident, msgs):
                undelivered.extend(msgs)
        return undelivered

    def answer_clients(self) -> None:
        """A client connecting for direct outputs pings; the answer tells it this rank knows it
        (the port can route to it from now on)."""
        port = self.port
        if port is None or not port.sock.get(EVENTS) & POLLIN:
            return
        for ident, msg in port.recv_all():
            if isinstance(msg, c.Ping):
                port.send(ident, [c.Pong()])

    def handle(self, msg: m.Message) -> None:
        cls = msg.__class__
        if cls is c.Shutdown:
            self.running = False
        elif cls is c.Peers:
            self.mesh.set_peers(msg.table)  # pyright: ignore[reportAttributeAccessIssue]
        elif cls is c.GetUsage:
            self.mesh.send("launcher", [self.usage()])
        elif cls is m.StreamItems:
            for item in m.unpack_items(msg):  # pyright: ignore[reportArgumentType]
                self.deliver(item)
        elif not isinstance(msg, c.LAUNCHER):
            self.deliver(msg)

    def deliver(self, msg: m.Message) -> None:
        try:
            self.executor.deliver(msg)
        except Exception as exc:  # one odd message fails its request, never the process
            self.trouble.report(f"a {type(msg).__name__}", exc)
            request = getattr(msg, "request", None)
            if isinstance(request, str) and request:
                why = f"rank {self.rank} could not handle a {type(msg).__name__}: {exc}"
                self._outbox(m.CONDUCTOR, m.Failed(request, FailKind.INTERNAL, why, rank=self.rank))
                self.executor.release(request)

    def idle(self) -> bool:
        """`RankExecutor.idle`; a node that fails at it is reported (and not asked again)."""
        try:
            return self.executor.idle()
        except Exception as exc:
            self.trouble.report("a node's work ahead (`idle`)", exc)
            return True

    def usage(self) -> c.Usage:
        guard, ex = self.mesh.guard, self.executor
        pages = tuple(sorted(ex.kv.used_pages().items()))
        base = c.Usage(self.rank, len(ex.requests), pages, guard.dropped, guard.cut_offs)
        held = [(name, b.held) for req in ex.requests.values() for name, b in req.streams.items()]
        return ex.stats.usage(base, held)

    def run(self) -> None:
        executor, local, mesh, hold = self.executor, self.local, self.mesh, self.hold
        clock = time.perf_counter
        while self.running:
            t0 = clock()
            busy = bool(executor.step())
            while local:
                self.deliver(local.popleft())
                busy = True
            executor.end_turn()  # the turn's stream credits back, one ack per producer
            if self.out:
                now = clock()
                # held only while the next turn has work: never into a wait (`SendHold`)
                if hold.send_now(now, now - t0, busy and executor.pending() and not self.credits):
                    self.flush()
            if not busy:  # nothing to run: the nodes' work ahead, a little at a time
                busy = self.idle()
            for msg in mesh.poll(0 if busy else IDLE_POLL_MS):
                self.handle(msg)
            mesh.flush_releases()
            self.answer_clients()


def batches(out: list[tuple[int, m.Message]]) -> dict[int, list[m.Message]]:
    """``out`` grouped by destination, each group in the order it was produced (one send per
    peer; the order between peers never mattered)."""
    if len(out) == 1:
        return {out[0][0]: [out[0][1]]}
    grouped: dict[int, list[m.Message]] = {}
    for to, msg in out:
        grouped.setdefault(to, []).append(msg)
    return grouped


def run_profiled(run: Callable[[], None], who: str) -> None:
    """``run()``, under cProfile when `Tuning.profile` names a path prefix (the stats go to
    ``<prefix>.<who>.prof`` even when the run ends by SIGTERM)."""
    if not TUNING.profile:
        run()
        return
    profiler = cProfile.Profile()
    try:
        profiler.runcall(run)
    finally:
        profiler.dump_stats(f"{TUNING.profile}.{who}.prof")


def attach_rings(
    arena: Arena, spec: dict[str, Any], slot: int, address: str, ipc_dir: str | None
) -> Rings | None:
    """This process's same-host rings in the arena's segment (None when it has none)."""
    assert arena.shm.buf is not None  # an attached arena has its buffer
    return _attach_rings(arena.shm.buf, spec, slot, address, ipc_dir, TUNING.ring_spin_us)


def launcher_address(boot: dict[str, Any]) -> tuple[str, str, str | None]:
    """Where the launcher listens: (address, host, ipc address)."""
    return boot["launcher"], boot.get("launcher_host", "127.0.0.1"), boot.get("launcher_ipc")


def client_out(boot: dict[str, Any]) -> ClientPort | None:
    """The rank's client-out socket (a ``ROUTER``: routed requests' outputs go to their clients
    from here, `contract.route`), guarded as the conductor's client port is (the boot's
    ``client_port``: an ipc path in the private folder, or CURVE keys); None without one (a
    rank the launcher did not start, or on another host: its outputs go through the
    conductor)."""
    where = boot.get("client_port")
    if not where or not (where.get("ipc") or where.get("keys")):
        return None
    keys = Keys.of_boot(where.get("keys"))
    ipc = where.get("ipc")
    return ClientPort(boot["bind"], keys=keys, ipc_path=ipc, frame_bytes=FRAME_HEADROOM)


def wait_for_peers(mesh: Mesh, deadline: float) -> c.Peers:
    """The launcher's `Peers` table (runtime messages cannot arrive before it: nobody knows
    this process's address yet); `Shutdown` meanwhile stops the process."""
    while time.monotonic() < deadline:
        for msg in mesh.poll(100):
            if isinstance(msg, c.Peers):
                return msg
            if isinstance(msg, c.Shutdown):
                raise child.Stop()
    raise loading.DeploymentError("no peer table from the launcher in time")


def worker_main(boot: dict[str, Any]) -> None:
    child.child_setup(boot)
    rank = int(boot["rank"])
    t0 = time.monotonic()
    arena = mesh = port = None
    code = 0
    linger_ms = 0  # how long closing waits for queued messages (a StartFailed must arrive)
    try:
        a = boot.get("arena")  # none on a host the launcher does not share
        if a is not None:
            arena = Arena.attach(a["name"], a["slots"], a["region"], slot=rank)
            if boot.get("untracked"):  # `wgc worker`'s: the conductor side owns the segment
                untrack_segment(a["name"])
        mesh = Mesh(
            rank,
            host=boot["host"],
            bind=boot["bind"],
            arena=arena,
            secret=boot["secret"],
            ipc_dir=boot.get("ipc_dir"),
            keys=Keys.of_boot(boot.get("keys")),
        )
        if arena is not None and a is not None:  # the same-host rings after the regions, if any
            mesh.use_rings(attach_rings(arena, a, rank, mesh.address, boot.get("ipc_dir")))
        port = client_out(boot)
        mesh.connect("launcher", *launcher_address(boot))
        out_address = port.address if port is not None else None
        hello = c.Hello(rank, mesh.address, boot["host"], mesh.ipc_address, out_address)
        mesh.send("launcher", [hello])
        loop: WorkerLoop | None = None
        try:
            spec = loading.load_rank(boot["plan_dir"], rank)

            def progress(text: str) -> None:
                mesh.send("launcher", [c.Progress(rank, text)])

            nodes = loading.load_nodes(spec, boot.get("device"), progress)
            mesh.set_peers(wait_for_peers(mesh, time.monotonic() + 60).table)
            device = loading.resolve_device(boot.get("device") or spec.device)
            loop = WorkerLoop(spec, nodes, mesh, device, port)
            report = loop.executor.prepare_captures(progress)
            progress(report.summary())
        except child.Stop:
            raise
        except BaseException as exc:
            if isinstance(exc, loading.DeploymentError | PoolTooLarge):
                # the deployment's own fault (a node impl that does not import, a pool past
                # its device): the message says what to change, a traceback adds nothing
                mesh.send("launcher", [c.StartFailed(rank, str(exc))])
            else:
                detail = "".join(traceback.format_exception_only(exc)).strip()
                mesh.send("launcher", [c.StartFailed(rank, detail)])
                traceback.print_exc()
            code, linger_ms = 1, 1000
        if loop is not None:
            mesh.send("launcher", [c.Ready(rank, time.monotonic() - t0)])
            run_profiled(loop.run, f"rank{rank}")
    except child.Stop:
        pass
    except BaseException:
        print(f"wgc: rank {rank} crashed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    finally:
        if port is not None:
            port.close()
        if mesh is not None:
            mesh.close(linger_ms)
            if linger_ms:  # os._exit ends ZeroMQ's I/O thread: let it send what is queued first
                mesh.ctx.destroy(linger=linger_ms)
        if arena is not None:
            arena.close()
    child.fast_exit(code)
