"""The graph runner: replay a shape-static unit at batch buckets.

For each bucket the runner keeps

* static input buffers ``[bucket, *dims]`` (the unit's ports, plus any extra buffers the unit
  declares, e.g. attention metadata: page tables, sequence lengths, slot mapping),
* the static outputs the unit wrote during capture,
* a ``torch.cuda.CUDAGraph`` recorded after a warm-up, into ONE memory pool shared by every
  graph of the runner (and, if the caller passes one, by every runner): buckets are captured
  largest first so the smaller graphs reuse the larger ones' blocks.

`GraphRunner.run` copies a batch into the smallest bucket ≥ its size, pads the rest with each
buffer's pad value (pad rows are chosen by the unit to be harmless: e.g. a slot of -1 writes no
KV), replays, and returns views of the first ``batch`` rows. A batch larger than every bucket
runs eagerly on exactly its size (the plain path).

``carry`` pairs make a loop body self-feeding: after the body, the graph itself copies output
``out`` into input ``in`` (the next iteration's carried value), so consecutive replays chain on
the device without the host; a `run` that passes ``in`` explicitly overrides it (a request
joined or left the batch and the rows moved).

On the CPU (or with ``capture=False``) the SAME code path runs: the same static buffers,
padding, buckets and carries, with the unit called eagerly in place of ``graph.replay()``.
That is what the CPU tests exercise.

``backend`` names how a bucket runs: ``"cuda_graph"`` (recorded and replayed, above),
``"eager"`` (the unit called as is), or ``"inductor"`` (`wgc_runtime.engines.capture.inductor`:
one ``torch.compile`` artifact per bucket). Like a recording, `GraphRunner.capture` compiles
every bucket (largest first, after ``warmup`` eager runs that settle lazy state), so `run` never
compiles; ``compile_seconds`` says what each bucket cost. A unit that does not compile is
logged and run eagerly (``compile_error`` holds why). ``backend=None`` keeps ``capture``'s
meaning: ``"cuda_graph"`` on a CUDA device, else ``"eager"``.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from wgc_runtime.contract.node import DTYPES
from wgc_runtime.contract.spec import TypeSpec
from wgc_runtime.engines.capture.inductor import CompiledBody

UnitFn = Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]]
BACKENDS = ("eager", "cuda_graph", "inductor")

log = logging.getLogger(__name__)


class GraphError(RuntimeError):
    """A unit cannot be captured or run as declared."""


@dataclass(frozen=True, slots=True)
class StaticBuffer:
    """One static input of a unit: per-row ``dims`` (the batch dimension goes in front), dtype,
    and the value padding rows are filled with."""

    dims: tuple[int, ...]
    dtype: torch.dtype
    pad: float | int | bool = 0

    @classmethod
    def of(cls, t: TypeSpec, pad: float | int | bool = 0) -> StaticBuffer:
        if not t.is_static:
            raise GraphError(f"a captured port needs static dims, got {t.dtype}{list(t.dims)}")
        return cls(tuple(int(d) for d in t.dims), DTYPES[t.dtype], pad)


@dataclass(slots=True)
class _Bucket:
    size: int
    inputs: dict[str, torch.Tensor]
    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    graph: Any = None  # torch.cuda.CUDAGraph when captured
    compiled: CompiledBody | None = None  # the `torch.compile`d body (backend "inductor")


def shared_pool(device: torch.device | str) -> Any:
    """A memory pool handle for graphs that should share memory (None on the CPU)."""
    device = torch.device(device)
    return torch.cuda.graph_pool_handle() if device.type == "cuda" else None


class GraphRunner:
    """One captured unit at every bucket (see the module docstring).

    ``fn`` maps the static inputs (``name -> [bucket, *dims]``) to outputs with the batch in
    front; it must be shape-static and never synchronise with the host.
    """

    def __init__(
        self,
        fn: UnitFn,
        inputs: Mapping[str, StaticBuffer],
        buckets: Sequence[int],
        *,
        device: torch.device | str = "cpu",
        carry: Mapping[str, str] | None = None,
        capture: bool | None = None,
        pool: Any = None,
        warmup: int = 2,
        name: str = "unit",
        backend: str | None = None,
    ) -> None:
        if not buckets or any(b <= 0 for b in buckets):
            raise GraphError(f"`{name}`: buckets must be positive, got {list(buckets)}")
        self.fn = fn
        self.specs = dict(inputs)
        self.buckets = sorted(set(int(b) for b in buckets))
        self.device = torch.device(device)
        self.carry = dict(carry or {})
        unknown = [k for k in self.carry if k not in self.specs]
        if unknown:
            raise GraphError(f"`{name}`: carried inputs {unknown} are not static inputs")
        if backend is None:
            captured = self.device.type == "cuda" if capture is None else capture
            backend = "cuda_graph" if captured else "eager"
        elif backend not in BACKENDS:
            raise GraphError(f"`{name}`: unknown backend `{backend}` (one of {list(BACKENDS)})")
        elif capture is not None and capture != (backend == "cuda_graph"):
            raise GraphError(f"`{name}`: capture={capture} contradicts backend `{backend}`")
        self.backend = backend
        self.capture_enabled = backend == "cuda_graph"
        if self.capture_enabled and self.device.type != "cuda":
            raise GraphError(f"`{name}`: CUDA graphs need a CUDA device, not {self.device}")
        self.compile_seconds: dict[int, float] = {}  # bucket -> compile time ("inductor")
        self.compile_error: str | None = None
        self.pool = pool if pool is not None else shared_pool(self.device)
        self.warmup = warmup
        self.name = name
        self._buckets: dict[int, _Bucket] = {}
        self.replays = 0
        self.eager_runs = 0
        self.compiled_runs = 0

    # ------------------------------------------------------------ setup

    def _alloc(self, size: int) -> dict[str, torch.Tensor]:
        return {
            k: torch.full((size, *s.dims), s.pad, dtype=s.dtype, device=self.device)
            for k, s in self.specs.items()
        }

    def _body(self, bufs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        outs = dict(self.fn(bufs))
        for dst, src in self.carry.items():
            if src not in outs:
                raise GraphError(f"`{self.name}`: carried output `{src}` was not produced")
            bufs[dst].copy_(outs[src].reshape(bufs[dst].shape))
        return outs

    def capture(self) -> GraphRunner:
        """Allocate every bucket's buffers and (on a GPU) record its graph, largest first."""
        for size in sorted(self.buckets, reverse=True):
            if size in self._buckets:
                continue
            bucket = _Bucket(size, self._alloc(size))
            if self.capture_enabled:
                self._record(bucket)
            elif self.backend == "inductor":
                self._compile(bucket)
            self._buckets[size] = bucket
        return self

    def _compile(self, bucket: _Bucket) -> None:
        """Warm up eagerly, then compile the body at this bucket and run it once (that run
        compiles); a failure is logged and the runner falls back to eager."""
        saved = {k: v.clone() for k, v in bucket.inputs.items()}
        with torch.inference_mode():
            for _ in range(self.warmup):  # lazy init (fused weights, tables) happens eagerly
                self._body(bucket.inputs)
        try:
            label = "".join(c if c.isalnum() else "_" for c in f"{self.name}_b{bucket.size}")
            compiled = CompiledBody(self._body, label)
            t0 = time.perf_counter()
            compiled(bucket.inputs)
            self.compile_seconds[bucket.size] = time.perf_counter() - t0
            bucket.compiled = compiled
        except Exception as e:  # any compiler failure means: run eagerly
            self.compile_error = f"{type(e).__name__}: {e}".splitlines()[0]
            log.warning(
                "`%s`: torch.compile failed at bucket %d, running eagerly: %s",
                self.name,
                bucket.size,
                self.compile_error,
            )
            self.backend = "eager"
            for b in self._buckets.values():
                b.compiled = None
        finally:
            for k, v in saved.items():  # warm-up and compile ran carries
                bucket.inputs[k].copy_(v)

    def _record(self, bucket: _Bucket) -> None:
        saved = {k: v.clone() for k, v in bucket.inputs.items()}
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(self.warmup):  # lazy init, autotuning, allocator warm-up
                self._body(bucket.inputs)
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            bucket.outputs = self._body(bucket.inputs)
        bucket.graph = graph
        for k, v in saved.items():  # warm-up and capture may have run carries
            bucket.inputs[k].copy_(v)

    # ------------------------------------------------------------ running

    def bucket_for(self, batch: int) -> int | None:
        """The smallest bucket ≥ ``batch``, or None when the batch is larger than every one."""
        i = bisect_left(self.buckets, batch)
        return self.buckets[i] if i < len(self.buckets) else None

    def static_inputs(self, batch: int) -> dict[str, torch.Tensor]:
        """The static input buffers ``batch`` runs in (for callers that fill them in place)."""
        size = self.bucket_for(batch)
        if size is None:
            raise GraphError(f"`{self.name}`: batch {batch} exceeds every bucket {self.buckets}")
        return self._get(size).inputs

    def _get(self, size: int) -> _Bucket:
        if size not in self._buckets:
            self.capture()
        return self._buckets[size]

    def run(self, inputs: Mapping[str, torch.Tensor], batch: int) -> dict[str, torch.Tensor]:
        """Run the unit on ``batch`` rows. ``inputs`` holds ``[batch, *dims]`` values for some or
        all static inputs; those left out keep what the buffer holds (a carried value, or
        metadata the caller wrote in place). Returns views of the first ``batch`` output rows,
        valid until the next `run` at the same bucket."""
        unknown = [k for k in inputs if k not in self.specs]
        if unknown:
            raise GraphError(f"`{self.name}`: unknown inputs {unknown}")
        size = self.bucket_for(batch)
        if size is None:
            return self._run_plain(inputs, batch)
        bucket = self._get(size)
        full = batch == size  # no padding rows: whole buffers, no slices
        for k, v in inputs.items():
            buf = bucket.inputs[k]
            if full:
                buf.copy_(v if v.shape == buf.shape else v.reshape(buf.shape), non_blocking=True)
                continue
            buf[:batch].copy_(v.reshape(batch, *buf.shape[1:]), non_blocking=True)
            buf[batch:].fill_(self.specs[k].pad)
        if bucket.graph is not None:
            bucket.graph.replay()
            outs = bucket.outputs
            self.replays += 1
        elif bucket.compiled is not None:
            outs = bucket.compiled(bucket.inputs)
            self.compiled_runs += 1
        else:
            outs = self._body(bucket.inputs)
            self.eager_runs += 1
        return dict(outs) if full else {k: v[:batch] for k, v in outs.items()}

    def _run_plain(self, inputs: Mapping[str, torch.Tensor], batch: int):
        missing = [k for k in self.specs if k not in inputs]
        if missing:
            raise GraphError(
                f"`{self.name}`: batch {batch} exceeds every bucket {self.buckets}; the plain "
                f"path needs every input, missing {missing}"
            )
        bufs = {k: v.reshape(batch, *self.specs[k].dims).clone() for k, v in inputs.items()}
        self.eager_runs += 1
        return dict(self.fn(bufs))
