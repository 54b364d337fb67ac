"""Two Orpheus deployments side by side, rounds alternated: a change's effect where wall-time
rounds are too noisy to show it.

    .venv/bin/python benchmarks/speech_paired.py [--rounds 24] [--placement cpu-2rank-compiled]
        [--base OTHER_CHECKOUT] [--env-a K=V ...] [--env-b K=V ...]

Deployment A runs the code of ``--base`` (another checkout, e.g. a ``git worktree`` of the
previous commit: A's processes import its ``wgc_runtime/`` (earlier ``runtime/``) folder as
``wgc_runtime`` and its ``wgc_models/`` (earlier ``examples/``) folder, the nodes, as
``wgc_models``) or of this checkout; deployment B runs this
checkout's. ``--env-a`` / ``--env-b`` add environment variables to one deployment's processes
(e.g. ``TORCHINDUCTOR_CPP_WRAPPER=1``). Both compile the same plan from this checkout
(`speech_tts.plan_for`, the tiny checkpoints), start, warm up, and then serve ``--rounds``
rounds of `speech_tts`'s c = 16 request each, alternating which goes first. Printed: each
side's throughput (median and range), the median of the per-round ratios B / A, and each
process's CPU time per round (user + system from ``/proc/<pid>/stat``, the round's start to
its end): on a shared machine a process's CPU for a round varies far less than the round's
wall time, so a few percent of a rank's work shows here that the throughput
ratio cannot resolve.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _p in (str(ROOT), str(ROOT / "benchmarks")):  # once: a spawned child re-runs this module,
    if _p not in sys.path:  # and must keep a base deployment's shim (`start`) first
        sys.path.insert(0, _p)

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def env_pairs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for kv in pairs:
        key, sep, value = kv.partition("=")
        if not sep:
            raise SystemExit(f"--env-a/--env-b take K=V, got {kv!r}")
        out[key] = value
    return out


def start(stack: ExitStack, folder: Path, env: dict[str, str], base: Path | None):
    """A `Cluster` on ``folder`` whose processes see ``env`` and, with ``base``, import
    ``base/wgc_runtime`` as ``wgc_runtime`` and ``base/wgc_models`` (the nodes) as ``wgc_models``
    (spawned processes take this process's ``sys.path``)."""
    from wgc_runtime.host.processes.launcher import Cluster

    saved_env, saved_path = dict(os.environ), list(sys.path)
    try:
        os.environ.update(env)
        if base is not None:
            shim = Path(tempfile.mkdtemp(prefix="wgc-base-"))
            # commits before the folder took its package's name kept it in runtime/
            old = base / "runtime"
            runtime = old if old.is_dir() else base / "wgc_runtime"
            (shim / "wgc_runtime").symlink_to(runtime.resolve())
            models = base / "wgc_models"
            if not models.is_dir():  # before one home per model: the nodes were in examples/
                models = base / "examples"
                (shim / "examples").symlink_to(models.resolve())
            (shim / "wgc_models").symlink_to(models.resolve())
            sys.path.insert(0, str(shim))
        cluster = Cluster(str(folder), progress=None, ready_timeout=900)
        stack.enter_context(cluster)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:] = saved_path
    return cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--placement", default="cpu-2rank-compiled")
    ap.add_argument("--base", type=Path, help="another checkout whose runtime deployment A runs")
    ap.add_argument("--env-a", nargs="*", default=[], metavar="K=V")
    ap.add_argument("--env-b", nargs="*", default=[], metavar="K=V")
    ap.add_argument("--tokens", type=int, default=140)
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"

    import speech_tts as st
    import torch

    from tests.reference import checkpoints

    torch.set_num_threads(1)
    request = (st.TEXT, ["audio"], {"max_tokens": args.tokens})
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        ckpt = Path(tmp) / "ckpt"
        checkpoints.orpheus(ckpt, seed=0)
        sets = {"checkpoint": str(ckpt / "lm"), "snac_checkpoint": str(ckpt / "snac")}
        folder = st.plan_for("orpheus", args.placement, sets, Path(tmp) / args.placement)
        sides = [
            start(stack, folder, env_pairs(args.env_a), args.base),
            start(stack, folder, env_pairs(args.env_b), None),
        ]
        for c in sides:
            assert c.client_address is not None
            st.served(c.client_address, 1, (st.TEXT, ["audio"], {"max_tokens": 35}))
            st.served(c.client_address, 16, request)
        print(f"load before {os.getloadavg()}", flush=True)
        throughput: list[list[float]] = [[], []]
        cpu: list[dict[str, list[float]]] = [{}, {}]
        for r in range(args.rounds):
            for k in (0, 1) if r % 2 == 0 else (1, 0):
                c = sides[k]
                assert c.client_address is not None
                pids = {name: child.pid for name, child in c.procs.items()}
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                throughput[k].append(st.served(c.client_address, 16, request)["throughput"])
                for name, pid in pids.items():
                    cpu[k].setdefault(name, []).append(cpu_seconds(pid) - before[name])
        print(f"load after {os.getloadavg()}")
    med = statistics.median
    ratios = [b / a for a, b in zip(*throughput, strict=True)]
    for label, t in zip("AB", throughput, strict=True):
        print(f"{label}: {med(t):.1f} audio s / wall s ({min(t):.1f}-{max(t):.1f})")
    print(f"B / A throughput: median {med(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})")
    for name in cpu[0]:
        a, b = statistics.mean(cpu[0][name]), statistics.mean(cpu[1][name])
        print(f"CPU a round, {name}: A {a:.3f} s, B {b:.3f} s, B / A {b / a:.3f}")


if __name__ == "__main__":
    main()
