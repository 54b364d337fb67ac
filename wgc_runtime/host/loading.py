"""Loading a deployment: generated modules, then the nodes a rank hosts.

**Generated modules** (``conductor.py``, ``rank_<r>.py`` in a `wgc compile` output folder) are
imported by path under a unique name. Before one is executed its ``SPEC_VERSION = N`` line is
read and checked against this runtime's (`wgc_runtime.contract.spec.check_spec_version`): a
module from another wgc version is refused with both versions named, instead of failing somewhere
inside its constructors or, worse, loading and running with a different meaning.

**Nodes.** Each `NodeSpec` names its ``impl`` (``module:Class``), imported relative to the
project root (the working directory `wgc run` starts from) and built with a `NodeContext`: the
node's name, config, the rank's device (``auto:N`` resolved), engine, KV labels, tensor-parallel
position, its declared port types, and the plan's capture units that contain its calls (so an
engine can build its CUDA-graph runner from the compiler's capture plan).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.spec import (
    CaptureSpec,
    NodeSpec,
    RankSpec,
    SpecVersionError,
    check_spec_version,
)

if TYPE_CHECKING:  # the node API imports torch: the launcher loads the conductor's spec only
    from wgc_runtime.contract.node import Node, NodeContext

_VERSION_LINE = re.compile(r"^SPEC_VERSION = (\d+)\b", re.MULTILINE)


class DeploymentError(RuntimeError):
    """A generated folder that cannot be run (missing or stale modules, a node that does not
    import)."""


# -------------------------------------------------------------------------- generated modules


def load_generated(plan_dir: str | os.PathLike, name: str) -> ModuleType:
    """Import ``<plan_dir>/<name>.py`` (``conductor`` or ``rank_<r>``) under a unique name,
    after checking the spec version it was written for."""
    path = Path(plan_dir) / f"{name}.py"
    if not path.is_file():
        raise DeploymentError(f"`{path}` does not exist (is `{plan_dir}` a `wgc compile` output?)")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DeploymentError(f"cannot read `{path}`: {exc}") from exc
    found = _VERSION_LINE.search(text)
    try:
        check_spec_version(int(found.group(1)) if found else None, str(path))
    except SpecVersionError as exc:
        raise DeploymentError(str(exc)) from None
    ensure_import_root()
    key = f"wgc_generated_{abs(hash(str(path.resolve())))}_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise DeploymentError(f"cannot import `{path}`")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[key]
        raise DeploymentError(f"`{path}` does not import: {type(exc).__name__}: {exc}") from exc
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


def load_plan(plan_dir: str | os.PathLike) -> tuple[ConductorSpec, list[RankSpec]]:
    """The conductor spec and every rank spec of a generated folder."""
    conductor = load_conductor(plan_dir)
    ranks = [load_rank(plan_dir, r) for r in range(conductor.world_size)]
    for r in ranks:
        if (r.model, r.placement, r.world_size) != (
            conductor.model,
            conductor.placement,
            conductor.world_size,
        ):
            raise DeploymentError(
                f"`{plan_dir}/rank_{r.rank}.py` belongs to `{r.model}` @ `{r.placement}` "
                f"({r.world_size} ranks), not to `{conductor.model}` @ `{conductor.placement}` "
                f"({conductor.world_size} ranks): recompile the folder"
            )
    return conductor, ranks


def ensure_import_root() -> None:
    """A node ``impl`` path that names no registered family (`wgc_runtime.contract.families`)
    may be a module of the project `wgc run` is started in: its folder is importable too."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


# -------------------------------------------------------------------------- devices and nodes


def resolve_device(device: str) -> str:
    """``auto:N`` is ``cuda:N`` when CUDA is available, else ``cpu``; others as they are.

    A ``cuda`` device this machine lacks (a CPU build of torch, no GPU visible, an index past
    the last GPU) is a `DeploymentError` saying so, before any node is built: the placement was
    written for another machine, and a traceback from deep inside torch would not say that."""
    if device.startswith("auto"):
        import torch

        index = device.partition(":")[2] or "0"
        return f"cuda:{index}" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        _check_cuda(device)
    return device


def _check_cuda(device: str) -> None:
    import torch

    index = device.partition(":")[2]
    if not torch.cuda.is_available():
        why = (
            "this torch build has no CUDA"
            if torch.version.cuda is None
            else "no CUDA device is visible"
        )
        raise DeploymentError(
            f"the placement puts a rank on `{device}`, but {why}: use a placement for this "
            "machine (a CPU one, or `auto:N` devices, which fall back to the CPU)"
        )
    count = torch.cuda.device_count()
    if index.isdigit() and int(index) >= count:
        raise DeploymentError(
            f"the placement puts a rank on `{device}`, but this machine has "
            f"{count} CUDA device{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
        )


def node_captures(rank: RankSpec, node: str) -> tuple[CaptureSpec, ...]:
    """The rank's capture units that contain a call of ``node``."""
    return tuple(cap for cap in rank.captures if node in cap.nodes)


def node_context(
    rank: RankSpec,
    spec: NodeSpec,
    device: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> NodeContext:
    from wgc_runtime.contract.node import NodeContext

    tp_rank = spec.ranks.index(rank.rank) if rank.rank in spec.ranks else 0
    return NodeContext(
        name=spec.name,
        impl=spec.impl,
        config=dict(spec.config),
        device=resolve_device(device or rank.device),
        engine=spec.engine,
        labels=spec.labels,
        tp_rank=tp_rank,
        tp_size=spec.tp,
        inputs=dict(spec.inputs),
        outputs=dict(spec.outputs),
        captures=node_captures(rank, spec.name),
        kv_cache=rank.kv_cache,
        batching=rank.batching,
        attention=rank.attention,
        progress=progress,
    )


def node_class(spec: NodeSpec) -> type[Node]:
    from wgc_runtime.contract.families import resolve_module
    from wgc_runtime.contract.node import Node

    module, _, cls = spec.impl.partition(":")
    module = resolve_module(module)
    if not module or not cls:
        raise DeploymentError(f"node `{spec.name}`: impl `{spec.impl}` is not `module:Class`")
    ensure_import_root()
    try:
        impl = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError, ValueError) as exc:
        where = ""
        if isinstance(exc, ModuleNotFoundError) and exc.name == module.split(".")[0]:
            where = f" (node modules are imported from the folder wgc runs in, {os.getcwd()})"
        raise DeploymentError(
            f"node `{spec.name}`: cannot import `{spec.impl}`: {exc}{where}"
        ) from exc
    if not (isinstance(impl, type) and issubclass(impl, Node)):
        raise DeploymentError(f"node `{spec.name}`: `{spec.impl}` is not a `Node` subclass")
    return impl


def load_nodes(
    rank: RankSpec, device: str | None = None, progress: Callable[[str], None] | None = None
) -> dict[str, Node]:
    """Every node ``rank`` hosts, constructed on its device (``device`` overrides the plan's);
    ``progress(line)`` hears about each one."""
    nodes: dict[str, Node] = {}
    for n in rank.nodes:
        t0 = time.monotonic()
        ctx = node_context(rank, n, device, progress)
        if progress:
            progress(f"loading `{n.name}` ({n.impl}) on {ctx.device}")
        nodes[n.name] = node_class(n)(ctx)
        if progress:
            progress(f"loaded `{n.name}` in {time.monotonic() - t0:.1f} s")
    return nodes
