"""The conductor process: clients in, a `ConductorCore` in the middle, ranks out.

``conductor_main(boot)`` (the spawn target): die with the launcher, attach the arena (its own
region, slot ``world_size``), bind the inbox and the client port (`ClientPort`, ``ROUTER``),
import ``conductor.py`` and every ``rank_<r>.py`` (for the stream specs), learn the peers, report
ready, then loop: poll the inbox and the client port (20 ms, busy-polling first for
`Tuning.busy_poll_us` after activity), hand client requests to the core (``submit`` /
``cancel``: the core queues beyond ``max_concurrent_requests``), deliver rank messages, send
what the core emits (walk starts and values to ranks, one batch per rank per turn in the compact
wire form; outputs and endings to the client that asked), ``tick`` the core's deadlines and send
every client a keep-alive for each of its live requests once a second (`wgc_runtime.host.client`
fails a request that hears nothing).

**A rank died** (``l.rank_died`` from the launcher, which watches the processes): every running
and queued request fails at once with "rank N died (...)" (kind ``internal``), and every later
request is refused with the same message; the launcher then stops the run. Workers are not
restarted.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

import zmq

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.spec import Segment
from wgc_runtime.host.processes import common
from wgc_runtime.host.processes.worker_main import batches, peer_of, run_profiled
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.sockets import ClientPort, Mesh, Received

POLL_MS = 20
KEEPALIVE_S = 1.0


def segment_of(wire: dict[str, Any]) -> Segment:
    fields = wire.get("fields") or {}
    return Segment(str(wire["modality"]), wire.get("data"), tuple(fields.items()))


def client_wire(msg: m.Message) -> dict[str, Any]:
    if isinstance(msg, m.Output):
        return {
            "t": "output",
            "rid": msg.request,
            "flow": msg.flow,
            "walk": msg.walk,
            "modality": msg.modality,
            "channel": msg.channel,
            "iteration": list(msg.iters),
            "value": msg.data,
        }
    assert isinstance(msg, m.Finished)
    if msg.ok:
        return {"t": "done", "rid": msg.request}
    error = {
        "kind": msg.kind or "error",
        "message": msg.message or "request failed",
        "flow": msg.flow,
        "walk": msg.walk,
        "node": msg.node,
    }
    return {"t": "error", "rid": msg.request, "error": error}


class ConductorLoop:
    """The conductor's loop (see the module docstring)."""

    def __init__(self, plan_dir: str, mesh: Mesh, port: ClientPort, config: dict[str, Any]):
        from wgc_runtime.core.conductor.core import ConductorCore, load_streams

        self.spec = common.load_conductor(plan_dir)
        ranks = [common.load_rank(plan_dir, r) for r in range(self.spec.world_size)]
        self.mesh = mesh
        self.port = port
        self.core = ConductorCore(self.spec, self._outbox, load_streams(ranks), **config)
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

    def on_client(self, ident: bytes, wire: dict[str, Any]) -> None:
        kind = wire.get("t")
        rid = str(wire.get("rid", ""))
        if kind == "ping":
            self.port.send(ident, {"t": "pong"})
        elif kind == "submit":
            self._submit(ident, rid, wire)
        elif kind == "cancel" and self.clients.get(rid) == ident:
            self.core.cancel(rid)

    def _submit(self, ident: bytes, rid: str, wire: dict[str, Any]) -> None:
        def refuse(kind: str, message: str) -> None:
            error = {"kind": kind, "message": message}
            self.port.send(ident, {"t": "error", "rid": rid, "error": error})

        if self.dead is not None:
            refuse("internal", f"{self.dead}; the run is stopping")
            return
        if not rid or rid in self.clients:
            refuse("internal", f"request id `{rid}` is empty or already in use")
            return
        try:
            segments = [segment_of(s) for s in wire.get("inputs", [])]
            request = self.spec.request(segments, wire.get("want", []), wire.get("options", {}))
            self.core.submit(rid, request)
        except Exception as exc:
            refuse("internal", f"bad request: {exc}")
            return
        self.clients[rid] = ident
        self.port.send(ident, {"t": "accepted", "rid": rid, "queued": rid in self.core.queue})

    # ---------------------------------------------------------------- ranks

    def on_inbox(self, wire: Received) -> None:
        if isinstance(wire, m.Message):
            self.core.deliver(wire)
            return
        kind = wire.get("t", "")
        if kind == common.SHUTDOWN:
            self.running = False
        elif kind == common.RANK_DIED:
            self.rank_died(str(wire.get("reason") or f"{wire.get('who')} died"))
        elif not kind.startswith("l."):
            self.core.deliver(m.from_wire(wire))

    def rank_died(self, reason: str) -> None:
        """Fail every running and queued request: the deployment is broken."""
        self.dead = self.dead or reason
        message = f"{reason}; the request cannot finish (workers are not restarted)"
        for rid in list(self.core.queue):
            del self.core.queue[rid]
            self._outbox(m.CLIENT, m.Finished(rid, False, "internal", message))
        for rid in self.core.running():
            self.core.deliver(m.Failed(rid, "internal", message))

    # ---------------------------------------------------------------- the loop

    def flush(self) -> None:
        while self.out:
            out, self.out = self.out, []
            to_ranks = []
            for to, msg in out:
                if to == m.CLIENT:
                    rid = getattr(msg, "request", "")
                    ident = self.clients.get(rid)
                    if isinstance(msg, m.Finished):
                        self.clients.pop(rid, None)
                    if ident is not None:
                        self.port.send(ident, client_wire(msg))
                else:
                    to_ranks.append((to, msg))
            for to, msgs in batches(to_ranks).items() if to_ranks else ():
                if self.dead is not None:
                    break  # nothing more goes to the ranks of a broken run
                try:
                    self.mesh.send_messages(peer_of(to), msgs)
                except Exception as exc:
                    self.rank_died(f"rank {to} cannot be reached ({exc})")

    def keepalive(self, now: float) -> None:
        if now - self._last_keepalive < KEEPALIVE_S:
            return
        self._last_keepalive = now
        for rid, ident in list(self.clients.items()):
            self.port.send(ident, {"t": "alive", "rid": rid})

    def run(self) -> None:
        while self.running:
            events = dict(self.mesh.wait(self.poller, POLL_MS))
            if self.port.sock in events:
                for ident, wire in self.port.recv_all():
                    self.on_client(ident, wire)
            if self.mesh.inbox in events:
                for wire in self.mesh.poll(0):
                    self.on_inbox(wire)
            self.core.tick()
            self.flush()
            self.mesh.flush_releases()
            self.keepalive(time.monotonic())


def conductor_main(boot: dict[str, Any]) -> None:
    common.child_setup(boot)
    t0 = time.monotonic()
    arena = mesh = port = None
    code = 0
    try:
        a = boot["arena"]
        arena = Arena.attach(a["name"], a["slots"], a["region"], slot=int(boot["world"]))
        mesh = Mesh("conductor", host=boot["host"], bind=boot["bind"], arena=arena)
        port = ClientPort(bind=boot["bind"])
        mesh.connect("launcher", boot["launcher"])
        hello = {
            "t": common.HELLO,
            "who": "conductor",
            "address": mesh.address,
            "ipc": mesh.ipc_address,
            "host": boot["host"],
            "client": port.address,
        }
        mesh.send("launcher", hello)
        try:
            loop = ConductorLoop(boot["plan_dir"], mesh, port, dict(boot.get("config") or {}))
            from wgc_runtime.host.processes.worker_main import _wait_for

            peers = _wait_for(mesh, common.PEERS, time.monotonic() + 60)
            mesh.set_peers(peers["table"])
        except common.Stop:
            raise
        except BaseException as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            mesh.send("launcher", {"t": common.FAILED, "who": "conductor", "error": detail})
            traceback.print_exc()
            code = 1
            loop = None
        if loop is not None:
            ready = {"t": common.READY, "who": "conductor", "seconds": time.monotonic() - t0}
            mesh.send("launcher", ready)
            run_profiled(loop.run, "conductor")
    except common.Stop:
        pass
    except BaseException:
        print("wgc: the conductor crashed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    finally:
        for closable in (port, mesh, arena):
            if closable is not None:
                closable.close()
    common.fast_exit(code)
