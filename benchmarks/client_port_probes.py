"""What hostile traffic at the conductor's ZeroMQ client port costs the server (issue 33's goal:
under 100 ms of server time a probe): the conductor process's CPU per probe
(`tests.e2e.port_probes`), for

* ``wgc serve generated/bagel/cpu`` (a loopback deployment: its client port is an ``ipc://``
  socket in the deployment's private folder): the probes of `port_probes.probes` from the
  owner's processes, another user's process (uid 65534, when this runs as root) trying to send
  every size (the kernel refuses its ``connect``), then, with ``--large``, the owner's frame just
  under the port's ``MAXMSGSIZE`` (256 MiB) and one message of four such frames (libzmq bounds
  each frame, not a message's total);
* a loopback deployment with ``client_port="curve"`` (the failure-test model's 2 ranks) and the
  door's byte limits at 16 MiB (so the port's frame cap is 17 MiB): strangers without a key and
  with a key it never made, sending 1 KB to 4 frames at the cap (refused in the handshake),
  and the key holder's frames at and past the cap.

    .venv/bin/python benchmarks/client_port_probes.py [--large] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
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
    holder_probes,
    idle_rate,
    measure,
    other_user_probes,
    probes,
    raw_probe,
    run_all,
)
from tests.e2e.runtime_support import compile_faults, start  # noqa: E402
from tests.e2e.serve_support import served  # noqa: E402
from wgc_runtime.host.transport.client_port import frame_limit  # noqa: E402
from wgc_runtime.host.transport.sockets import CLIENT_FRAME_BYTES  # noqa: E402

DOOR_BYTES = 16 << 20  # the CURVE deployment's `file_bytes` and `request_bytes`
STRANGERS = ("no key", "unknown key", "another user")  # the probes of peers without a right


def show(cost: Cost) -> Cost:
    print(f"  {cost.name:<34} x{cost.probes:<3} {cost.cpu_ms:8.1f} ms CPU  "
          f"{cost.wall_ms:8.1f} ms wall", flush=True)  # fmt: skip
    return cost


def plain(large: bool) -> list[Cost]:
    print("wgc serve generated/bagel/cpu (loopback: the client port is an ipc socket):")
    with served("generated/bagel/cpu", "--api-key", "sk-probe") as s:
        address = s.client_address
        assert address.startswith("ipc://"), address
        pid = conductor_of(s.proc.pid, address)
        costs = [show(c) for c in run_all(pid, probes(address))]
        if os.geteuid() == 0:
            costs += [show(c) for c in run_all(pid, other_user_probes(address, CLIENT_FRAME_BYTES))]
        else:
            print("  (another user's probes need root: skipped)")
        if large:
            idle = idle_rate(pid)
            frame = b"\x01" * (CLIENT_FRAME_BYTES - 1024)
            for name, frames in (("owner, a frame at MAXMSGSIZE", [frame]),
                                 ("owner, 4 frames at MAXMSGSIZE", [frame] * 4)):  # fmt: skip
                costs.append(show(measure(pid, name, 1, raw_probe(address, frames), idle, 10.0)))
    return costs


def curve() -> list[Cost]:
    cap = frame_limit(DOOR_BYTES)
    print(f"a loopback CURVE client port (failure-test model, 2 ranks; frame cap {cap >> 20} MiB):")
    limits = {"file_bytes": DOOR_BYTES, "request_bytes": DOOR_BYTES}
    with tempfile.TemporaryDirectory() as tmp:
        plan = compile_faults(Path(tmp))
        cluster = start(plan, client_port="curve", config={"limits": limits})
        try:
            address, key = cluster.client_address, cluster.client_key
            assert address is not None and key is not None and cluster.keys is None
            pid = cluster.pids["conductor"]
            costs = [show(c) for c in run_all(pid, curve_probes(address, key, cap))]
            held = run_all(pid, holder_probes(address, key, cap), settle=5.0)
            return costs + [show(c) for c in held]
        finally:
            cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--large", action="store_true", help="also frames at MAXMSGSIZE (~1.3 GB)")
    ap.add_argument("--json", help="write the costs here")
    args = ap.parse_args()
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    costs = plain(args.large) + curve()
    print("load average (1, 5, 15 min): {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    strangers = [c for c in costs if c.name.startswith(STRANGERS)]
    for label, some in (("a stranger's", strangers), ("any", costs)):
        worst = max(some, key=lambda c: c.cpu_ms)
        print(f"slowest, {label}: {worst.name}, {worst.cpu_ms:.1f} ms of conductor CPU a probe")
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(c) for c in costs], indent=1) + "\n")


if __name__ == "__main__":
    main()
