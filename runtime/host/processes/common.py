"""What the launcher, the conductor process and the worker processes share: loading generated
modules, devices, node construction, parent-death watchdogs and signal handling."""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.util
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from wgc_runtime.contract.spec import ConductorSpec, RankSpec

# launcher <-> child messages (the cores never see them)
HELLO = "l.hello"  # child -> launcher: my inbox address (and the conductor's client address)
PEERS = "l.peers"  # launcher -> child: everybody's address
PROGRESS = "l.progress"  # child -> launcher: a line to show while loading
READY = "l.ready"  # child -> launcher: loaded and warmed up
FAILED = "l.failed"  # child -> launcher: could not start (the message says why)
SHUTDOWN = "l.shutdown"  # launcher -> child: leave the loop and exit
RANK_DIED = "l.rank_died"  # launcher -> conductor: a worker process is gone


class DeploymentError(RuntimeError):
    """A generated folder that cannot be run (missing modules, a worker that failed to load)."""


# -------------------------------------------------------------------------- generated modules


def load_generated(plan_dir: str | os.PathLike, name: str) -> ModuleType:
    """Import ``<plan_dir>/<name>.py`` (``conductor`` or ``rank_<r>``) under a unique name."""
    path = Path(plan_dir) / f"{name}.py"
    if not path.is_file():
        raise DeploymentError(f"`{path}` does not exist (is `{plan_dir}` a `wgc compile` output?)")
    ensure_import_root()
    key = f"wgc_generated_{abs(hash(str(path.resolve())))}_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def load_conductor(plan_dir: str | os.PathLike) -> ConductorSpec:
    spec = getattr(load_generated(plan_dir, "conductor"), "CONDUCTOR", None)
    if not isinstance(spec, ConductorSpec):
        raise DeploymentError(f"`{plan_dir}/conductor.py` defines no `CONDUCTOR`")
    return spec


def load_rank(plan_dir: str | os.PathLike, rank: int) -> RankSpec:
    spec = getattr(load_generated(plan_dir, f"rank_{rank}"), "RANK", None)
    if not isinstance(spec, RankSpec):
        raise DeploymentError(f"`{plan_dir}/rank_{rank}.py` defines no `RANK`")
    return spec


def ensure_import_root() -> None:
    """Node ``impl`` paths (``examples.orpheus.nodes:LLM``) are relative to the project root,
    the working directory `wgc run` is started from."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


# -------------------------------------------------------------------------- devices and nodes


def resolve_device(device: str) -> str:
    """``auto:N`` is ``cuda:N`` when CUDA is available, else ``cpu``; others as they are."""
    if device.startswith("auto"):
        import torch

        index = device.partition(":")[2] or "0"
        return f"cuda:{index}" if torch.cuda.is_available() else "cpu"
    return device


def load_nodes(rank: RankSpec, device: str | None = None, progress=None) -> dict[str, Any]:
    """Instantiate every node of ``rank`` from its ``impl`` (`worker.loader.node_context`) on
    its device (``device`` overrides the plan's; ``auto:N`` resolved); ``progress(line)``
    hears about each one."""
    import dataclasses

    from wgc_runtime.host.loading import node_context

    ensure_import_root()
    device = resolve_device(device or rank.device)
    nodes: dict[str, Any] = {}
    for n in rank.nodes:
        t0 = time.monotonic()
        if progress:
            progress(f"loading `{n.name}` ({n.impl}) on {device}")
        module, _, cls = n.impl.partition(":")
        try:
            impl = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError, ValueError) as exc:
            raise DeploymentError(f"node `{n.name}`: cannot import `{n.impl}`: {exc}") from exc
        ctx = dataclasses.replace(node_context(rank, n), device=device)
        nodes[n.name] = impl(ctx)
        if progress:
            progress(f"loaded `{n.name}` in {time.monotonic() - t0:.1f} s")
    return nodes


def max_batch(spec: ConductorSpec) -> int:
    return int(dict(spec.batching).get("max_batch", 1))


# -------------------------------------------------------------------------- child process hygiene

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, period: float = 0.2) -> None:
    """End this process when the launcher goes away, however it goes: the kernel sends SIGKILL
    on parent death (Linux ``prctl``), and a watchdog thread notices reparenting elsewhere."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(period)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="wgc-parent-watchdog", daemon=True).start()


class Stop(BaseException):
    """Raised in a child's main thread by SIGTERM: leave the loop, clean up, exit."""


def child_signals() -> None:
    """Ctrl-C reaches every process of the terminal's group: children ignore SIGINT and let the
    launcher stop them in order; SIGTERM stops a child cleanly."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def on_term(signum, frame):
        raise Stop()

    signal.signal(signal.SIGTERM, on_term)


def fast_exit(code: int) -> None:
    """Leave a child at once: its sockets and arena are closed already, and the interpreter's
    own teardown (torch's, mostly) would add a second or more to every shutdown."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def child_setup(boot: dict[str, Any]) -> None:
    """The first thing a spawned child does."""
    die_with_parent(int(boot["parent"]))
    child_signals()
    ensure_import_root()
    if boot.get("threads"):
        import torch

        torch.set_num_threads(int(boot["threads"]))
