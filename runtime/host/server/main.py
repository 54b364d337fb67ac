"""Starting the server: the deployment's processes, then uvicorn (what `wgc serve` calls).

`serve` starts the conductor and the workers as `wgc run` does (`processes.launcher.Cluster`,
with the door strict), waits until every process is loaded and warmed up, then listens on
``host:port`` (loopback by default; port 0 picks a free one) and prints where: a line
``wgc: serving MODEL @ PLACEMENT on http://HOST:PORT ...`` on stderr and the URL on stdout. It
runs until Ctrl-C / SIGTERM (exit 0) or until a process of the deployment dies (exit 1: workers
are not restarted); either way the processes are stopped and the shared memory freed.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable

import uvicorn

from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.processes.launcher import Cluster, terminate_as_interrupt
from wgc_runtime.host.server.app import create_app
from wgc_runtime.host.server.calls import Server
from wgc_runtime.host.server.gateway import Gateway
from wgc_runtime.host.server.metrics import Metrics, kv_capacity
from wgc_runtime.host.server.model import ModelInfo


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class _Uvicorn(uvicorn.Server):
    """Says where it listens once it does (the port may have been 0)."""

    announce: Callable[[str], None] = staticmethod(_stderr)

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                self.announce(f"http://{host}:{port}")
                return


def serve(
    plan_dir: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int | None = None,
    max_queue: int = 64,
    plan_html: str | None = None,
    ready_timeout: float = 600.0,
) -> int:
    """Serve the plan in ``plan_dir`` until stopped (see the module docstring); the exit code."""
    spec, ranks = load_plan(plan_dir)
    info = ModelInfo.of(spec, ranks)
    died: list[str] = []
    try:
        with (
            terminate_as_interrupt(),
            Cluster(plan_dir, ready_timeout=ready_timeout, config={"strict": True}) as cluster,
        ):
            assert cluster.client_address is not None

            def alive() -> dict[str, bool]:
                return {who: p.exitcode is None for who, p in cluster.procs.items()}

            metrics = Metrics(alive, lambda: cluster.usage(1.0), kv_capacity(ranks))
            server = Server(spec, info, Gateway(cluster.client_address), metrics, seed, max_queue)
            app = create_app(server, alive, plan_html)
            config = uvicorn.Config(
                app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5
            )
            web = _Uvicorn(config)

            def announce(url: str) -> None:
                _stderr(
                    f"wgc: serving {spec.model} @ {spec.placement} on {url} (playground: {url}/, "
                    f"API: {url}/docs; client address: {cluster.client_address})"
                )
                print(url, flush=True)

            web.announce = announce

            def watch() -> None:
                failure = cluster.wait()
                if failure is not None:
                    died.append(str(failure))
                    web.handle_exit(signal.SIGTERM, None)  # uvicorn's own graceful stop

            threading.Thread(target=watch, name="wgc-serve-watch", daemon=True).start()
            web.run()
    except KeyboardInterrupt:
        pass
    if died:
        _stderr(f"error: {died[0]}; stopping (workers are not restarted)")
        return 1
    _stderr("wgc: stopped")
    return 0
