"""Waiting for a cluster's children to come up (`handshake`): every child says hello and the
launcher sends everybody the address table; progress lines are shown while they load; a child
that dies or fails to load, an external rank that never joins, or the ready deadline ends the
start with a `DeploymentError` that says why. `where_time_went` and `process_age` explain the
start's time in the ready line.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from wgc_runtime.contract import control as c
from wgc_runtime.host.loading import DeploymentError
from wgc_runtime.host.processes.external import never_joined
from wgc_runtime.host.processes.health import ChildDied

if TYPE_CHECKING:
    from wgc_runtime.host.processes.launcher import Cluster


def process_age() -> float | None:
    """Seconds since this process started (Linux), or None."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def handshake(cluster: Cluster, t0: float) -> tuple[dict[str, float], dict[str, float]]:
    """Wait until every child is ready; when each was up (said hello) and loaded."""
    assert cluster.mesh is not None
    deadline = t0 + cluster.ready_timeout
    up: dict[str, float] = {}
    loaded: dict[str, float] = {}
    sent_peers = False
    while len(loaded) < len(cluster.procs):
        check_alive(cluster)
        check_joined(cluster, t0, up)
        if time.monotonic() > deadline:
            waiting = ", ".join(sorted(set(cluster.procs) - set(loaded)))
            raise DeploymentError(
                f"not ready after {cluster.ready_timeout:.0f} s (still waiting for {waiting})"
            )
        for msg in cluster.mesh.poll(100):
            if isinstance(msg, c.Hello):
                who = cluster._who(msg.who)
                up[who] = time.monotonic() - t0
                cluster.table[who] = c.PeerEntry(
                    msg.who, msg.address, msg.host, msg.ipc, msg.client
                )
                cluster.mesh.connect(msg.who, msg.address, msg.host, msg.ipc)
                if msg.client and msg.who == "conductor":
                    cluster.client_address = msg.client
            elif isinstance(msg, c.Progress):
                cluster.progress(f"  {cluster._who(msg.who)}: {msg.text}")
            elif isinstance(msg, c.Ready):
                who = cluster._who(msg.who)
                loaded[who] = time.monotonic() - t0
                cluster.progress(
                    f"  {who}: ready (up after {up.get(who, 0.0):.1f} s, then loaded in "
                    f"{msg.seconds:.1f} s)"
                )
            elif isinstance(msg, c.StartFailed):
                raise DeploymentError(f"{cluster._who(msg.who)} failed to start: {msg.error}")
        if not sent_peers and len(cluster.table) == len(cluster.procs):
            peers = c.Peers(tuple(cluster.table.values()))
            for entry in cluster.table.values():
                cluster.mesh.send(entry.who, [peers])
            sent_peers = True
    return up, loaded


def check_joined(cluster: Cluster, t0: float, up: dict[str, float]) -> None:
    """External workers (`external`): every rank said hello within the join timeout."""
    ext = cluster.external
    if ext is None or time.monotonic() <= t0 + ext.timeout:
        return
    if missing := sorted(set(cluster.procs) - set(up) - {"conductor"}, key=cluster._order):
        raise DeploymentError(never_joined(ext, cluster, missing))


def check_alive(cluster: Cluster) -> None:
    assert cluster.mesh is not None
    for who, proc in cluster.procs.items():
        if proc.exitcode is not None:
            # a child that failed to load says why, then exits: its reason may still be
            # on its way, and says more than "died"
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                for msg in cluster.mesh.poll(100):
                    if isinstance(msg, c.StartFailed):
                        who_ = cluster._who(msg.who)
                        raise DeploymentError(f"{who_} failed to start: {msg.error}")
            raise DeploymentError(f"{ChildDied(who, proc.exitcode)} while starting")


def where_time_went(before: float, up: dict[str, float], loaded: dict[str, float]) -> str:
    """The ready line's account of a start: ``before`` (seconds before the launcher started:
    the CLI and the compile), when the slowest process was up, when the last one loaded."""
    parts = []
    if before:
        parts.append(f"{before:.1f} s before it: the CLI and the compile")
    slowest = max(up, key=lambda k: up[k], default=None)
    if slowest is not None:
        parts.append(
            f"processes up after {up[slowest]:.1f} s (interpreter and imports, torch; "
            f"slowest: {slowest})"
        )
    last = max(loaded, key=lambda k: loaded[k], default=None)
    if last is not None:
        parts.append(f"loaded after {loaded[last]:.1f} s (nodes and captures; last: {last})")
    return "; ".join(parts)
