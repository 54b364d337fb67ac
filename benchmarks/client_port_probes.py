"""What hostile traffic at the conductor's ZeroMQ client port costs the server (issue 33's goal:
under 100 ms of server time a probe): the conductor process's CPU per probe
(`tests.e2e.port_probes`), for

* ``wgc serve generated/bagel/cpu`` (a loopback deployment: its client port takes plain
  connections): the probes of `port_probes.probes`, then, with ``--large``, a frame just under
  the port's ``MAXMSGSIZE`` (256 MiB) and one message of four such frames (libzmq bounds each
  frame, not a message's total);
* a CURVE deployment (the failure-test model's 2 ranks, ``curve=True``, as a placement naming
  hosts runs): connections without a key and with a key it never made, refused in the
  handshake.

    .venv/bin/python benchmarks/client_port_probes.py [--large] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.e2e.port_probes import (  # noqa: E402
    Cost,
    conductor_of,
    curve_probes,
    idle_rate,
    measure,
    probes,
    raw_probe,
    run_all,
)
from tests.e2e.runtime_support import compile_faults, start  # noqa: E402
from tests.e2e.serve_support import served  # noqa: E402
from wgc_runtime.host.transport.sockets import CLIENT_FRAME_BYTES  # noqa: E402


def show(cost: Cost) -> Cost:
    print(f"  {cost.name:<34} x{cost.probes:<3} {cost.cpu_ms:8.1f} ms CPU  "
          f"{cost.wall_ms:8.1f} ms wall", flush=True)  # fmt: skip
    return cost


def plain(large: bool) -> list[Cost]:
    print("wgc serve generated/bagel/cpu (loopback, plain client port):")
    with served("generated/bagel/cpu", "--api-key", "sk-probe") as s:
        address = s.client_address
        pid = conductor_of(s.proc.pid, address)
        costs = [show(c) for c in run_all(pid, probes(address))]
        if large:
            idle = idle_rate(pid)
            frame = b"\x01" * (CLIENT_FRAME_BYTES - 1024)
            for name, frames in (("a frame at MAXMSGSIZE", [frame]),
                                 ("4 frames at MAXMSGSIZE, 1 message", [frame] * 4)):  # fmt: skip
                costs.append(show(measure(pid, name, 1, raw_probe(address, frames), idle, 10.0)))
    return costs


def curve() -> list[Cost]:
    print("a CURVE deployment (failure-test model, 2 ranks):")
    with tempfile.TemporaryDirectory() as tmp:
        cluster = start(compile_faults(Path(tmp)), curve=True)
        try:
            address, key = cluster.client_address, cluster.client_key
            assert address is not None and key is not None
            pid = cluster.pids["conductor"]
            return [show(c) for c in run_all(pid, curve_probes(address, key.server_public))]
        finally:
            cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--large", action="store_true", help="also frames at MAXMSGSIZE (~1.3 GB)")
    ap.add_argument("--json", help="write the costs here")
    args = ap.parse_args()
    costs = plain(args.large) + curve()
    worst = max(costs, key=lambda c: c.cpu_ms)
    print(f"slowest: {worst.name}, {worst.cpu_ms:.1f} ms of conductor CPU a probe")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(c) for c in costs], indent=1) + "\n")


if __name__ == "__main__":
    main()
