"""A worker process: one rank of the plan, driving a `RankExecutor` from its sockets.

``worker_main(boot)`` (the spawn target): die with the launcher, attach the host's arena, bind
the inbox and say `Hello`, import ``rank_<r>.py`` (its spec version checked), construct its
nodes on the rank's device (reporting `Progress`), learn the `Peers`, report `Ready`, then loop:

1. run what is ready (``executor.step()``; the executor batches per (node, walk), up to the
   rank's ``batching.max_batch``);
2. hand messages for this rank straight back to the executor (same rank: by reference, no
   transport), send the rest, one batch per peer (small tensors inline, large ones as arena
   descriptors on this host, frames elsewhere);
3. poll the inbox (without waiting while work is ready, else up to 20 ms, busy-polling first
   for `Tuning.busy_poll_us` after activity) and deliver what arrived (frames that do not decode
   are dropped by the transport); tell arena owners which blocks this rank is done with.

It leaves on `Shutdown` from the launcher or SIGTERM, and dies with the launcher. A failure while
starting is reported to the launcher (`StartFailed`) with its message; an exception escaping the
executor ends the process with its traceback on stderr (the launcher then fails the run).
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
from wgc_runtime.host import loading
from wgc_runtime.host.processes import child
from wgc_runtime.host.transport.arena import Arena
from wgc_runtime.host.transport.sockets import Mesh, Peer
from wgc_runtime.host.transport.tuning import TUNING

IDLE_POLL_MS = 20


def peer_of(to: int) -> Peer:
    return "conductor" if to == m.CONDUCTOR else int(to)


class WorkerLoop:
    """The loop of one rank (see the module docstring)."""

    def __init__(self, rank_spec: Any, nodes: dict[str, Any], mesh: Mesh, device: str) -> None:
        from wgc_runtime.core.executor import RankExecutor

        self.rank = rank_spec.rank
        self.mesh = mesh
        self.local: deque[m.Message] = deque()
        self.out: list[tuple[int, m.Message]] = []
        self.executor = RankExecutor(
            rank_spec,
            nodes,
            self._outbox,
            max_batch=rank_spec.batching.max_batch,
            device=device,
        )
        self.running = True

    def _outbox(self, to: int, msg: m.Message) -> None:
        if to == self.rank:
            self.local.append(msg)  # same rank: handed over by reference
        else:
            self.out.append((to, msg))

    def flush(self) -> None:
        out, self.out = self.out, []
        for to, msgs in batches(out).items():
            self.mesh.send(peer_of(to), msgs)

    def handle(self, msg: m.Message) -> None:
        if msg.__class__ is c.Shutdown:
            self.running = False
        elif not isinstance(msg, c.LAUNCHER):
            self.executor.deliver(msg)

    def run(self) -> None:
        executor, local, mesh = self.executor, self.local, self.mesh
        while self.running:
            busy = bool(executor.step())
            while local:
                executor.deliver(local.popleft())
                busy = True
            if self.out:
                self.flush()
            for msg in mesh.poll(0 if busy else IDLE_POLL_MS):
                self.handle(msg)
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
    arena = mesh = None
    code = 0
    try:
        a = boot["arena"]
        arena = Arena.attach(a["name"], a["slots"], a["region"], slot=rank)
        mesh = Mesh(
            rank,
            host=boot["host"],
            bind=boot["bind"],
            arena=arena,
            secret=boot["secret"],
            ipc_dir=boot["ipc_dir"],
        )
        mesh.connect("launcher", boot["launcher"])
        hello = c.Hello(rank, mesh.address, boot["host"], mesh.ipc_address)
        mesh.send("launcher", [hello])
        loop: WorkerLoop | None = None
        try:
            spec = loading.load_rank(boot["plan_dir"], rank)

            def progress(text: str) -> None:
                mesh.send("launcher", [c.Progress(rank, text)])

            nodes = loading.load_nodes(spec, boot.get("device"), progress)
            mesh.set_peers(wait_for_peers(mesh, time.monotonic() + 60).table)
            device = loading.resolve_device(boot.get("device") or spec.device)
            loop = WorkerLoop(spec, nodes, mesh, device)
            report = loop.executor.prepare_captures(progress)
            progress(report.summary())
        except child.Stop:
            raise
        except BaseException as exc:
            detail = "".join(traceback.format_exception_only(exc)).strip()
            mesh.send("launcher", [c.StartFailed(rank, detail)])
            traceback.print_exc()
            code = 1
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
        if mesh is not None:
            mesh.close()
        if arena is not None:
            arena.close()
    child.fast_exit(code)
