"""Running one `wgc run` request and streaming its outputs: on worker processes
(`stream_processes`, a `WorkerDied` when one dies) or in this process
(`stream_local`, `wgc_runtime.host.local.LocalCluster`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from wgc.cli.door import as_tensors
from wgc.cli.workers import THIS_HOST, Workers


def stream_processes(
    plan_dir: str,
    inputs,
    want,
    options,
    ready_timeout: float,
    deadline: float | None,
    seed,
    submitted=lambda: None,
    workers: Workers = THIS_HOST,
) -> Iterator[Any]:
    from wgc.cli.progress import StartupProgress, startup_steps
    from wgc_runtime.host.client import Client
    from wgc_runtime.host.processes.launcher import Cluster, terminate_as_interrupt

    strict = {"strict": True}  # the door's (checked here already; the conductor checks again)
    progress = StartupProgress(startup_steps(plan_dir))
    # the client needs torch for the outputs: import it while the processes start, not after
    threading.Thread(target=_import_codec, name="wgc-import-torch", daemon=True).start()
    with (
        terminate_as_interrupt(),
        Cluster(
            plan_dir,
            progress=progress,
            ready_timeout=ready_timeout,
            config=strict,
            **workers.cluster_options(),
        ) as cluster,
    ):
        progress.close()
        assert cluster.client_address is not None
        with Client(cluster.client_address, key=cluster.client_key) as client:
            stream = client.submit(inputs, want, options, deadline, seed=seed)
            submitted()
            try:
                yield from stream
            except Exception:
                if cluster.failure is not None:
                    raise WorkerDied(str(cluster.failure)) from None
                raise
            if cluster.failure is not None:
                raise WorkerDied(str(cluster.failure))


def _import_codec() -> None:
    import wgc_runtime.host.transport.codec  # noqa: F401  (torch)


def stream_local(plan_dir: str, inputs, want, options, seed, submitted=lambda: None):
    from wgc_runtime.contract.flow import Segment
    from wgc_runtime.host.client import ErrorInfo, Output, RequestFailed
    from wgc_runtime.host.loading import ensure_import_root

    ensure_import_root()
    from wgc_runtime.host.local import LocalCluster

    cluster = LocalCluster(plan_dir, strict=True)
    segments = [Segment(m, d, tuple(f.items())) for m, d, f in as_tensors(inputs)]
    handle = cluster.submit(cluster.request(segments, want, options), seed=seed)
    submitted()
    for item in handle:
        meta = item.meta
        yield Output(
            handle.id,
            meta.get("flow", ""),
            meta.get("walk", ""),
            item.modality,
            item.channel,
            item.tensor,
            tuple(meta.get("iters", ())),
        )
    error = handle.error
    if error is not None:
        raise RequestFailed(
            ErrorInfo(
                error.kind or "error",
                error.message or "request failed",
                error.flow,
                error.walk,
                error.node,
            )
        )


class WorkerDied(RuntimeError):
    """A worker process of the deployment died while the request ran."""
