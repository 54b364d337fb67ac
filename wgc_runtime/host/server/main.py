"""Starting the server: the deployment's processes, then uvicorn (what `wgc serve` calls).

`serve` starts the conductor and the workers as `wgc run` does (`processes.launcher.Cluster`,
with the door strict), waits until every process is loaded and warmed up, then listens on
``host:port`` (loopback by default; port 0 picks a free one) and prints where: a line
``wgc: serving MODEL @ PLACEMENT on http://HOST:PORT ...`` on stderr and the URL on stdout. It
runs until Ctrl-C / SIGTERM (exit 0) or until the deployment fails for good (exit 1): a worker
that dies is restarted up to ``restarts`` times within ``restart_window_s`` (only the requests it
held fail; ``/health`` says ``degraded`` until it is back), the conductor's death or a worker past
the budget is final. ``ray``: start the workers on that Ray cluster's nodes
(`processes.ray_launcher`); ``external``: wait for workers started elsewhere (``wgc worker``,
`processes.external`). ``limits``: what one input may be (`wgc_runtime.host.inputs`).
Either way the processes are stopped and the shared memory freed.

``api_keys``: what every route but ``/health`` asks for (`auth`; the CLI refuses a host other
than loopback without one). ``guard``: the header and body timeouts and the connection cap
(`guard`). ``log_format``: one line per request on stderr, ``json`` or ``text`` (`access_log`;
None: none).

A deployment with CURVE (the placement names hosts) has a client key: the server connects with
it, and writes it to a file only its owner may read (removed when the server stops), whose path
the line after the announcing one names (``... (CURVE): PATH``), for
`wgc_runtime.host.client.Client` (``key=``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict

import uvicorn

from wgc_runtime.host.inputs import Limits
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.processes.external import ExternalWorkers
from wgc_runtime.host.processes.launcher import Cluster, terminate_as_interrupt
from wgc_runtime.host.scratch import private_dir
from wgc_runtime.host.server.app import create_app
from wgc_runtime.host.server.calls import Server
from wgc_runtime.host.server.gateway import Gateway
from wgc_runtime.host.server.guard import Guard, guarded
from wgc_runtime.host.server.metrics import Metrics, kv_capacity
from wgc_runtime.host.server.model import ModelInfo
from wgc_runtime.host.transport.keys import ClientKey


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


@contextlib.contextmanager
def _saved(key: ClientKey | None) -> Iterator[str | None]:
    """``key`` in a file of a private folder (mode 0700; the file 0600) while the server runs."""
    if key is None:
        yield None
        return
    folder = private_dir("wgc-key-")  # swept at a later start if this process is SIGKILLed
    try:
        yield key.save(os.path.join(folder, "client.key"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def serve(
    plan_dir: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int | None = None,
    max_queue: int = 64,
    plan_html: str | None = None,
    ready_timeout: float = 600.0,
    restarts: int = 3,
    restart_window_s: float = 600.0,
    ray: str | None = None,
    external: ExternalWorkers | None = None,
    limits: Limits | None = None,
    api_keys: Sequence[str] = (),
    guard: Guard | None = None,
    log_format: str | None = None,
) -> int:
    """Serve the plan in ``plan_dir`` until stopped (see the module docstring); the exit code."""
    guard = guard or Guard()
    spec, ranks = load_plan(plan_dir)
    info = ModelInfo.of(spec, ranks)
    died: list[str] = []
    try:
        with (
            terminate_as_interrupt(),
            Cluster(
                plan_dir,
                ready_timeout=ready_timeout,
                config={"strict": True, "limits": asdict(limits or Limits())},
                restarts=restarts,
                restart_window_s=restart_window_s,
                ray=ray,
                external=external,
            ) as cluster,
            _saved(cluster.client_key) as key_file,
        ):
            assert cluster.client_address is not None

            def alive() -> dict[str, bool]:
                return {who: p.exitcode is None for who, p in cluster.procs.items()}

            metrics = Metrics(
                alive,
                lambda: cluster.usage(1.0),
                kv_capacity(ranks),
                lambda: dict(cluster.health().restarted),
            )
            gateway = Gateway(cluster.client_address, cluster.client_key)
            server = Server(spec, info, gateway, metrics, seed, max_queue, limits or Limits())
            server.body_timeout_s = guard.body_timeout_s
            app = create_app(server, alive, plan_html, cluster.health, api_keys, log_format)
            config = uvicorn.Config(
                app,
                host=host,
                port=port,
                log_level="warning",
                timeout_graceful_shutdown=5,
                http=guarded(guard),
                ws="auto",  # `websockets` (the serve extra): /v1/realtime
            )
            web = _Uvicorn(config)

            def announce(url: str) -> None:
                _stderr(
                    f"wgc: serving {spec.model} @ {spec.placement} on {url} (playground: {url}/, "
                    f"API: {url}/docs; client address: {cluster.client_address})"
                )
                if key_file:
                    _stderr(f"wgc: clients need the deployment's key (CURVE): {key_file}")
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
        _stderr(f"error: {died[0]}; stopping")
        return 1
    _stderr("wgc: stopped")
    return 0
