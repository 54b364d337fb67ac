"""The door: a request checked against the compiled model before it is admitted.

`check(spec, request)` returns every `Problem` of one request (nothing when it may run); every
entry point calls it before a request reaches a `ConductorCore`: the conductor process's client
port, `LocalCluster.submit`, the HTTP server (and `wgc run` before any process starts), so they
refuse the same requests with the same words. A problem names the request field it is about
(``options.steps``, ``want``, ``inputs[0].fields.prompt``) and says what is allowed.

What is checked, always:

* the bounds of `bounds`: token limits within ``kv_tokens`` and at least 1, prompt tokens within
  ``kv_tokens``, token ids within the vocabulary, sampling values within their ranges;
* a declared option's value has the declared type (``bool``, ``int`` within 64 bits, ``float``
  finite, ``str``) and, when the option lists its values (`OptionSpec.choices`: an enum, or a
  shape bucket a dim reads), is one of them;
* what the flows pass to walks can be taken: the flows are *dry run* on the request (a flow's
  control depends on the request alone, never on what its walks compute, so running its
  generator without running any walk yields exactly the walks it will run and their arguments);
  a segment field a flow reads must be there, and each segment or field a walk input receives
  must be a tensor of the input's dtype, rank and static dims (`WalkInputSpec.type`).

And under ``strict`` (what `wgc run` and `wgc serve` use), what the model does not declare
or will refuse anyway: every option is declared; there is at least one want, and every want is
a modality some walk emits (`ConductorSpec.emits`); every segment has a modality some flow takes
(`ConductorSpec.segments`; skipped when a flow takes any modality); and no flow reaches a
`fail` on the request (the dry run shows it: the flow's message becomes the problem's). The
library entry points (`LocalCluster`, `Cluster`) default to not strict, where a flow's `fail`
stays the flow's (kind ``fail``, as in the reference interpreter): the examples' toy nodes read
options their models do not declare (``eos_after``), and tests send what a model ignores.

Pure: no clock, no I/O; the flows it dry runs are the generated (trusted) generator functions,
and ``extern`` and ``on_stream`` flows are not run.
"""

from __future__ import annotations

import difflib
import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from wgc_runtime.contract.conductor import ConductorSpec, FlowSpec, WalkSpec
from wgc_runtime.contract.flow import Fail, Persisted, Request, RunWalk, SimpleRequest
from wgc_runtime.contract.kinds import FlowKind, OptionType
from wgc_runtime.contract.spec import TypeSpec, render_type
from wgc_runtime.core.conductor.bounds import bounds

DRY_RUN_STEPS = 10_000  # walks one flow may yield before the dry run stops looking
_I64 = (-(2**63), 2**63 - 1)

# a typed `list` for the fields below (a subscripted ``list[T]()`` costs ~8x a ``list()``)
new_list = cast("Callable[[], list[Any]]", list)


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a request cannot run: the request ``field`` it is about, and why."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def describe(problems: Sequence[Problem]) -> str:
    """Every problem on one line each (what a refused client reads)."""
    head = "bad request" if len(problems) == 1 else f"bad request ({len(problems)} problems)"
    return head + ":\n" + "\n".join(f"  {p}" for p in problems)


@dataclass(frozen=True, slots=True)
class Feed:
    """A segment (``index``; ``field`` when the flow passed one of its fields) that a walk
    input receives, with the input's declared type."""

    index: int
    field: str | None
    walk: str
    input: str
    type: TypeSpec | None


@dataclass
class DryRun:
    """What the flows would do with a request: the problems found, what each segment feeds,
    and whether some flow `fail`s on it."""

    problems: list[Problem] = field(default_factory=new_list)
    feeds: list[Feed] = field(default_factory=new_list)
    fails: list[tuple[str, str]] = field(default_factory=new_list)  # (flow, its `fail` message)


def check(spec: ConductorSpec, request: Request, *, strict: bool = True) -> list[Problem]:
    """Every problem of ``request`` against ``spec`` (see the module docstring)."""
    problems: list[Problem] = []
    if isinstance(request, SimpleRequest):
        problems += _options(spec, request.options, strict)
        if strict:
            problems += _wants(spec, request.outputs)
    problems += [Problem(f, why) for f, why in bounds(spec, request)]
    run = dry_run(spec, request)
    if strict:
        unknown = _modalities(spec, request)
        problems += unknown or [
            Problem("inputs", f"flow `{flow}` refuses this request: {message}")
            for flow, message in run.fails
        ]
    return problems + run.problems


# ---------------------------------------------------------------- options and wants


def _options(spec: ConductorSpec, given: Mapping[str, Any], strict: bool) -> list[Problem]:
    declared = {o.name: o for o in spec.options}
    out: list[Problem] = []
    for name, value in given.items():
        where = f"options.{name}"
        o = declared.get(name)
        if o is None:
            if strict:
                out.append(Problem(where, _unknown_option(spec.model, name, declared)))
            continue
        why = _option_type(o.type, value)
        if why:
            out.append(Problem(where, f"option `{name}` is {_article(o.type)}, {why}"))
        elif o.choices and value not in o.choices:
            listed = ", ".join(_show(c) for c in o.choices)
            hint = _did_you_mean(str(value), [str(c) for c in o.choices])
            out.append(Problem(where, f"got {_show(value)}{hint}; option `{name}` takes {listed}"))
    return out


def _option_type(kind: OptionType, value: Any) -> str:
    """Why ``value`` is not of option type ``kind`` ("" when it is)."""
    got = f"got {_show(value)}"
    if kind is OptionType.BOOL:
        return "" if isinstance(value, bool) else f"{got} (give true or false)"
    if kind is OptionType.INT:
        if not isinstance(value, int) or isinstance(value, bool):
            return got
        return "" if _I64[0] <= value <= _I64[1] else f"{got}, which is out of the 64-bit range"
    if kind is OptionType.FLOAT:
        if not isinstance(value, int | float) or isinstance(value, bool):
            return got
        return "" if math.isfinite(value) else f"{got} (a finite number)"
    return "" if isinstance(value, str) else got


def _wants(spec: ConductorSpec, wants: frozenset[str]) -> list[Problem]:
    emits = spec.emits()
    allowed = _listing(emits, "nothing")
    if not wants:
        return [Problem("want", f"no output wanted: ask for one of {allowed}")]
    out: list[Problem] = []
    for w in sorted(wants):
        if w not in emits:
            hint = _did_you_mean(w, emits)
            out.append(
                Problem("want", f"`{spec.model}` never emits `{w}`{hint}; it emits {allowed}")
            )
    return out


# ---------------------------------------------------------------- input modalities


def _modalities(spec: ConductorSpec, request: Request) -> list[Problem]:
    if spec.any_segment:
        return []  # some flow takes anything
    taken = [s.modality for s in spec.segments]
    out: list[Problem] = []
    for i, seg in enumerate(request.inputs):
        if seg.modality not in taken:
            hint = _did_you_mean(seg.modality, taken)
            out.append(
                Problem(
                    f"inputs[{i}].modality",
                    f"`{spec.model}` takes no `{seg.modality}` input{hint}; it takes "
                    f"{_listing(taken, 'no inputs')}",
                )
            )
    return out


# ---------------------------------------------------------------- the dry run


class _Missing:
    """What a probe's `field` returns for a field the segment lacks."""

    def __init__(self, index: int, name: str, modality: str) -> None:
        self.index, self.name, self.modality = index, name, modality


class _FieldValue:
    def __init__(self, index: int, name: str, value: Any) -> None:
        self.index, self.name, self.value = index, name, value


class _Probe:
    """A segment as a dry-run flow sees it: it records the fields the flow reads."""

    def __init__(self, index: int, seg: Any) -> None:
        self.index, self.seg = index, seg
        self.modality = seg.modality
        self.data = seg.data

    def field(self, name: str) -> Any:
        for key, value in self.seg.fields:
            if key == name:
                return _FieldValue(self.index, name, value)
        return _Missing(self.index, name, self.modality)


class _ProbeRequest(Request):
    def __init__(self, inner: Request) -> None:
        self.inner = inner
        self.probes = [_Probe(i, s) for i, s in enumerate(inner.inputs)]

    @property
    def inputs(self) -> Sequence[Any]:
        return self.probes

    def wants(self, modality: str) -> bool:
        return self.inner.wants(modality)

    def has(self, modality: str) -> bool:
        return self.inner.has(modality)

    def option(self, name: str) -> Any:
        return self.inner.option(name)


def dry_run(spec: ConductorSpec, request: Request) -> DryRun:
    """Run every flow that would run on ``request`` without running a walk (see the module
    docstring); a flow that raises is the conductor's to report, so it only ends its dry run."""
    run = DryRun()
    probe = _ProbeRequest(request)
    walks = {w.name: w for w in spec.walks}
    for f in spec.flows:
        for step in _steps(f, probe):
            if isinstance(step, Fail):
                run.fails.append((f.name, step.message))
            elif isinstance(step, RunWalk) and step.walk in walks:
                _walk_args(spec, f, walks[step.walk], step.args, run)
    return run


def _steps(f: FlowSpec, probe: _ProbeRequest) -> Iterator[Any]:
    if f.kind in (FlowKind.EXTERN, FlowKind.ON_STREAM) or f.body is None:
        return
    try:
        if f.kind is FlowKind.WHEN and f.when is not None and not f.when(probe):
            return
        gen = f.body(probe)
        for _ in range(DRY_RUN_STEPS):
            step = next(gen)
            yield step
            if isinstance(step, Fail):
                return
    except Exception:  # StopIteration, or a flow bug the conductor reports when it runs
        return


def _walk_args(
    spec: ConductorSpec, f: FlowSpec, ws: WalkSpec, args: Mapping[str, Any], run: DryRun
) -> None:
    inputs = {i.name: i for i in ws.inputs}
    for name, arg in args.items():
        inp = inputs.get(name)
        if inp is None or isinstance(arg, Persisted):
            continue
        to = f"walk `{ws.name}` input `{name}`" + (
            f" ({render_type(inp.type)})" if inp.type is not None else ""
        )
        if isinstance(arg, _Missing):
            run.problems.append(
                Problem(
                    f"inputs[{arg.index}].fields.{arg.name}",
                    f"missing: flow `{f.name}` passes field `{arg.name}` of this "
                    f"`{arg.modality}` segment to {to}",
                )
            )
        elif isinstance(arg, _FieldValue):
            run.feeds.append(Feed(arg.index, arg.name, ws.name, name, inp.type))
            why = _value_type(arg.value, inp.type, inp.optional)
            if why:
                where = f"inputs[{arg.index}].fields.{arg.name}"
                run.problems.append(Problem(where, f"{why}; flow `{f.name}` passes it to {to}"))
        elif isinstance(arg, _Probe):
            run.feeds.append(Feed(arg.index, None, ws.name, name, inp.type))
            why = _value_type(arg.data, inp.type, inp.optional)
            if why:
                where = f"inputs[{arg.index}].data"
                msg = f"{why}; flow `{f.name}` passes this `{arg.modality}` segment to {to}"
                run.problems.append(Problem(where, msg))


def _value_type(value: Any, t: TypeSpec | None, optional: bool) -> str:
    """Why ``value`` cannot be a walk input of type ``t`` ("" when it can)."""
    if value is None:
        return "" if optional else "no data"
    if t is None:
        return ""
    try:
        dtype, shape = _dtype_shape(value)
    except Exception:
        return f"{_show(value)} is not a tensor"
    got, want = render_type((dtype, shape)), render_type(t)
    if dtype != t.dtype:
        return f"expected dtype {t.dtype}, got {got}"
    if len(shape) != len(t.dims):
        return f"expected {len(t.dims)} dims ({want}), got {got}"
    for i, d in enumerate(t.dims):
        if isinstance(d, int) and shape[i] != d:
            return f"expected {want}, got {got} (dim {i} must be {d})"
    return ""


# numpy's dtype names -> wgc's (`wgc_runtime.contract.node.DTYPES`; numpy has no bfloat16)
_NUMPY_DTYPES = {
    "bool": "bool",
    "uint8": "u8",
    "int32": "i32",
    "int64": "i64",
    "float16": "f16",
    "float32": "f32",
}


def _dtype_shape(value: Any) -> tuple[str, tuple[int, ...]]:
    """The dtype name and shape `wgc_runtime.contract.node.to_tensor` gives ``value``, found
    without importing torch (it is imported only when ``value`` already is a tensor): `wgc run`
    checks a request here before any process starts, and importing torch costs ~1.5 s."""
    if isinstance(value, str):
        return "i64", (len(value.encode("utf-8")),)
    if isinstance(value, bool):
        return "bool", ()
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise OverflowError(f"{value} does not fit i64")
        return "i64", ()
    if isinstance(value, float):
        return "f32", ()
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        from wgc_runtime.contract.node import DTYPE_NAMES

        return DTYPE_NAMES.get(value.dtype, str(value.dtype)), tuple(value.shape)
    import numpy as np

    x = np.asarray(value)
    if x.dtype.kind in "OSUV":
        raise TypeError(f"not a tensor: {x.dtype}")
    name = x.dtype.name
    if not isinstance(value, np.ndarray | np.generic) and name == "float64":
        name = "float32"  # a (nested) list of Python floats: torch's default dtype
    return _NUMPY_DTYPES.get(name, name), tuple(int(d) for d in x.shape)


# ---------------------------------------------------------------- words


def _show(value: Any) -> str:
    text = repr(value) if not isinstance(value, bool) else str(value).lower()
    kind = type(value).__name__
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"`{text}` ({kind})" if not isinstance(value, bool | int | float | str) else f"`{text}`"


def _article(kind: OptionType) -> str:
    return {
        OptionType.BOOL: "a bool",
        OptionType.INT: "an int",
        OptionType.FLOAT: "a float",
        OptionType.STR: "a str",
    }[kind]


def _listing(names: Sequence[str], none: str) -> str:
    return ", ".join(f"`{n}`" for n in names) if names else none


def _did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _unknown_option(model: str, name: str, declared: Mapping[str, Any]) -> str:
    if not declared:
        return f"unknown option `{name}`: `{model}` declares no options"
    hint = _did_you_mean(name, sorted(declared))
    options = _listing(list(declared), "")
    return f"unknown option `{name}`{hint}; the options of `{model}` are {options}"
