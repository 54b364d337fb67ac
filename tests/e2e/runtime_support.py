"""Helpers for the runtime's process tests: compile the failure-test model or any model (any
placement text),
start a `Cluster` from the project root, stop it checking nothing is left, and read which TCP
addresses a process listens on (``/proc``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # node modules are imported as `tests.e2e.faults.nodes`
    sys.path.insert(0, str(ROOT))

from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_runtime.host.processes.launcher import Cluster  # noqa: E402
from wgc_runtime.host.transport.segment import leaked_segments  # noqa: E402

FAULTS = ROOT / "tests" / "e2e" / "faults"
TWO_RANKS = (FAULTS / "placements" / "cpu-2rank.yaml").read_text()


def compile_faults(out: Path, placement: str = TWO_RANKS) -> str:
    """The failure-test model compiled for ``placement`` (YAML text) into ``out``."""
    return compile_model(FAULTS / "faults.walk", out, placement)


def compile_model(walk: Path, out: Path, placement: str) -> str:
    """``walk`` compiled for ``placement`` (YAML text) into ``out``; the plan folder."""
    out.mkdir(parents=True, exist_ok=True)
    yaml = out / "placement.yaml"
    yaml.write_text(placement)
    result = Driver().compile(str(walk), str(yaml))
    assert result.ok, [d.message for d in result.errors]
    plan = out / "plan"
    sync(plan, result.files, check=False)
    return str(plan)


def start(plan_dir: str, **kw) -> Cluster:
    cwd = os.getcwd()
    os.chdir(ROOT)  # workers import node impls relative to the project root
    try:
        return Cluster(plan_dir, progress=None, ready_timeout=180, **kw).start()
    finally:
        os.chdir(cwd)


def stop(cluster: Cluster) -> None:
    """Stop ``cluster``: no process of it left, no shared memory."""
    pids = list(cluster.pids.values())
    segment = cluster.segment.name if cluster.segment else None
    cluster.stop()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    if segment:
        assert segment not in leaked_segments()


def listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) of every TCP socket process ``pid`` listens on (Linux)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # 0A: LISTEN
                host, port = f[1].split(":")
                out.add((_address(host), int(port, 16)))
    return out


def _address(hexed: str) -> str:
    if len(hexed) == 8:  # IPv4, little-endian
        return ".".join(str(int(hexed[i : i + 2], 16)) for i in (6, 4, 2, 0))
    return "::" if set(hexed) == {"0"} else hexed
