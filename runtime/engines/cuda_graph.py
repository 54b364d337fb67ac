"""The CUDA-graph runner: replay shape-static units at batch buckets.

The compiler's capture list
(`wgc_runtime.contract.spec.CaptureSpec`) names the units worth capturing: a
whole loop body that sits on one rank and is shape-static (scope ``loop``: the Loop makes the
body's shapes static by construction, so the body is ONE graph), or one node step (scope
``call``), with the port types and the batch buckets. For each unit and bucket the runner keeps

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
``"eager"`` (the unit called as is), or ``"inductor"``: the CPU analogue of capture, one
``torch.compile(fullgraph=True, dynamic=False)`` artifact per bucket (C++/OpenMP kernels on the
CPU: the elementwise ops between the matrix products fused, one call in place of dozens of
dispatched ops). Like a recording, `capture` compiles every bucket (largest first, after
``warmup`` eager runs that settle lazy state), so `run` never compiles; ``compile_seconds``
says what each bucket cost. Each bucket compiles its own copy of a trampoline's code object
(`torch.compile` keeps its cache on the code object), so a bucket's artifact is its own and
runners never evict one another's under dynamo's recompile limit. A unit that does not compile
is logged and run eagerly (``compile_error`` holds why). A compiled unit runs in
``torch.inference_mode`` (entered around it: dynamo does not trace into it), so it must not
enter inference mode itself. The unit must be traceable: no host
reads, no data-dependent shapes, and mutations of the tensors it closes over (e.g. the K/V pool)
made on base tensors, not views (`wgc_runtime.components.llama.StaticDecode.prepare`).
``backend=None`` keeps ``capture``'s meaning: ``"cuda_graph"`` on a CUDA device, else
``"eager"``.

`MetadataPlanner` double-buffers host-side planning: while step N replays, a side thread fills
staging set ``(N+1) % 2`` with step N+1's metadata (which does not depend on step N's outputs:
positions advance by one, pages are appended); `take` waits for it and the caller copies it
into the static buffers before replay N+1.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from wgc_runtime.contract.node import DTYPES
from wgc_runtime.contract.spec import CaptureSpec, PieceSpec, TypeSpec

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
    compiled: Any = None  # the `torch.compile`d body (backend "inductor")


def _trampoline(body, bufs):
    return body(bufs)


def _compile_body(body: Callable, label: str) -> Callable:
    """``torch.compile`` of ``body`` through a private copy of `_trampoline`'s code: dynamo
    caches per code object, so this artifact has a cache (and a recompile limit) of its own."""
    fresh = types.FunctionType(
        _trampoline.__code__.replace(co_name=f"_wgc_{label}"), _trampoline.__globals__
    )
    # like a recorded graph, the artifact is replayed on the same static buffers without
    # re-checking the Python objects it closed over; only tensor guards (shapes, dtypes,
    # devices of buffers and the K/V pool) stay, which saves ~20 µs per tiny step
    opts = {"guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}
    compiled = torch.compile(fresh, backend="inductor", fullgraph=True, dynamic=False, options=opts)

    def run(bufs):
        # entered outside the compiled frame: dynamo cannot trace into inference mode
        with torch.inference_mode():
            return compiled(body, bufs)

    return run


def inductor_available() -> str | None:
    """None when ``torch.compile`` with inductor can work here, else why not."""
    try:
        import torch._inductor  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the installation
        return f"inductor does not import: {e}"
    import shutil

    if not shutil.which("g++") and not shutil.which("c++") and not shutil.which("clang++"):
        return "no C++ compiler on PATH (inductor's CPU kernels need one)"
    return None


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
            compiled = _compile_body(self._body, label)
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
        for k, v in inputs.items():
            buf = bucket.inputs[k]
            buf[:batch].copy_(v.reshape(batch, *buf.shape[1:]), non_blocking=True)
            if batch < size:
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
        return {k: v[:batch] for k, v in outs.items()}

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


# ---------------------------------------------------------------- units from the capture list


def split_ports(spec: CaptureSpec, piece: PieceSpec) -> tuple[list[str], list[str]]:
    """The capture's ports as (inputs, outputs) "call#port" names, by the piece's calls."""
    ins, outs = [], []
    for call_id in spec.calls:
        call = piece.call(call_id)
        if call is None:
            raise GraphError(f"capture of `{spec.walk}` names call {call_id}, not in the piece")
        ins += [f"{call_id}#{p.port}" for p in call.inputs]
        outs += [f"{call_id}#{p.port}" for p in call.outputs]
    return ins, outs


CallFn = Callable[[int, dict[str, torch.Tensor]], Mapping[str, torch.Tensor]]


@dataclass(frozen=True, slots=True)
class BodyUnit:
    """A captured unit built from the plan: its calls in order, in-body hand-offs resolved
    inside the unit, everything else a static input. ``carry`` pairs carried inputs with the
    in-body output that feeds them next iteration."""

    fn: UnitFn
    inputs: dict[str, StaticBuffer]
    outputs: tuple[str, ...]
    carry: dict[str, str]


def body_unit(
    spec: CaptureSpec,
    piece: PieceSpec,
    call_fn: CallFn,
    extra: Mapping[str, StaticBuffer] | None = None,
) -> BodyUnit:
    """Compose the calls of ``spec`` into one unit (one graph for a whole loop body).

    ``call_fn(call_id, ports)`` runs one call batched (``ports``: port name -> ``[B, ...]``,
    plus every ``extra`` buffer under its own name) and returns its output ports.
    """
    types = dict(spec.ports)
    body = set(spec.calls)
    inputs: dict[str, StaticBuffer] = dict(extra or {})
    wiring: dict[str, str] = {}  # "call#port" input -> "call#port" output of an earlier call
    carry: dict[str, str] = {}
    done: set[int] = set()
    for call_id in spec.calls:
        call = piece.call(call_id)
        if call is None:
            raise GraphError(f"capture of `{spec.walk}` names call {call_id}, not in the piece")
        for p in call.inputs:
            key = f"{call_id}#{p.port}"
            src = p.src
            internal = src.kind == "call" and src.call in body
            if internal and p.mode != "carried" and src.call in done:
                wiring[key] = f"{src.call}#{src.port}"
                continue
            if key not in types:
                raise GraphError(f"capture of `{spec.walk}` has no static type for `{key}`")
            inputs[key] = StaticBuffer.of(types[key])
            if internal and p.mode == "carried":
                carry[key] = f"{src.call}#{src.port}"
        done.add(call_id)
    outputs = tuple(f"{c}#{p.port}" for c in spec.calls for p in piece.call(c).outputs)
    extras = tuple(extra or {})

    def fn(bufs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        values: dict[str, torch.Tensor] = {}
        for call_id in spec.calls:
            call = piece.call(call_id)
            ports = {k: bufs[k] for k in extras}
            for p in call.inputs:
                key = f"{call_id}#{p.port}"
                ports[p.port] = values[wiring[key]] if key in wiring else bufs[key]
            result = call_fn(call_id, ports)
            for p in call.outputs:
                if p.port in result:
                    values[f"{call_id}#{p.port}"] = result[p.port]
        return values

    return BodyUnit(fn, inputs, outputs, carry)


def runner_for(
    spec: CaptureSpec,
    piece: PieceSpec,
    call_fn: CallFn,
    *,
    device: torch.device | str = "cpu",
    extra: Mapping[str, StaticBuffer] | None = None,
    pool: Any = None,
    capture: bool | None = None,
    backend: str | None = None,
) -> GraphRunner:
    """A `GraphRunner` for one entry of the plan's capture list."""
    unit = body_unit(spec, piece, call_fn, extra)
    label = f"{spec.walk}:{spec.loop or spec.calls}"
    return GraphRunner(
        unit.fn,
        unit.inputs,
        spec.buckets,
        device=device,
        carry=unit.carry,
        pool=pool,
        capture=capture,
        name=label,
        backend=backend,
    )


# ---------------------------------------------------------------- double-buffered planning


class MetadataPlanner:
    """Plans step N+1's host-side metadata on a side thread while step N runs.

    ``plan(step, out)`` fills ``out`` (a dict of preallocated tensors: one of two staging sets)
    for ``step``; `submit` starts it, `take` waits and returns the filled set. Two staging sets
    alternate, so the set being planned is never the one the current step copies from.
    On a GPU the staging tensors are pinned so the copy into static buffers is asynchronous.

    ``threaded=False`` plans inside `submit` (same staging sets, same order): on the CPU the
    step itself holds the interpreter, so a side thread only adds lock hand-offs (measured:
    milliseconds per step under Python's GIL switch interval) and overlaps nothing.
    """

    def __init__(
        self,
        plan: Callable[[Any, dict[str, torch.Tensor]], None],
        staging: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        *,
        pin: bool = False,
        threaded: bool = True,
    ) -> None:
        self._plan = plan
        self.threaded = threaded
        self._sets = [
            {
                k: torch.zeros(shape, dtype=dt, pin_memory=pin and torch.cuda.is_available())
                for k, (shape, dt) in staging.items()
            }
            for _ in range(2)
        ]
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wgc-plan")
        self._pending: Future | None = None
        self._turn = 0
        self._lock = threading.Lock()

    def submit(self, step: Any) -> None:
        with self._lock:
            if self._pending is not None:
                raise GraphError("a plan is already pending; take it first")
            out = self._sets[self._turn]
            self._turn ^= 1
            if self.threaded:
                self._pending = self._pool.submit(self._run, step, out)
            else:
                done: Future = Future()
                done.set_result(self._run(step, out))
                self._pending = done

    def _run(self, step: Any, out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        self._plan(step, out)
        return out

    def take(self) -> dict[str, torch.Tensor]:
        with self._lock:
            if self._pending is None:
                raise GraphError("no plan is pending")
            pending, self._pending = self._pending, None
        return pending.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)
