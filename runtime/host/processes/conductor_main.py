"""The conductor process: clients in, a `ConductorCore` in the middle, ranks out.

``conductor_main(boot)`` (the spawn target): die with the launcher, attach the arena (its own
region, slot ``world_size``), bind the inbox and the client port (`ClientPort`, ``ROUTER``),
import ``conductor.py`` (its spec version checked; it holds every stream's spec), learn the
peers, report ready, then loop: poll the inbox and the client port (20 ms, busy-polling first for
`Tuning.busy_poll_us` after activity), hand client requests to the core (`Submit` / `Cancel`: the
core queues beyond ``max_concurrent_requests``), deliver rank messages, send what the core emits
(walk starts and values to ranks, one batch per rank per turn; `Output` and `Finished` to the
client that asked), ``tick`` the core's deadlines and send every client an `Alive` for each of
its live requests once a second (`wgc_runtime.host.client` fails a request that hears nothing).

**A rank died** (`RankDied` from the launcher, which watches the processes): every running and
queued request fails at once with "rank N died (...)" (kind ``internal``), and every later
request is refused with the same message; the launcher then stops the run. Workers are not
restarted.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import zmq

from wgc_runtime.contract import control as c
from wgc_runtime.contract import messages as m
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.kinds import FailKind
from wgc_runtime.host import loading
from wgc_runtime.host.processes import child
from wgc_runtime.host.processes.worker_main import batches, peer_of, run_profiled, wait_for_peers
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.sockets import ClientPort, Mesh

POLL_MS = 20
KEEPALIVE_S = 1.0


def segment_of(seg: c.InputSegment) -> Segment:
    return Segment(seg.modality, seg.data, tuple(seg.fields.items()))


class ConductorLoop:
    """The conductor's loop (see the module docstring)."""

    def __init__(self, plan_dir: str, mesh: Mesh, port: ClientPort, config: dict[str, Any]):
        from wgc_runtime.core.conductor import ConductorCore

        self.spec = loading.load_conductor(plan_dir)
        self.mesh = mesh
        self.port = port
        self.core = ConductorCore(self.spec, self._outbox, **config)
        self.out: list[tuple[int, m.Message]] = []
        self.clients: dict[str, bytes] = {}  # request id -> client identity
        self.dead: str | None = None
        self.running = True
        self._last_keepalive = 0.0
        self.poller = zmq.Poller()
        self.poller.register(mesh.inbox, zmq.POLLIN)
        self.poller.register(port.sock, zmq.POLLIN)

    def _outbox(self, to: int, msg: m.Message) -> None:
        self.out.append((to, msg))

    # ---------------------------------------------------------------- clients

    def on_client(self, ident: bytes, msg: m.Message) -> None:
        if isinstance(msg, c.Ping):
            self.port.send(ident, [c.Pong()])
        elif isinstance(msg, c.Submit):
            self._submit(ident, msg)
        elif isinstance(msg, c.Cancel) and self.clients.get(msg.request) == ident:
            self.core.cancel(msg.request)

    def _submit(self, ident: bytes, msg: c.Submit) -> None:
        rid = msg.request

        def refuse(kind: FailKind, message: str) -> None:
            self.port.send(ident, [m.Finished(rid, False, kind, message)])

        if self.dead is not None:
            refuse(FailKind.INTERNAL, f"{self.dead}; the run is stopping")
            return
        if not rid or rid in self.clients:
            refuse(FailKind.REJECTED, f"request id `{rid}` is empty or already in use")
            return
        try:
            segments = [segment_of(s) for s in msg.inputs]
            request = self.spec.request(segments, msg.want, msg.options)
            self.core.submit(rid, request)
        except Exception as exc:
            refuse(FailKind.REJECTED, f"bad request: {exc}")
            return
        self.clients[rid] = ident
        self.port.send(ident, [c.Accepted(rid, rid in self.core.queue)])

    # ---------------------------------------------------------------- ranks

    def on_inbox(self, msg: m.Message) -> None:
        if isinstance(msg, c.Shutdown):
            self.running = False
        elif isinstance(msg, c.RankDied):
            self.rank_died(msg.reason or f"{msg.who} died")
        elif not isinstance(msg, c.LAUNCHER):
            self.core.deliver(msg)

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
                if to == m.CLIENT:
                    rid = getattr(msg, "request", "")
                    ident = self.clients.get(rid)
                    if isinstance(msg, m.Finished):
                        self.clients.pop(rid, None)
                    if ident is not None:
                        to_clients.setdefault(ident, []).append(msg)
                else:
                    to_ranks.append((to, msg))
            for ident, msgs in to_clients.items():
                self.port.send(ident, msgs)
            for to, msgs in batches(to_ranks).items() if to_ranks else ():
                if self.dead is not None:
                    break  # nothing more goes to the ranks of a broken run
                try:
                    self.mesh.send(peer_of(to), msgs)
                except Exception as exc:
                    self.rank_died(f"rank {to} cannot be reached ({exc})")

    def keepalive(self, now: float) -> None:
        if now - self._last_keepalive < KEEPALIVE_S:
            return
        self._last_keepalive = now
        by_client: dict[bytes, list[m.Message]] = {}
        for rid, ident in self.clients.items():
            by_client.setdefault(ident, []).append(c.Alive(rid))
        for ident, msgs in by_client.items():
            self.port.send(ident, msgs)

    def run(self) -> None:
        while self.running:
            events = dict(self.mesh.wait(self.poller, POLL_MS))
            if self.port.sock in events:
                for ident, msg in self.port.recv_all():
                    self.on_client(ident, msg)
            if self.mesh.inbox in events:
                for msg in self.mesh.poll(0):
                    self.on_inbox(msg)
            self.core.tick()
            self.flush()
            self.mesh.flush_releases()
            self.keepalive(time.monotonic())


def conductor_main(boot: dict[str, Any]) -> None:
    child.child_setup(boot)
    t0 = time.monotonic()
    arena = mesh = port = None
    code = 0
    try:
        a = boot["arena"]
        arena = Arena.attach(a["name"], a["slots"], a["region"], slot=int(boot["world"]))
        mesh = Mesh(
            "conductor",
            host=boot["host"],
            bind=boot["bind"],
            arena=arena,
            secret=boot["secret"],
            ipc_dir=boot["ipc_dir"],
        )
        port = ClientPort(bind=boot["bind"])
        mesh.connect("launcher", boot["launcher"])
        hello = c.Hello("conductor", mesh.address, boot["host"], mesh.ipc_address, port.address)
        mesh.send("launcher", [hello])
        loop: ConductorLoop | None = None
        try:
            loop = ConductorLoop(boot["plan_dir"], mesh, port, dict(boot.get("config") or {}))
            mesh.set_peers(wait_for_peers(mesh, time.monotonic() + 60).table)
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
