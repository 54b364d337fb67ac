"""The conductor's records: the walks as the conductor sees them, the flows, the request options,
and the deployment (`ConductorSpec`), which a generated ``conductor.py`` constructs.

Standard library only, like `wgc_runtime.contract.spec` (whose `SPEC_VERSION` covers these
records too). A flow body is a generator over a `Request` (`wgc_runtime.contract.flow`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wgc_runtime.contract.flow import FlowGen, Request, Segment, SimpleRequest
from wgc_runtime.contract.kinds import FlowKind, OnRestart, OptionType
from wgc_runtime.contract.spec import (
    OMIT_DEFAULT,
    AttentionSpec,
    BatchingSpec,
    Dest,
    KvCacheSpec,
    StreamSpec,
    TypeSpec,
)

# ---------------------------------------------------------------- walks


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkInputSpec:
    name: str
    optional: bool = False
    ranks: tuple[int, ...] = ()  # the ranks that read it
    # where the value goes: call ports (with their rank), and ``emit``/``persist`` destinations
    # the conductor handles itself because it holds the value
    dests: tuple[Dest, ...] = ()
    type: TypeSpec | None = None  # the declared type (what the door checks a value against)


@dataclass(frozen=True, slots=True, kw_only=True)
class Handoff:
    """Before the walk starts, the request's state of kv-cache node ``node`` must be on
    ``to_ranks``: if the request last ran the node on ``from_ranks``, it moves from there first
    (the conductor asks ``from_ranks`` to export it, they send it to ``to_ranks``, which import
    it and confirm; then the walk starts)."""

    node: str
    from_ranks: tuple[int, ...]
    to_ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class KvCopy:
    """Before the walk starts, the request's label ``label`` of node ``owner``'s cache is
    copied from ``from_ranks`` (where the owner's state lives) into the pool of node ``node``
    (a ``like owner { label label }`` copy) on ``to_ranks``: a CFG branch read on its own rank
    group. Like a handoff, but the source keeps its pages."""

    owner: str
    label: str
    from_ranks: tuple[int, ...]
    node: str
    to_ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class KvBudget:
    """One KV pool of the deployment, as admission sees it: the pool of node ``node`` on the
    group ``ranks`` holds ``pages`` pages; a request is promised ``pages_per_request`` of them
    before it starts (it waits in the queue while the pool cannot promise them, and is refused
    at once when it never could)."""

    node: str
    ranks: tuple[int, ...]
    pages: int
    pages_per_request: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WalkSpec:
    name: str
    ranks: tuple[int, ...] = ()  # every rank with a piece
    report: tuple[int, ...] = ()  # ranks that must report before the walk is done
    # the control plan (`wgc.lower.control`): ranks that start on their first input (no
    # `StartWalk`), ranks that hold nothing once their piece is done (no `Release` when the
    # request ends normally), and the number of `ClientOut`s the walk's completion waits for
    # besides ``report`` (every emit of the walk, when a rank that emits does not report)
    lazy: tuple[int, ...] = ()
    no_release: tuple[int, ...] = ()
    done_emits: int = 0
    inputs: tuple[WalkInputSpec, ...] = ()
    # persisted channel -> the rank that keeps it (-1: the conductor, for a persisted walk input)
    persists: tuple[tuple[str, int], ...] = ()
    # node-state moves that may be due before the walk starts (prefill/decode disaggregation)
    handoffs: tuple[Handoff, ...] = ()
    # (node, group) for each kv-cache node the walk calls that runs on several groups in the
    # plan: where the request's state of the node lives once the walk has started
    kv_groups: tuple[tuple[str, tuple[int, ...]], ...] = ()
    emits: tuple[str, ...] = ()  # the modalities it emits (`emit ... as M`), in source order
    # KV labels read on another rank group: copied there before the walk starts
    kv_copies: tuple[KvCopy, ...] = ()
    # what a worker's restart does to a request that has state on the walk's pieces there
    # (`wgc_runtime.host.processes.recovery`): fail it, or replay it from its start
    on_restart: OnRestart = OnRestart.FAIL
    # (rank, policy) of the pieces whose policy is their own (``on_restart: {walk: {1: replay}}``)
    piece_restarts: tuple[tuple[int, OnRestart], ...] = field(default=(), metadata=OMIT_DEFAULT)
    source: str = ""

    def restart_on(self, rank: int) -> OnRestart:
        """What a restart of ``rank`` does to a request with state of this walk there: its piece
        there says so, else the walk."""
        return next((p for r, p in self.piece_restarts if r == rank), self.on_restart)


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSpec:
    """A request option with its declared type and default. ``choices``: the values a request
    may give (`option x: str in [...]`; empty: any value of ``type``), checked at the door; an
    `int` option with choices may size a dim (a shape bucket). A per-mode default
    (`= match option.MODE {...}`) names its selector ``default_by`` and maps selector values to
    defaults in ``by_value``; ``default`` is the default for any other value."""

    name: str
    type: OptionType
    default: Any
    choices: tuple[Any, ...] = ()
    default_by: str | None = None
    by_value: tuple[tuple[Any, Any], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentSpec:
    """An input modality the flows take (a `match` arm that does not `fail`, or a
    ``request.has(M)`` test), and the segment fields they may read from it (``seg.goal``)."""

    modality: str
    fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class FlowSpec:
    """A flow of the model (`FlowKind`): ``always`` (runs for every request), ``when`` (runs
    beside the others when ``when(req)`` holds), ``on_stream`` (``body`` runs once per chunk of
    ``stream``), or ``extern`` (``extern`` names a ``module:function`` generator with the same
    protocol, which the conductor imports)."""

    name: str
    kind: FlowKind
    body: Callable[[Request], FlowGen] | None = None
    when: Callable[[Request], bool] | None = None
    stream: str | None = None
    extern: str | None = None
    source: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ConductorSpec:
    """What the conductor needs: the deployment, the walks, the flows, every stream (its owner
    and the flows that produce and consume it), the request options and the serving settings."""

    model: str
    placement: str
    world_size: int
    devices: tuple[str, ...] = ()  # rank i runs on devices[i]
    hosts: tuple[str, ...] = ()  # rank i runs on hosts[i]
    walks: tuple[WalkSpec, ...] = ()
    flows: tuple[FlowSpec, ...] = ()
    streams: tuple[StreamSpec, ...] = ()
    options: tuple[OptionSpec, ...] = ()
    params: tuple[tuple[str, Any], ...] = ()  # effective param values
    placed: tuple[str, ...] = ()  # nodes placed on some rank (extern flows may ask)
    # the input modalities the flows take; ``any_segment``: some flow takes segments of any
    # modality (a `for` body that reads the segment outside a `match`, a `_` arm that does not
    # `fail`, an extern flow), or the plan does not say (a hand-written spec)
    segments: tuple[SegmentSpec, ...] = ()
    any_segment: bool = True
    max_concurrent_requests: int = 1
    kv_budgets: tuple[KvBudget, ...] = ()  # every KV pool, for admission by pages
    kv_cache: KvCacheSpec = KvCacheSpec()
    batching: BatchingSpec = BatchingSpec()
    attention: AttentionSpec = AttentionSpec()

    def walk(self, name: str) -> WalkSpec | None:
        return next((w for w in self.walks if w.name == name), None)

    def flow(self, name: str) -> FlowSpec | None:
        return next((f for f in self.flows if f.name == name), None)

    def emits(self) -> tuple[str, ...]:
        """Every modality some walk emits, in walk order (what a request may want)."""
        return tuple(dict.fromkeys(m for w in self.walks for m in w.emits))

    def option_defaults(self, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every option's default for a request that sets ``given``: a per-mode default
        follows its selector's value (the request's, else the selector's own default)."""
        values = {o.name: o.default for o in self.options if o.default_by is None}
        values.update(given or {})
        out: dict[str, Any] = {}
        for o in self.options:
            by = dict(o.by_value)
            pick = values.get(o.default_by) if o.default_by is not None else None
            out[o.name] = by.get(pick, o.default) if o.default_by is not None else o.default
        return out

    def request(
        self,
        segments: Sequence[Segment],
        outputs: Sequence[str] = (),
        options: Mapping[str, Any] | None = None,
    ) -> SimpleRequest:
        """A `SimpleRequest` with this model's option defaults."""
        return SimpleRequest(
            tuple(segments), frozenset(outputs), dict(options or {}), self.option_defaults(options)
        )
