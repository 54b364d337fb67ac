"""Units from the compiler's capture list (`wgc_runtime.contract.spec.CaptureSpec`).

The capture list names the units worth capturing: a whole loop body that sits on one rank and
is shape-static (scope ``loop``: the Loop makes the body's shapes static by construction, so the
body is ONE graph), or one node step (scope ``call``), with the port types and the batch
buckets. `body_unit` composes a capture's calls into one unit (in-body hand-offs resolved inside
it, loop-carried inputs fed by the body's own outputs); `runner_for` puts it in a `GraphRunner`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from wgc_runtime.contract.spec import CallSpec, CaptureSpec, PieceSpec
from wgc_runtime.engines.capture.runner import GraphError, GraphRunner, StaticBuffer, UnitFn

CallFn = Callable[[int, dict[str, torch.Tensor]], Mapping[str, torch.Tensor]]


def _calls(spec: CaptureSpec, piece: PieceSpec) -> list[CallSpec]:
    """The capture's calls, in order, looked up in the piece."""
    calls = []
    for call_id in spec.calls:
        call = piece.call(call_id)
        if call is None:
            raise GraphError(f"capture of `{spec.walk}` names call {call_id}, not in the piece")
        calls.append(call)
    return calls


def split_ports(spec: CaptureSpec, piece: PieceSpec) -> tuple[list[str], list[str]]:
    """The capture's ports as (inputs, outputs) "call#port" names, by the piece's calls."""
    ins, outs = [], []
    for call in _calls(spec, piece):
        ins += [f"{call.id}#{p.port}" for p in call.inputs]
        outs += [f"{call.id}#{p.port}" for p in call.outputs]
    return ins, outs


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
    calls = _calls(spec, piece)
    body = set(spec.calls)
    inputs: dict[str, StaticBuffer] = dict(extra or {})
    wiring: dict[str, str] = {}  # "call#port" input -> "call#port" output of an earlier call
    carry: dict[str, str] = {}
    done: set[int] = set()
    for call in calls:
        for p in call.inputs:
            key = f"{call.id}#{p.port}"
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
        done.add(call.id)
    outputs = tuple(f"{c.id}#{p.port}" for c in calls for p in c.outputs)
    extras = tuple(extra or {})

    def fn(bufs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        values: dict[str, torch.Tensor] = {}
        for call in calls:
            ports = {k: bufs[k] for k in extras}
            for p in call.inputs:
                key = f"{call.id}#{p.port}"
                ports[p.port] = values[wiring[key]] if key in wiring else bufs[key]
            result = call_fn(call.id, ports)
            outs = {p.port for p in call.outputs}
            for name, value in result.items():  # a port's, or one beside it (`port:len`)
                if name in outs or name.split(":", 1)[0] in outs:
                    values[f"{call.id}#{name}"] = value
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
