"""The conductor process: clients in, a `ConductorCore` in the middle, ranks out.

``conductor_main(boot)`` (the spawn target): die with the launcher, attach the arena (its own
region, slot ``world_size``), bind the inbox and the client port (`ClientPort`, ``ROUTER``),
import ``conductor.py`` (its spec version checked; it holds every stream's spec), learn the
peers, report ready, then loop: poll the inbox and the client port (busy-polling first for
`Tuning.busy_poll_us` after activity, then asleep until a message comes or `timers` says the
deadlines' tick or the clients' keep-alive `Alive`s are due), hand client requests to the core
(`Submit` / `Cancel`: the core queues beyond ``max_concurrent_requests``), deliver rank
messages, send what the core emits (walk starts and values to ranks, one batch per rank per
turn; `Output` and `Finished` to the client that asked: a client connected to every rank's
client-out socket gets its outputs from the ranks directly, `GetRoutes` and `Submit.direct`,
`wgc_runtime.contract.route`).

**At the door** (`wgc_runtime.host.admission`): a `Submit` is checked against the deployment's
input limits (``limits`` in the boot config, `wgc_runtime.host.inputs.Limits`; its segment count
before any segment is decoded) and the model first (`wgc_runtime.core.conductor.door`;
``strict`` in the boot config for `wgc run` and `wgc serve`) and refused with every problem
(kind ``rejected``), seeded when it names a seed, and run under an internal id when its id was
used before (an ended id may be reused). `GetSessions` answers the sessions kept (dropping
one first when asked: `DELETE /v1/sessions/{id}`). `GetStats` answers the
counters of `wgc_runtime.core.conductor.stats` (walk latencies, outcomes, queue depth); a
``trace`` request also gets a `WalkTrace` per walk start and finish.

**A rank died** (`RankDied` from the launcher's supervisor, which watches the processes):

* when the supervisor restarts it (``restarting``), only the requests that rank held fail ("rank
  N died (...)", kind ``internal``; `recovery.RankWatch` knows who holds what), or run again
  where the plan's walks say ``replay`` (`replays`), the others go on,
  and admission is held: new requests queue until the rank is back (the supervisor's `Peers`
  update, which this process relays to every rank before anything else, then `Ready`); a
  request that needs the rank while it is down fails then;
* otherwise (no restart budget) every running and queued request fails at once and every later
  request is refused with the same message; the launcher then stops the run.

**A client that went away** (a reply or keep-alive to it fails: `ClientPort.send`) has every
request it left cancelled at once, which releases them on every rank (slots, KV pages,
buffers). An exception while handling one message (a bug, or a message that validates but makes
no sense) is logged and fails that message's request; it never ends the process. `GetUsage`
from the launcher answers `Usage` (live requests, KV pages promised per pool, frames dropped).
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import msgspec
import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.core.conductor.door import describe
from wgc_runtime.host import loading
from wgc_runtime.host.admission import RequestIds, admit
from wgc_runtime.host.inputs import InputError, Limits, check_segments
from wgc_runtime.host.processes import child, replays
from wgc_runtime.host.processes.recovery import RankWatch
from wgc_runtime.host.processes.routes import RankRoutes
from wgc_runtime.host.processes.timers import Timers, tick_every
from wgc_runtime.host.processes.worker_main import (
    Trouble,
    attach_rings,
    batches,
    launcher_address,
    peer_of,
    run_profiled,
    wait_for_peers,
)
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.keys import Keys
from wgc_runtime.host.transport.sockets import ClientPort, Mesh
from wgc_runtime.host.transport.tuning import TUNING


def segment_of(seg: c.InputSegment) -> Segment:
    return Segment(seg.modality, seg.data, tuple(seg.fields.items()))


class ConductorLoop:
    """The conductor's loop (see the module docstring)."""

    def __init__(self, plan_dir: str, mesh: Mesh, port: ClientPort, config: dict[str, Any]):
        from wgc_runtime.core.conductor import ConductorCore
        from wgc_runtime.core.conductor.stats import ConductorStats

        self.spec = loading.load_conductor(plan_dir)
        self.mesh = mesh
        self.port = port
        config = dict(config)
        self.strict = bool(config.pop("strict", False))  # the door's (see `door`)
        self.limits = Limits(**config.pop("limits", {}))  # what one input may be (the door's)
        self.core = ConductorCore(self.spec, self._outbox, **config)
        self.stats = ConductorStats(self.spec, time.monotonic)
        self.out: list[tuple[int, m.Message]] = []
        self.clients: dict[str, bytes] = {}  # (internal) request id -> client identity
        self.ids = RequestIds()
        self.dead: str | None = None  # the run is stopping (a rank died for good)
        self.watch = RankWatch(self.spec)
        self.core.deadlines.notes = self.watch.notes  # a stalled request's error says more
        self.trouble = Trouble("the conductor")
        direct_out = TUNING.direct_out and not self.core.may_replay
        self.routes = RankRoutes(self.spec.world_size, direct_out)  # for direct outputs
        self.running = True
        d = self.core.deadlines
        self.timers = Timers(tick_every(d.walk_timeout_s, d.idle_timeout_s, d.queue_timeout_s))
        self.poller = zmq.Poller()
        mesh.register(self.poller)  # its inbox, and its ring doorbell if it has rings
        self.poller.register(port.sock, zmq.POLLIN)

    def _outbox(self, to: int, msg: m.Message) -> None:
        self.out.append((to, msg))

    # ---------------------------------------------------------------- clients

    def on_client(self, ident: bytes, msg: m.Message) -> None:
        try:
            self._on_client(ident, msg)
        except Exception as exc:  # one odd message must not end the conductor
            self.trouble.report(f"a {type(msg).__name__} from a client", exc)

    def _on_client(self, ident: bytes, msg: m.Message) -> None:
        if isinstance(msg, c.Ping):
            self.port.send(ident, [c.Pong()])
        elif isinstance(msg, c.Submit):
            self._submit(ident, msg)
        elif isinstance(msg, c.Cancel):
            internal = self.ids.internal(msg.request)
            if internal is not None and self.clients.get(internal) == ident:
                self.core.cancel(internal)
        elif isinstance(msg, c.GetStats):
            reply = self.stats.reply(len(self.core.active), len(self.core.queue))
            self.port.send(ident, [reply])
        elif isinstance(msg, c.GetRoutes):
            routes = self.routes.addresses() if m.routable(ident) else ()
            self.port.send(ident, [c.Routes(routes)])
        elif isinstance(msg, c.GetSessions):
            dropped = msg.drop is not None and self.core.drop_session(msg.drop)
            table = self.core.sessions
            now = self.core.clock()
            reply = c.SessionList(table.listing(now), table.max_sessions, dropped)
            self.port.send(ident, [reply])

    def _submit(self, ident: bytes, msg: c.Submit) -> None:
        rid = msg.request

        def refuse(kind: FailKind, message: str) -> None:
            self.stats.ended(rid, kind)
            self.port.send(ident, [m.Finished(rid, False, kind, message)])

        if self.dead is not None:
            refuse(FailKind.INTERNAL, f"{self.dead}; the run is stopping")
            return
        if not rid or self.ids.live(rid):
            refuse(FailKind.REJECTED, f"request id `{rid}` is empty or already in use")
            return
        try:
            check_segments(len(msg.inputs), "inputs", self.limits)  # before decoding any
        except InputError as exc:
            refuse(FailKind.REJECTED, f"bad request:\n  {exc}")
            return
        try:
            segments = [segment_of(s) for s in msg.inputs]
            request = self.spec.request(segments, msg.want, msg.options)
            request, problems = admit(
                self.spec,
                request,
                strict=self.strict,
                seed=msg.seed,
                limits=self.limits,
                session=msg.session,
            )
        except Exception as exc:
            refuse(FailKind.REJECTED, f"bad request: {exc}")
            return
        if problems:
            refuse(FailKind.REJECTED, describe(problems))
            return
        direct = msg.direct > 0 and not msg.trace and m.routable(ident)
        direct = direct and bool(self.routes.addresses())
        internal = self.ids.open(rid, (msg.direct, ident.decode()) if direct else None)
        self.clients[internal] = ident
        if msg.trace:
            self.stats.traced.add(internal)
        try:
            self.core.submit(internal, self.ids.seeded(request, internal))
        except Exception as exc:
            self.clients.pop(internal, None)
            self.ids.close(internal)
            refuse(FailKind.REJECTED, f"bad request: {exc}")
            return
        if internal in self.core.queue:  # a request that starts at once gets no reply round trip
            self.port.send(ident, [c.Accepted(rid, True)])

    # ---------------------------------------------------------------- ranks

    def on_inbox(self, msg: m.Message) -> None:
        try:
            self._on_inbox(msg)
        except Exception as exc:  # one odd message must not end the conductor
            self.trouble.report(f"a {type(msg).__name__}", exc)
            self._fail(getattr(msg, "request", None), f"the conductor could not handle it: {exc}")

    def _on_inbox(self, msg: m.Message) -> None:
        if isinstance(msg, c.Shutdown):
            self.running = False
        elif isinstance(msg, c.RankDied):
            if msg.restarting:
                self.rank_down(msg.who, msg.reason or f"{msg.who} died")
            else:
                self.rank_died(msg.reason or f"{msg.who} died")
        elif isinstance(msg, c.Peers):  # a restarted rank's new address: theirs first, then ours
            for r in range(self.spec.world_size):
                if r not in self.watch.down:
                    self.mesh.send(r, [msg])
            self.mesh.set_peers(msg.table)
            self.routes.learn(msg.table)
        elif isinstance(msg, c.Ready):
            if isinstance(msg.who, int) and self.watch.up(msg.who):
                self.core.hold_admission(False)
        elif isinstance(msg, c.GetUsage):
            self.mesh.send("launcher", [self.usage()])
        elif not isinstance(msg, c.LAUNCHER):
            self.stats.received(msg)
            self.core.deliver(msg)

    def _fail(self, request: str | None, message: str) -> None:
        if request and request in self.core.active:
            self.core.deliver(m.Failed(request, FailKind.INTERNAL, message))

    def usage(self) -> c.Usage:
        core = self.core
        pools = tuple((f"{node}@{list(ranks)}", n) for (node, ranks), n in core.kv_used.items())
        return c.Usage(
            "conductor",
            len(core.active) + len(core.queue),
            pools,
            self.mesh.guard.dropped + self.port.guard.dropped,
            self.mesh.guard.cut_offs + self.port.guard.cut_offs,
        )

    def rank_down(self, who: str, reason: str) -> None:
        """A rank died and is being restarted: fail what it held, hold admission."""
        rank = int(who.split()[-1])
        self.core.hold_admission(True)
        message = f"{reason}; the request cannot finish (the rank is restarting)"
        for rid in self.watch.on_rank_died(rank, reason, self.core.running()):
            why = replays.replay(self, rid, rank)
            if why is not None:
                self.core.deliver(m.Failed(rid, FailKind.INTERNAL, f"{message}; {why}"))

    def client_gone(self, ident: bytes) -> None:
        """A client went away: cancel every request it left (released on every rank)."""
        for internal in [i for i, who in self.clients.items() if who == ident]:
            self.clients.pop(internal, None)
            self.core.cancel(internal)

    def rank_died(self, reason: str) -> None:
        """Fail every running and queued request: the deployment is broken."""
        self.dead = self.dead or reason
        message = f"{reason}; the request cannot finish (workers are not restarted)"
        for rid in list(self.core.queue):
            del self.core.queue[rid]
            self._outbox(m.CLIENT, m.Finished(rid, False, FailKind.INTERNAL, message))
        for rid in self.core.running():
            self.core.deliver(m.Failed(rid, FailKind.INTERNAL, message))

    # ---------------------------------------------------------------- the loop

    def flush(self) -> None:
        while self.out:
            out, self.out = self.out, []
            to_ranks = []
            to_clients: dict[bytes, list[m.Message]] = {}
            for to, msg in out:
                self.stats.sent(msg)
                if to == m.CLIENT:
                    internal = getattr(msg, "request", "")
                    ident = self.clients.get(internal)
                    rid = self.ids.client(internal)
                    if isinstance(msg, m.Finished):
                        self.clients.pop(internal, None)
                        self.ids.close(internal)
                        self.watch.ended(internal)
                    if ident is not None:
                        if rid != internal:  # the client knows its own id
                            msg = msgspec.structs.replace(msg, request=rid)
                        to_clients.setdefault(ident, []).append(msg)
                elif (down := self.watch.blocked(to, msg)) is not None:
                    self._needs_down(down, msg)
                else:
                    self.watch.sent(to, msg)
                    to_ranks.append((to, msg))
            for ev in self.stats.take_events():
                ident = self.clients.get(ev.request)
                if ident is not None:
                    rid = self.ids.client(ev.request)
                    trace = c.WalkTrace(rid, ev.flow, ev.walk, ev.done, ev.seconds)
                    to_clients.setdefault(ident, []).append(trace)
            for ident, msgs in to_clients.items():
                if not self.port.send(ident, msgs):
                    self.client_gone(ident)
            for to, msgs in batches(to_ranks).items() if to_ranks else ():
                if self.dead is not None:
                    break  # nothing more goes to the ranks of a broken run
                try:
                    self.mesh.send(peer_of(to), msgs)
                except Exception as exc:
                    self.rank_died(f"rank {to} cannot be reached ({exc})")

    def _needs_down(self, rank: int, msg: m.Message) -> None:
        """A message for a rank that is down: its request fails (a release is moot: the rank
        comes back empty)."""
        if not isinstance(msg, m.Release):
            why = self.watch.needs_down(rank)
            self._fail(getattr(msg, "request", None), f"rank {rank} is restarting ({why})")

    def keepalive(self, now: float) -> None:
        if not self.timers.keepalive(now):
            return
        by_client: dict[bytes, list[m.Message]] = {}
        for internal, ident in self.clients.items():
            by_client.setdefault(ident, []).append(c.Alive(self.ids.client(internal)))
        for ident, msgs in by_client.items():
            if not self.port.send(ident, msgs):
                self.client_gone(ident)

    def run(self) -> None:
        while self.running:
            events = dict(self.mesh.wait(self.poller, self.timers.sleep_ms(time.monotonic())))
            if self.port.sock in events:
                for ident, msg in self.port.recv_all():
                    self.on_client(ident, msg)
            inbox = self.mesh.inbox in events
            if inbox or self.mesh.rings is not None:
                for msg in self.mesh.poll(0, inbox):
                    self.on_inbox(msg)
            now = time.monotonic()
            if self.timers.tick(now):
                self.core.tick(now)
            self.flush()
            self.mesh.flush_releases()
            self.keepalive(now)


def conductor_main(boot: dict[str, Any]) -> None:
    child.child_setup(boot)
    t0 = time.monotonic()
    arena = mesh = port = None
    code = 0
    try:
        a = boot["arena"]
        arena = Arena.attach(a["name"], a["slots"], a["region"], slot=int(boot["world"]))
        keys = Keys.of_boot(boot.get("keys"))
        mesh = Mesh(
            "conductor",
            host=boot["host"],
            bind=boot["bind"],
            arena=arena,
            secret=boot["secret"],
            ipc_dir=boot["ipc_dir"],
            keys=keys,
        )
        mesh.use_rings(attach_rings(arena, a, int(boot["world"]), mesh.address, boot["ipc_dir"]))
        port = ClientPort.of_boot(boot)  # ipc or CURVE: the launcher chose
        mesh.connect("launcher", *launcher_address(boot))
        hello = c.Hello("conductor", mesh.address, boot["host"], mesh.ipc_address, port.address)
        mesh.send("launcher", [hello])
        loop: ConductorLoop | None = None
        try:
            loop = ConductorLoop(boot["plan_dir"], mesh, port, dict(boot.get("config") or {}))
            table = wait_for_peers(mesh, time.monotonic() + 60).table
            mesh.set_peers(table)
            loop.routes.learn(table)
        except child.Stop:
            raise
        except BaseException as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            mesh.send("launcher", [c.StartFailed("conductor", detail)])
            traceback.print_exc()
            code = 1
            loop = None
        if loop is not None:
            mesh.send("launcher", [c.Ready("conductor", time.monotonic() - t0)])
            run_profiled(loop.run, "conductor")
    except child.Stop:
        pass
    except BaseException:
        print("wgc: the conductor crashed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    finally:
        for closable in (port, mesh, arena):
            if closable is not None:
                closable.close()
    child.fast_exit(code)
