"""What the end-to-end tests of BAGEL, V-JEPA 2-AC and π0.5 on their real (tiny) architectures
share: an example compiled with ``--set`` params (a checkpoint the test wrote) into a folder,
one request run on `LocalCluster` or on processes (a conductor and one worker per rank), the
emitted values keyed by (flow, walk, modality), and a request's seeded noise as its nodes draw
it (`CallContext.generator`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
if (
    str(ROOT) not in sys.path
):  # node modules import as `wgc_models.<family>.nodes` (registered: `orpheus.nodes`)
    sys.path.insert(0, str(ROOT))

from wgc.cli.compile import sync  # noqa: E402
from wgc.driver import Driver  # noqa: E402
from wgc_runtime.contract.node import SEED_OPTION, CallContext  # noqa: E402
from wgc_runtime.host.client import Client  # noqa: E402
from wgc_runtime.host.local import LocalCluster  # noqa: E402
from wgc_runtime.host.processes.launcher import Cluster  # noqa: E402

PLACEMENTS = ("cpu", "cpu-2rank", "cpu-3rank")
Outputs = dict[tuple[str, str, str], list[torch.Tensor]]


def compile_to(out: Path, family: str, placement: str, sets: dict[str, str]) -> Path:
    walk = ROOT / "wgc_models" / family / f"{family}.walk"
    place = ROOT / "wgc_models" / family / "placements" / f"{placement}.yaml"
    result = Driver().compile(str(walk), str(place), sets)
    assert result.ok, [d.message for d in result.errors]
    out.mkdir(parents=True, exist_ok=True)
    sync(out, result.files, check=False)
    return out


def run_local(plan: Path, inputs, want, options, rid: str = "r0") -> Outputs:
    c = LocalCluster(plan, strict=True)
    h = c.submit(c.request(inputs, want, options), rid).result()
    assert h.ok, h.error
    assert all(not ex.requests for ex in c.ranks.values()), "state left after the request"
    got: Outputs = {}
    for o in h.outputs:
        got.setdefault((o.meta["flow"], o.meta["walk"], o.modality), []).append(o.tensor)
    return got


def start(plan: Path) -> Cluster:
    cwd = os.getcwd()
    os.chdir(ROOT)  # workers import node impls relative to the project root
    try:
        return Cluster(str(plan), progress=None, ready_timeout=180).start()
    finally:
        os.chdir(cwd)


def run_processes(cluster: Cluster, requests: list[tuple[Any, ...]]) -> list[Outputs]:
    """Each ``(inputs, want, options, rid)`` submitted at once, then collected."""
    assert cluster.client_address is not None
    with Client(cluster.client_address) as client:
        streams = [
            client.submit(inputs, want, options, deadline=120, request_id=rid)
            for inputs, want, options, rid in requests
        ]
        outs = []
        for s in streams:
            got: Outputs = {}
            for o in s.collect():
                assert o.value is not None, o
                got.setdefault((o.flow, o.walk, o.modality), []).append(o.value)
            outs.append(got)
    assert not cluster.failure, cluster.failure
    return outs


def noise(shape, salt: str, rid: str, seed: int | None = None) -> torch.Tensor:
    """The request ``rid``'s noise as a node draws it (``ctx.generator(salt, per_call=False)``)."""
    options = {} if seed is None else {SEED_OPTION: seed}
    ctx = CallContext(request_id=rid, walk="", call=0, options=options)
    return torch.randn(shape, generator=ctx.generator(salt, per_call=False))


def save_module(module: torch.nn.Module, path: Path, prefix: str = "") -> None:
    """``module``'s weights as one safetensors file, names under ``prefix``."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    state = {prefix + k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(path))
