"""What a deployment is checked for before any weight is built: devices, weights, memory.

`wgc run` and `wgc serve` call `preflight` on a compiled plan before they start a worker. For
each rank, in order:

1. **its device exists here**: a rank on ``cuda:N`` on a machine whose torch has no CUDA (or
   fewer than ``N + 1`` GPUs) is refused in one line (`Refusal.code` ``WG825``), where it used
   to build every weight first and end in ``Torch not compiled with CUDA enabled``;
2. **its weights** (`wgc_runtime.contract.weights`: every node class's `Node.weights`, parts of
   one key counted once per rank): a part with a checkpoint is counted from the checkpoint's
   safetensors headers (``model.safetensors.index.json`` and its shards, or the files; the
   header of each file, never its tensors), one without from the sizes its config declares;
   past `RANDOM_LIMIT` bytes of weights with no checkpoint is a refusal (``WG827``) unless the
   run asks for random weights;
3. **it fits its device**: the weights plus the plan's estimate (KV pages, captured static
   buffers, streams: `MemorySpec`) against the device's memory (a GPU's total, the host's
   physical memory for the CPU); past it is a refusal (``WG826``) with the numbers.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from wgc_runtime.contract.spec import RankSpec
from wgc_runtime.contract.weights import WeightParts

# random weights past this size are a real-size model without its checkpoint (the examples'
# tiny sizes are a few megabytes; the smallest real one, an audio codec, is 80 MB of parameters)
RANDOM_LIMIT = 1 << 30
_HEADER_LIMIT = 100 << 20  # a safetensors header past this is not one
_DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "F16": 2}
_DTYPE_BYTES |= {"BF16": 2, "I16": 2, "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1}
_DTYPE_BYTES |= {"F8_E5M2": 1}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One reason the deployment cannot start: a registered code and one line of text."""

    code: str
    message: str
    help: str = ""


@dataclass(frozen=True, slots=True)
class RankWeights:
    """A rank's weights as counted: bytes per part key, and which parts have no checkpoint."""

    rank: int
    device: str
    parts: dict[str, int]
    random: dict[str, str]  # part key -> the nodes holding random weights

    @property
    def nbytes(self) -> int:
        return sum(self.parts.values())


def gib(n: int) -> str:
    return f"{n / 2**30:,.1f} GiB" if n < 2**60 else f"{n:.3g} bytes"


def safetensors_files(path: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint (a file, an indexed folder, or a folder of files);
    empty when there are none (a ``.bin`` or ``.pt`` checkpoint)."""
    p = Path(path)
    if p.is_file():
        return [p] if p.suffix == ".safetensors" else []
    index = p / "model.safetensors.index.json"
    if index.is_file():
        shards = json.loads(index.read_text()).get("weight_map", {}).values()
        return [p / s for s in sorted(set(shards))]
    return sorted(p.glob("*.safetensors")) if p.is_dir() else []


def header_params(file: Path, names: Sequence[str], skip: Sequence[str]) -> int:
    """Parameters in one safetensors file's tensors whose names contain one of ``names`` (any
    when empty) and none of ``skip``, read from its header alone."""
    with open(file, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > _HEADER_LIMIT:
            raise ValueError(f"`{file}` is not a safetensors file (header of {size} bytes)")
        header = json.loads(f.read(size))
    total = 0
    for name, info in header.items():
        if name == "__metadata__" or any(s in name for s in skip):
            continue
        if names and not any(n in name for n in names):
            continue
        count = 1
        for d in info.get("shape", ()):
            count *= int(d)
        total += count
    return total


def part_bytes(part: WeightParts) -> tuple[int, bool]:
    """A part's bytes on its device and whether they were counted from its checkpoint."""
    files = safetensors_files(part.checkpoint) if part.checkpoint else []
    if not files:
        return part.nbytes, False
    params = sum(header_params(f, part.names, part.skip) for f in files if f.is_file())
    return params * part.dtype_bytes, True


PartsOf = Callable[[object], Sequence[WeightParts]]


def rank_weights(rank: RankSpec, parts_of: PartsOf) -> RankWeights:
    """The weights the rank's nodes will hold (``parts_of(node_spec)`` asks a node class)."""
    parts: dict[str, int] = {}
    random: dict[str, list[str]] = {}
    for node in rank.nodes:
        for part in parts_of(node):
            if part.key not in parts:
                parts[part.key] = part_bytes(part)[0]
                if not part.checkpoint:
                    random[part.key] = []
            if part.key in random:
                random[part.key].append(node.name)
    return RankWeights(
        rank.rank,
        rank.device,
        parts,
        {k: ", ".join(f"`{n}`" for n in v) for k, v in random.items()},
    )


def device_problem(rank: int, device: str, cuda_count: int, torch_version: str) -> Refusal | None:
    """A device the machine does not have (rank ``rank`` placed on ``device``)."""
    kind, _, index = device.partition(":")
    if kind != "cuda":
        return None
    want = int(index or 0)
    if cuda_count == 0:
        return Refusal(
            "WG825",
            f"rank {rank} is placed on `{device}`, but this machine has no CUDA device "
            f"(torch {torch_version}); run a CPU placement (`placements/cpu.yaml`) or use "
            f"`auto:{want}`",
        )
    if want >= cuda_count:
        return Refusal(
            "WG825",
            f"rank {rank} is placed on `{device}`, but this machine has {cuda_count} CUDA "
            f"device{'s' if cuda_count != 1 else ''} (`cuda:0`…`cuda:{cuda_count - 1}`)",
        )
    return None


def weight_problems(w: RankWeights, random_weights: bool) -> list[Refusal]:
    big = {k: n for k, n in w.parts.items() if k in w.random and n > RANDOM_LIMIT}
    if not big or random_weights:
        return []
    nodes = ", ".join(w.random[k] for k in big)
    total = sum(big.values())
    return [
        Refusal(
            "WG827",
            f"rank {w.rank}: {nodes} would build {gib(total)} of random weights: no "
            f"checkpoint is given",
            "give the checkpoint (`--set checkpoint=DIR`; docs/checkpoints.md), or "
            "`--random-weights` to run the real sizes with random weights anyway",
        )
    ]


def memory_problem(
    rank: RankSpec, device: str, w: RankWeights, capacity: int | None
) -> Refusal | None:
    m = rank.memory
    need = w.nbytes + m.total
    if capacity is None or need <= capacity:
        return None
    return Refusal(
        "WG826",
        f"rank {rank.rank} needs {gib(need)} on `{device}`, which has {gib(capacity)}: "
        f"weights {gib(w.nbytes)}, KV cache {gib(m.kv_bytes)}, static buffers "
        f"{gib(m.static_buffer_bytes)}, streams {gib(m.stream_bytes)}",
        "lower `kv_cache.pages` or the weights' `dtype`, or place the rank's nodes on more devices",
    )


def host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True, slots=True)
class Machine:
    """What this machine has: CUDA devices and their memory, and its own memory."""

    cuda_count: int
    cuda_bytes: tuple[int, ...]
    host_bytes: int | None
    torch_version: str

    @classmethod
    def here(cls) -> Machine:
        import torch

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        sizes = tuple(torch.cuda.get_device_properties(i).total_memory for i in range(n))
        return cls(n, sizes, host_memory(), torch.__version__)

    def capacity(self, device: str) -> int | None:
        kind, _, index = device.partition(":")
        if kind == "cpu":
            return self.host_bytes
        if kind == "cuda" and int(index or 0) < len(self.cuda_bytes):
            return self.cuda_bytes[int(index or 0)]
        return None


def preflight(
    ranks: Iterable[RankSpec],
    parts_of: PartsOf,
    machine: Machine,
    *,
    random_weights: bool = False,
) -> list[Refusal]:
    """Every reason the plan's ranks cannot start on ``machine`` (module docstring); a rank
    whose device is missing is not weighed."""
    refusals: list[Refusal] = []
    for rank in ranks:
        device = rank.device
        if device.startswith("auto"):
            index = device.partition(":")[2] or "0"
            device = f"cuda:{index}" if machine.cuda_count else "cpu"
        bad = device_problem(rank.rank, device, machine.cuda_count, machine.torch_version)
        if bad is not None:
            refusals.append(bad)
            continue
        w = rank_weights(rank, parts_of)
        refusals += weight_problems(w, random_weights)
        tight = memory_problem(rank, device, w, machine.capacity(device))
        if tight is not None:
            refusals.append(tight)
    return refusals
