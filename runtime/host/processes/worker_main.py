"""A worker process: one rank of the plan, driving a `RankExecutor` from its sockets.

``worker_main(boot)`` (the spawn target): die with the launcher, attach the host's arena, bind
the inbox and say hello, import ``rank_<r>.py``, construct its nodes on the rank's device
(reporting progress), learn the peers' addresses, report ready, then loop:

1. run what is ready (``executor.step()``; the executor batches per (node, walk));
2. hand messages for this rank straight back to the executor (same rank: by reference, no
   transport), send the rest, one batch per peer (`Mesh.send_messages`: the compact wire form;
   small tensors inline, large ones as arena descriptors on this host, frames elsewhere);
3. poll the inbox (without waiting while work is ready, else up to 20 ms, busy-polling first
   for `Tuning.busy_poll_us` after activity) and deliver what arrived; tell arena owners which
   blocks this rank is done with.

It leaves on ``l.shutdown`` from the launcher or SIGTERM, and dies with the launcher. A failure
while starting is reported to the launcher (``l.failed``) with its message; an exception escaping
the executor ends the process with its traceback on stderr (the launcher then fails the run).
"""

from __future__ import annotations

import cProfile
import sys
import time
import traceback
from collections import deque
from typing import Any

from wgc_runtime.contract import messages as m
from wgc_runtime.host.processes import common
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.sockets import Mesh, Peer, Received
from wgc_runtime.host.transport.tuning import TUNING

IDLE_POLL_MS = 20


def peer_of(to: int) -> Peer:
    return "conductor" if to == m.CONDUCTOR else int(to)


def to_wire(msg: m.Message) -> dict[str, Any]:
    """A message as a codec-ready dict: its tensor handle rides along as a tensor (the codec
    puts it in the arena or a frame). The dict form; the hot path sends `Mesh.send_messages`."""
    if msg.DATA and getattr(msg, "data", None) is not None:
        wire = msg.with_data(None).to_wire()
        wire["data"] = msg.data  # type: ignore[attr-defined]
        return wire
    return msg.to_wire()


def from_wire(wire: dict[str, Any]) -> m.Message:
    """The message; a tensor in ``data`` (decoded by the codec) is already the handle."""
    return m.from_wire(wire)


class WorkerLoop:
    """The loop of one rank (see the module docstring)."""

    def __init__(
        self, rank_spec: Any, nodes: dict[str, Any], mesh: Mesh, max_batch: int = 1
    ) -> None:
        from wgc_runtime.core.executor.core import RankExecutor

        self.rank = rank_spec.rank
        self.mesh = mesh
        self.local: deque[m.Message] = deque()
        self.out: list[tuple[int, m.Message]] = []
        self.executor = RankExecutor(rank_spec, nodes, self._outbox, max_batch=max_batch)
        self.running = True

    def _outbox(self, to: int, msg: m.Message) -> None:
        if to == self.rank:
            self.local.append(msg)  # same rank: handed over by reference
        else:
            self.out.append((to, msg))

    def flush(self) -> None:
        out, self.out = self.out, []
        for to, msgs in batches(out).items():
            self.mesh.send_messages(peer_of(to), msgs)

    def handle(self, item: Received) -> None:
        if isinstance(item, m.Message):
            self.executor.deliver(item)
            return
        kind = item.get("t", "")
        if kind == common.SHUTDOWN:
            self.running = False
        elif not kind.startswith("l."):
            self.executor.deliver(from_wire(item))

    def run(self) -> None:
        executor, local, mesh = self.executor, self.local, self.mesh
        while self.running:
            busy = bool(executor.step())
            while local:
                executor.deliver(local.popleft())
                busy = True
            if self.out:
                self.flush()
            for item in mesh.poll(0 if busy else IDLE_POLL_MS):
                self.handle(item)
            mesh.flush_releases()


def batches(out: list[tuple[int, m.Message]]) -> dict[int, list[m.Message]]:
    """``out`` grouped by destination, each group in the order it was produced (one send per
    peer; the order between peers never mattered)."""
    if len(out) == 1:
        return {out[0][0]: [out[0][1]]}
    grouped: dict[int, list[m.Message]] = {}
    for to, msg in out:
        grouped.setdefault(to, []).append(msg)
    return grouped


def run_profiled(run: Any, who: str) -> None:
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


def _wait_for(mesh: Mesh, kind: str, deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        for msg in mesh.poll(100):
            if isinstance(msg, m.Message):
                continue  # nobody sends runtime messages before the peers are known
            if msg.get("t") == kind:
                return msg
            if msg.get("t") == common.SHUTDOWN:
                raise common.Stop()
    raise common.DeploymentError(f"no `{kind}` from the launcher in time")


def worker_main(boot: dict[str, Any]) -> None:
    common.child_setup(boot)
    rank = int(boot["rank"])
    t0 = time.monotonic()
    arena = mesh = None
    code = 0
    try:
        a = boot["arena"]
        arena = Arena.attach(a["name"], a["slots"], a["region"], slot=rank)
        mesh = Mesh(rank, host=boot["host"], bind=boot["bind"], arena=arena)
        mesh.connect("launcher", boot["launcher"])
        hello = {
            "t": common.HELLO,
            "who": rank,
            "address": mesh.address,
            "ipc": mesh.ipc_address,
            "host": boot["host"],
        }
        mesh.send("launcher", hello)
        try:
            spec = common.load_rank(boot["plan_dir"], rank)

            def progress(text: str) -> None:
                mesh.send("launcher", {"t": common.PROGRESS, "who": rank, "text": text})

            nodes = common.load_nodes(spec, boot.get("device"), progress)
            peers = _wait_for(mesh, common.PEERS, time.monotonic() + 60)
            mesh.set_peers(peers["table"])
            batch = common.max_batch(common.load_conductor(boot["plan_dir"]))
            loop = WorkerLoop(spec, nodes, mesh, batch)
        except common.Stop:
            raise
        except BaseException as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            mesh.send("launcher", {"t": common.FAILED, "who": rank, "error": detail})
            traceback.print_exc()
            code = 1
            loop = None
        if loop is not None:
            ready = {"t": common.READY, "who": rank, "seconds": time.monotonic() - t0}
            mesh.send("launcher", ready)
            run_profiled(loop.run, f"rank{rank}")
    except common.Stop:
        pass
    except BaseException:
        print(f"wgc: rank {rank} crashed:", file=sys.stderr)
        traceback.print_exc()
        code = 1
    finally:
        if mesh is not None:
            mesh.close()
        if arena is not None:
            arena.close()
    common.fast_exit(code)
