"""Captured steps: the plan's capture list, turned into graph runners at worker start.

For every call of a `CaptureSpec` on this rank whose node offers a `StaticStep`
(`Node.static_step`, `wgc_runtime.contract.capture`), `CapturedSteps.build` makes a
`GraphRunner` over the step with the call's static port types and the plan's batch buckets,
and captures it (CUDA graphs on a GPU; ``torch.compile`` per bucket with ``batching.backend:
inductor``; the same static buffers run eagerly otherwise); a node offering its step in several
forms (`StaticStep.admits`) gets a runner per form, and each batch runs in the first form that
admits it. A loop body with several calls on this rank gets one runner per call: the executor
runs a body call by call (each call's batch forms from the requests whose inputs are ready), so
the calls are captured one graph each.

`CapturedSteps.run` is the executor's path for a batch of such a call: stack the requests'
port values, let the step fill its extra buffers (`StaticStep.prepare_batch`, e.g. a decode
runner's one call for the batch, or `StaticStep.prepare` per row), run at the smallest
bucket that holds the batch, and split the outputs back per request. Values that do not have
the declared static shapes (or a bare signal) make the batch run the node's `forward`
(counted in ``fallbacks``). A bounded port (`CaptureSpec.padded`) goes in padded to its bound
with its lengths and comes out cut back to them (`wgc_runtime.engines.capture.bounded`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import torch

from wgc_runtime.contract.capture import CapturedCall, StaticStep, length_key
from wgc_runtime.contract.kinds import CaptureBackend, DestKind
from wgc_runtime.contract.node import DTYPES, Node, NodeError, Work
from wgc_runtime.contract.spec import CallSpec, CaptureSpec, PieceSpec, RankSpec, TypeSpec
from wgc_runtime.core.executor.capture_report import CaptureReport
from wgc_runtime.core.executor.state import STOP_FALSE, STOP_TRUE
from wgc_runtime.engines.capture import GraphRunner, StaticBuffer, body_unit
from wgc_runtime.engines.capture.bounded import cut_rows, pad_rows
from wgc_runtime.engines.kv_pool import PAD_REQUEST
from wgc_runtime.engines.kv_pools import KvPools

Progress = Callable[[str], None]


@dataclass(slots=True)
class CapturedUnit:
    """One call's runner and what it needs to fill it."""

    walk: str
    call: CallSpec
    step: StaticStep
    runner: GraphRunner
    inputs: dict[str, TypeSpec]  # port -> static type
    out_types: dict[str, TypeSpec]
    seconds: float = 0.0  # what capturing it took
    label: str = ""  # ``walk:call node`` and the form's label, for reports
    # scalar bool outputs read only by loops' stop conditions: their rows are `STOP_TRUE` /
    # `STOP_FALSE` (one list of Python bools from the batch, no view per row)
    stops: frozenset[str] = frozenset()
    padded: frozenset[str] = frozenset()  # bounded ports: padded to their bound, with lengths

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.out_types)

    def key(self, port: str) -> str:
        return f"{self.call.id}#{port}"


def runner_backend(backend: CaptureBackend | str, device: str) -> str:
    """The `GraphRunner` backend for the placement's ``batching.backend`` on ``device``."""
    if backend == CaptureBackend.AUTO:
        return "cuda_graph" if torch.device(device).type == "cuda" else "eager"
    if backend == CaptureBackend.CUDA_GRAPH and torch.device(device).type != "cuda":
        return "eager"  # a `--device cpu` run of a GPU plan: the same buffers, run eagerly
    return str(backend)


def _stops_only(call: CallSpec, outs: Mapping[str, TypeSpec | None]) -> frozenset[str]:
    """The call's scalar bool outputs whose every destination is a loop's stop condition."""
    return frozenset(
        o.port
        for o in call.outputs
        if o.dests
        and all(d.kind is DestKind.UNTIL for d in o.dests)
        and (t := outs.get(o.port)) is not None
        and t.dtype == "bool"
        and not tuple(t.dims)
    )


class CapturedSteps:
    """The rank's captured calls (see the module docstring)."""

    def __init__(
        self,
        rank_spec: RankSpec,
        nodes: Mapping[str, Node],
        kv: KvPools,
        device: str = "cpu",
    ) -> None:
        self.spec = rank_spec
        self.nodes = nodes
        self.kv = kv
        self.device = device
        self.backend = runner_backend(rank_spec.batching.backend, device)
        # (walk, call) -> its units: one per shape bucket of the capture list (usually one)
        self.units: dict[tuple[str, int], list[CapturedUnit]] = {}
        self.report = CaptureReport(self.backend)
        self.runs = 0  # batches run through a unit
        self.rows = 0  # calls run through a unit
        self.fallbacks = 0  # batches that ran `forward` (values not of the static types)
        self.batch_sizes: Counter[int] = Counter()

    # ------------------------------------------------------------------ worker start
    def build(self, progress: Progress | None = None) -> CaptureReport:
        """Make and capture a runner for every capturable call whose node offers a step."""
        pieces = {p.walk: p for p in self.spec.pieces}
        done: list[tuple[str, tuple[int, ...], float]] = []
        skipped: list[tuple[str, str]] = []
        calls = 0
        t_all = time.perf_counter()
        for cap in self.spec.captures:
            piece = pieces.get(cap.walk)
            if piece is None:
                continue
            for call_id in cap.calls:
                call = piece.call(call_id)
                if call is None or call.node not in self.nodes:
                    continue
                label = f"{cap.walk}:{call_id} {call.node}"
                if cap.shape:
                    label += " at " + ", ".join(f"{k}={v}" for k, v in cap.shape)
                try:
                    units = self._units(cap, piece, call, label, progress)
                except Exception as exc:  # a step that cannot be captured runs `forward`
                    skipped.append((label, f"{type(exc).__name__}: {exc}"))
                    continue
                if not units:
                    skipped.append((label, "the node offers no static step"))
                    continue
                self.units.setdefault((cap.walk, call_id), []).extend(units)
                calls += 1
                done.extend((u.label, tuple(u.runner.buckets), u.seconds) for u in units)
        self.report = CaptureReport(
            self.backend,
            tuple(done),
            tuple(skipped),
            time.perf_counter() - t_all,
            calls=calls,
        )
        return self.report

    def _units(
        self,
        cap: CaptureSpec,
        piece: PieceSpec,
        call: CallSpec,
        label: str,
        progress: Progress | None,
    ) -> list[CapturedUnit]:
        """One captured unit per form of the node's step (none: the node offers no step)."""
        types = dict(cap.ports)
        ins = {p.port: types.get(f"{call.id}#{p.port}") for p in call.inputs}
        outs = {p.port: types.get(f"{call.id}#{p.port}") for p in call.outputs}
        if any(t is None for t in (*ins.values(), *outs.values())):
            return []
        node = self.nodes[call.node]
        kv = self.kv.handle(call.node, PAD_REQUEST) if self.kv.has(call.node) else None
        asked = CapturedCall(
            walk=cap.walk,
            call=call.id,
            loop=cap.loop,
            inputs=ins,
            outputs=outs,
            buckets=tuple(cap.buckets),
            device=self.device,
            backend=self.backend,
            kv=kv,
        )
        offered = node.static_step(asked)
        if offered is None:
            return []
        forms = [offered] if isinstance(offered, StaticStep) else list(offered)
        prefix = f"{call.id}#"
        ports = tuple(p for p in cap.ports if p[0].startswith(prefix))
        sub = replace(cap, calls=(call.id,), ports=ports)
        padded = frozenset(p[len(prefix) :] for p in cap.padded if p.startswith(prefix))
        units: list[CapturedUnit] = []
        for i, step in enumerate(forms):
            extra = {
                name: StaticBuffer(tuple(sp.dims), DTYPES[sp.dtype], sp.pad)
                for name, sp in step.extra.items()
            }
            for port in padded & set(ins):  # a bounded input's lengths
                extra[length_key(port)] = StaticBuffer((), torch.int64, 0)
            fn = step.fn
            body = body_unit(sub, piece, lambda _call, ports, fn=fn: fn(ports), extra)
            # no carries: the executor passes every input of every run (rows join and leave)
            runner = GraphRunner(
                body.fn,
                body.inputs,
                sub.buckets,
                device=self.device,
                name=f"{cap.walk}:{call.id}" + (f"/{i}" if len(forms) > 1 else ""),
                backend=self.backend,
            )
            named = f"{label} ({step.label})" if step.label else label
            if progress is not None:
                progress(f"capturing {named} at batch {list(cap.buckets)} ({self.backend})")
            t0 = time.perf_counter()
            runner.capture()
            units.append(
                CapturedUnit(
                    walk=cap.walk,
                    call=call,
                    step=step,
                    runner=runner,
                    inputs={k: v for k, v in ins.items() if v is not None},
                    out_types={k: v for k, v in outs.items() if v is not None},
                    seconds=time.perf_counter() - t0,
                    label=named,
                    stops=_stops_only(call, outs),
                    padded=padded,
                )
            )
        return units

    # ------------------------------------------------------------------ serving
    def unit(self, walk: str, call: int, works: Sequence[Work] = ()) -> CapturedUnit | None:
        """The first unit of the call whose input shapes the batch's values have (the capture
        list's shape buckets) and whose form admits the batch (`StaticStep.admits`), or None."""
        units = self.units.get((walk, call)) if self.units else None
        if not units:
            return None
        if not works:
            return units[0]
        first = works[0].inputs
        for u in units:
            shaped = len(units) == 1 or all(  # one unit: `run` checks every value's shape
                isinstance(v := first.get(p), torch.Tensor) and v.shape == tuple(t.dims)
                for p, t in u.inputs.items()
            )
            if shaped and (u.step.admits is None or u.step.admits(works)):
                return u
        return None

    def run(self, unit: CapturedUnit, works: Sequence[Work]) -> list[Any] | None:
        """One result (or exception) per work, or None when the batch does not fit the unit
        (then the caller runs `forward`)."""
        values: dict[str, list[torch.Tensor]] = {}
        for port, t in unit.inputs.items():
            dims, dtype = tuple(t.dims), DTYPES[t.dtype]
            if port in unit.padded:
                bound = tuple(int(d) for d in t.dims)  # the plan's dims are static here
                got = pad_rows([w.inputs.get(port) for w in works], bound, dtype)
                if got is None:
                    self.fallbacks += 1
                    return None
                values[port], values[length_key(port)] = list(got[0]), list(got[1])
                continue
            column = values[port] = []
            for w in works:
                v = w.inputs.get(port)
                if not isinstance(v, torch.Tensor) or v.dtype is not dtype or v.shape != dims:
                    self.fallbacks += 1
                    return None
                column.append(v)
        results: list[Any] = [None] * len(works)
        ran = self.run_columns(unit, works, values, results, stack=True)
        if ran is None:
            return results
        rows, outs, got = ran
        # one copy of each output (the runner's buffers are reused), split into row views; a
        # stop only loops read, into the shared stop values
        ports = unit.outputs
        columns = [self._rows(unit, outs, got, port) for port in ports]
        rows_of = zip(*columns, strict=True) if columns else iter([()] * len(rows))
        if len(rows) == len(works):  # no row failed: one dict per row, straight
            return [dict(zip(ports, row, strict=True)) for row in rows_of]
        for i, row in zip(rows, rows_of, strict=True):
            results[i] = dict(zip(ports, row, strict=True))
        return results

    def run_columns(
        self,
        unit: CapturedUnit,
        works: Sequence[Work],
        values: Mapping[str, Any],  # a tensor, or with ``stack`` a list of tensors
        results: list[Any],
        *,
        stack: bool = False,
    ) -> tuple[list[int], dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
        """Run the rows whose preparation succeeded (a failed row's exception to ``results``);
        ``values``: per input port a column ``[len(works), *dims]`` (``stack``: a list of rows).
        The rows that ran, the runner's and the ports' outputs (its buffers), or None."""
        rows, extra = self._prepare(unit, works, results)
        if not rows:
            return None
        every = len(rows) == len(works)
        inputs: dict[str, torch.Tensor] = {}
        for port, col in values.items():
            key = unit.key(port) if port in unit.inputs else port
            if stack:
                inputs[key] = torch.stack(col if every else [col[i] for i in rows])
            else:
                inputs[key] = col if every else col[rows]
        inputs.update(extra)
        outs = unit.runner.run(inputs, len(rows))
        got = {port: outs[unit.key(port)] for port in unit.outputs}
        self._check(unit, got, len(rows))
        if unit.step.finish is not None:  # the ports and what the step returned beside them
            beside = {k.split("#", 1)[1]: v for k, v in outs.items() if k.startswith(unit.key(""))}
            unit.step.finish(works if every else [works[i] for i in rows], beside)
        self.runs, self.rows = self.runs + 1, self.rows + len(rows)
        self.batch_sizes[len(rows)] += 1
        return rows, outs, got

    @staticmethod
    def _rows(
        unit: CapturedUnit,
        outs: Mapping[str, torch.Tensor],
        got: Mapping[str, torch.Tensor],
        port: str,
    ) -> Sequence[torch.Tensor]:
        """One output's rows: copies of the batch's rows, a bounded one cut to its lengths, a
        stop only loops read as the shared stop values."""
        if port in unit.stops:
            flags = cast(list[bool], got[port].tolist())  # pyright: ignore[reportUnknownMemberType]
            return [STOP_TRUE if b else STOP_FALSE for b in flags]
        if port not in unit.padded:
            return got[port].clone().unbind(0)
        lengths = outs.get(unit.key(length_key(port)))
        if lengths is None:
            raise NodeError(
                f"node `{unit.call.node}`'s captured step returned no lengths for its bounded "
                f"output `{port}` (`{length_key(port)}`)"
            )
        return cut_rows(got[port], lengths)

    @staticmethod
    def _prepare(
        unit: CapturedUnit, works: Sequence[Work], results: list[Any]
    ) -> tuple[list[int], dict[str, torch.Tensor]]:
        """The rows that run and their extra buffers (`StaticStep.prepare_batch` in one call,
        or `StaticStep.prepare` per row); a row that fails gets its exception in ``results``."""
        step = unit.step
        if step.prepare_batch is not None:
            try:
                extra, failed = step.prepare_batch(works)
            except Exception as exc:  # the whole batch's preparation failed
                results[:] = [exc] * len(works)
                return [], {}
            for i, exc in failed.items():
                results[i] = exc
            return [i for i in range(len(works)) if i not in failed], dict(extra)
        rows: list[int] = []
        extras: list[Mapping[str, Any]] = []
        for i, w in enumerate(works):
            try:
                extras.append(step.prepare(w) if step.prepare is not None else {})
                rows.append(i)
            except Exception as exc:  # fails this request only
                results[i] = exc
        out: dict[str, torch.Tensor] = {}
        for name in extras[0] if extras else ():
            column = [e[name] for e in extras]
            if isinstance(column[0], torch.Tensor):
                out[name] = torch.stack(column)
            else:  # numbers or lists of numbers: one tensor for the batch
                out[name] = torch.tensor(column, dtype=unit.runner.specs[name].dtype)
        return rows, out

    @staticmethod
    def _check(unit: CapturedUnit, got: Mapping[str, torch.Tensor], batch: int) -> None:
        """The step's outputs against the call's static types, once for the batch (then the
        executor does not check each row)."""
        for port, t in unit.out_types.items():
            value = got.get(port)
            want = (batch, *t.dims)
            if value is None or value.dtype is not DTYPES[t.dtype] or value.shape != want:
                shown = "nothing" if value is None else f"{value.dtype} {list(value.shape)}"
                raise NodeError(
                    f"node `{unit.call.node}`'s captured step returned {shown} for `{port}`, "
                    f"expected {t.dtype}{list(want)}"
                )
