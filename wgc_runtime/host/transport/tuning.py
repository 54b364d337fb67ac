"""The runtime's latency knobs, read from the environment in this one place.

Every process of a run (the launcher's spawned children inherit its environment) reads them once
at import:

``WGC_BUSY_POLL_US`` (default 0: off; an opt-in for machines a deployment has to itself, e.g. 500)
    After activity (a message sent or received), a process polls its sockets without sleeping
    for up to this many microseconds before it blocks. A process that went to sleep must be
    woken by the kernel when a message lands and runs cold; within the window it answers at once.
    An idle process never spins (the window counts from its last activity). Off by default: on a
    machine shared with other work a spinning process takes turns a peer needs, and the hot path
    must meet its goals without it. Measured on a shared 2-core VM (`benchmarks/README.md`,
    busy-poll on vs off): 500 µs makes the streamed 2-rank TTS 1.29x and hop10 1.62x faster.
``WGC_BUSY_POLL_YIELD`` (default 1)
    While spinning, give the core away between polls (``sched_yield``), so a spinner never holds
    a core a runnable peer needs (without it a 200 µs window made the chain *slower* on 2 cores,
    at 2.2x the CPU).
``WGC_HOLD_US`` (default 10000; 0: send every turn)
    How long a busy worker may hold the messages its turns queued before it sends them, as one
    batch per peer (`worker_main.SendHold`): a turn shorter than this (a decode step) sends
    every few turns instead of every one; an idle worker sends at once. Measured on a 2-core
    VM (`benchmarks/README.md`, paired rounds against 0): a TTS model at concurrency
    16 on `cpu-2rank-compiled` sends ~2.3x fewer batches from the LM rank for +2-3% throughput.
``WGC_IPC`` (default 1)
    Peers on the same host talk over ``ipc://`` (Unix domain) sockets instead of TCP loopback.
``WGC_RING`` (default 1; 0: ZeroMQ between the processes of one host too)
    Processes of one host (the conductor and the ranks that share its arena) send to each
    other through single-producer/single-consumer rings in the arena segment instead of ZeroMQ
    (`wgc_runtime.host.transport.ring`); ZeroMQ stays for other hosts, the launcher and clients.
``WGC_RING_KIB`` (default 1024)
    Bytes per ring (one per ordered pair of processes; sparse: pages are touched as used).
``WGC_RING_SPIN_US`` (default 50)
    How long a process with rings spins on them after its last activity before it sleeps,
    only while the host's 1-minute load average is below its core count.
``WGC_DIRECT`` (default 1; 0: off)
    A worker runs a plain piece of a walk as the code its rank module holds
    (`wgc_runtime.core.executor.direct`) instead of through the generic executor; off is for
    measuring the generic path beside it (`benchmarks/runtime_hops.py`).
``WGC_DIRECT_OUT`` (default 1; 0: off)
    On, a request's outputs go from the rank that made them straight to its client (a `Client`
    connected to every rank's client-out socket: `wgc_runtime.contract.route`); off, every
    output goes through the conductor (for measuring the relay beside it). An output a rank
    SIGKILLed right after a direct send takes with it (its count reached the conductor, the
    output was still in the dead process's ZeroMQ queue) fails its request naming the rank,
    within `wgc_runtime.host.rank_links.LOST_GRACE_S` of the drop (`rank_links`).
``WGC_PROFILE`` (default unset)
    A path prefix: every worker and the conductor run under ``cProfile`` and write
    ``<prefix>.<who>.prof`` when they exit (``python -m pstats`` reads them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True, slots=True)
class Tuning:
    busy_poll_us: float = 0.0
    busy_poll_yield: bool = True
    ipc: bool = True
    profile: str | None = None
    hold_us: float = 10_000.0
    ring: bool = True
    ring_kib: int = 1024
    ring_spin_us: float = 50.0
    direct: bool = True
    direct_out: bool = False

    @classmethod
    def from_env(cls) -> Tuning:
        return cls(
            busy_poll_us=max(0.0, _float("WGC_BUSY_POLL_US", 0.0)),
            busy_poll_yield=_flag("WGC_BUSY_POLL_YIELD", True),
            ipc=_flag("WGC_IPC", True),
            profile=os.environ.get("WGC_PROFILE") or None,
            hold_us=max(0.0, _float("WGC_HOLD_US", 10_000.0)),
            ring=_flag("WGC_RING", True),
            ring_kib=max(1, int(_float("WGC_RING_KIB", 1024))),
            ring_spin_us=max(0.0, _float("WGC_RING_SPIN_US", 50.0)),
            direct=_flag("WGC_DIRECT", True),
            direct_out=_flag("WGC_DIRECT_OUT", True),
        )


TUNING = Tuning.from_env()
