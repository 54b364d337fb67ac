"""Workers on the machines of a Ray cluster: the launcher places each rank's worker on the Ray
node its placement's ``hosts`` entry names, and the driver needs no SSH.

`Cluster(plan_dir, ray="auto" | ADDRESS)` (``wgc serve --ray ADDRESS``) connects to the Ray
cluster (``ray.init``) and starts the worker of rank ``r`` through a `HostAgent`, a small Ray
actor on that rank's node: the agent spawns the worker there as the local launcher would (the
same boot settings, handed over in the actor call, never over a socket: the deployment's secret
and its CURVE keys among them), so the worker dies with its agent and the agent with the driver
(an actor that is not detached dies with its job). Ray carries nothing else: the data plane is
the wgc transport over TCP between the hosts, authenticated with the deployment's CURVE keys
(named hosts turn it on), shared memory only between processes on the launcher's own host. The
conductor runs where the launcher runs.

**Which node**: a node that has the custom resource ``wgc_host:<host>`` (``ray start
--resources='{"wgc_host:gpu-1": 1}'``), else the node whose address is ``<host>`` (Ray's own
``node:<ip>`` resource). A host no node matches is an error naming the hosts Ray has.

**The code** must be on every node at the driver's path (the project folder and the same Python
environment): the agent starts the worker in the driver's working directory with its
``sys.path``, so node implementations import as they do on the driver.

`RayChild` is the launcher's `children.Child` for such a worker (pid, exit code, signals; no
sentinel: the supervisor polls). An agent that is gone (its node died) reads as a worker killed
by SIGKILL, which the supervisor handles like any death (a restart places it again).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any

HOST_RESOURCE = "wgc_host:"
CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 300.0  # a node may first have to start a Python worker for the agent


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RuntimeError(
            "placing workers on a Ray cluster needs Ray: `pip install 'wgc[ray]'`"
        ) from None
    return ray


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``auto``: the one this machine belongs to), once."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, logging_level="warning", log_to_driver=False)


def resource_for(host: str) -> str:
    """The Ray resource that pins an actor to ``host``'s node (see the module docstring)."""
    ray = _ray()
    names = {k for node in ray.nodes() if node.get("Alive") for k in node.get("Resources", {})}
    if HOST_RESOURCE + host in names:
        return HOST_RESOURCE + host
    if f"node:{host}" in names:
        return f"node:{host}"
    known = sorted(n for n in names if n.startswith((HOST_RESOURCE, "node:")))
    known = [n for n in known if not n.startswith("node:__internal")]
    raise RuntimeError(
        f"no Ray node for host `{host}`: give one `--resources='{{\"{HOST_RESOURCE}{host}\": 1}}'`"
        f" (Ray's nodes have {', '.join(known) or 'none'})"
    )


class HostAgent:
    """The Ray actor that starts one worker on its node and answers for it."""

    def __init__(self) -> None:
        self.child: Any = None

    def start(self, boot: dict[str, Any], cwd: str, path: list[str], name: str) -> tuple[int, str]:
        """Start the worker; its pid and this node's Ray id."""
        import ray

        from wgc_runtime.host.processes import entry
        from wgc_runtime.host.processes.children import LocalChild

        os.chdir(cwd)
        for p in reversed(path):
            if p not in sys.path:
                sys.path.insert(0, p)
        # the worker dies with this agent (its parent), the agent with the driver's job
        self.child = LocalChild(entry.worker, {**boot, "parent": os.getpid()}, name)
        return self.child.pid, ray.get_runtime_context().get_node_id()

    def exitcode(self) -> int | None:
        return self.child.exitcode if self.child is not None else None

    def signal(self, sig: int) -> None:
        if self.child is not None:
            self.child.send_signal(sig)

    def join(self, timeout: float) -> None:
        if self.child is not None:
            self.child.join(timeout)


class RayChild:
    """A worker started on another node through a `HostAgent` (see the module docstring)."""

    sentinel = None

    def __init__(self, boot: dict[str, Any], host: str, name: str) -> None:
        ray = _ray()
        self._ray = ray
        agent = ray.remote(num_cpus=0, max_restarts=0)(HostAgent)
        self.agent = agent.options(resources={resource_for(host): 0.001}).remote()
        start = self.agent.start.remote(boot, os.getcwd(), list(sys.path), name)
        self.pid, self.node_id = ray.get(start, timeout=START_TIMEOUT_S)
        self._code: int | None = None
        # an agent that is gone (or does not answer in time)
        self._gone = (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)

    def _call(self, method: Any, *args: Any, timeout: float = CALL_TIMEOUT_S) -> Any:
        return self._ray.get(method.remote(*args), timeout=timeout)

    @property
    def exitcode(self) -> int | None:
        if self._code is None:
            try:
                self._code = self._call(self.agent.exitcode)
            except self._ray.exceptions.RayActorError:  # the agent (its node) is gone
                self._code = -signal.SIGKILL
            except self._ray.exceptions.GetTimeoutError:
                return None  # no answer yet: asked again on the next poll
            if self._code is not None:
                self._ray.kill(self.agent)
        return self._code

    def send_signal(self, sig: int) -> None:
        if self._code is None:
            with contextlib.suppress(*self._gone):  # the next exitcode poll tells
                self._call(self.agent.signal, sig)

    def join(self, timeout: float) -> None:
        if self._code is None:
            with contextlib.suppress(*self._gone):
                self._call(self.agent.join, timeout, timeout=timeout + CALL_TIMEOUT_S)
            _ = self.exitcode
