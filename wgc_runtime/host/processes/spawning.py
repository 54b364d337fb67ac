"""How a cluster's children are started: what each is told at birth (`boot_of`: the launcher's
addresses, the shared-memory segment, the deployment's secret and keys, the settings; then its
own name, host and bind address, `child_boot`) and where it runs (`spawn_worker`): a local
process (multiprocessing's ``spawn``), a Ray actor on its rank's host (`ray_launcher`), or a rank
started elsewhere (``wgc worker``) that the cluster waits for (`external`). The boot travels
through the spawn pipe (or the join file), never over a socket.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from wgc_runtime.host.processes import entry, ray_launcher
from wgc_runtime.host.processes.children import LocalChild
from wgc_runtime.host.processes.external import ExternalChild
from wgc_runtime.host.transport.sockets import bind_address

if TYPE_CHECKING:
    from wgc_runtime.host.processes.launcher import Cluster


def boot_of(cluster: Cluster) -> dict[str, Any]:
    """What every child is told (`Cluster.start`, once its segment and mesh exist)."""
    segment, mesh = cluster.segment, cluster.mesh
    assert segment is not None and mesh is not None
    return {
        "parent": os.getpid(),
        "launcher": mesh.address,
        "launcher_ipc": mesh.ipc_address,
        "launcher_host": cluster.conductor_host,
        "plan_dir": cluster.plan_dir,
        "arena": segment.spec(),
        "secret": cluster.secret,  # through the spawn pipe, never over a socket
        "keys": cluster.keys.boot() if cluster.keys else None,
        "ipc_dir": cluster.ipc_dir,
        "world": cluster.world,
        "threads": cluster.threads,
        "device": cluster.device,
        "config": cluster.config,
    }


def child_boot(cluster: Cluster, who: str, host: str) -> dict[str, Any]:
    """One child's boot: every child's, with its name, its host and the address it binds."""
    bind = bind_address(host, cluster.hosts, cluster.listen)
    return {**cluster._boot, "who": who, "host": host, "bind": bind}


def spawn_conductor(cluster: Cluster) -> None:
    boot = child_boot(cluster, "conductor", cluster.conductor_host)
    keys = cluster.port_keys  # the client port's (`Cluster.start`): the conductor's alone
    boot["client_port"] = {"ipc": cluster.client_ipc, "keys": keys.boot() if keys else None}
    cluster.procs["conductor"] = LocalChild(entry.conductor, boot, "wgc-conductor")


def spawn_worker(cluster: Cluster, rank: int) -> None:
    """Start (or start again) rank ``rank``'s worker."""
    host = cluster.host_of(rank)
    boot = {**child_boot(cluster, f"rank {rank}", host), "rank": rank}
    if cluster.external is not None:  # started by someone else: `wgc worker`
        cluster.procs[f"rank {rank}"] = ExternalChild(cluster, rank)
        return
    if cluster.ray is None:
        boot["client_port"] = client_out(cluster, rank)
        cluster.procs[f"rank {rank}"] = LocalChild(entry.worker, boot, f"wgc-rank{rank}")
        return
    if host != cluster.conductor_host:  # another machine: no shared memory, no ipc folder
        boot.update(arena=None, ipc_dir=None)
    cluster.procs[f"rank {rank}"] = ray_launcher.RayChild(boot, host, f"wgc-rank{rank}")


def client_out(cluster: Cluster, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s client-out socket, guarded as the conductor's client port is: ``ipc`` in
    the same private folder (one path per rank: a restarted rank binds it again, and its
    clients reconnect), else CURVE with the client port's keys (`contract.route`)."""
    keys = cluster.port_keys
    ipc = None
    if cluster.client_ipc is not None:
        ipc = os.path.join(os.path.dirname(cluster.client_ipc), f"out{rank}.sock")
    return {"ipc": ipc, "keys": keys.boot() if keys is not None and ipc is None else None}
