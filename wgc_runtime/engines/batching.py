"""Continuous batching for a decoder: requests join and leave the running batch at iteration
boundaries.

One `ContinuousBatcher.step` is one iteration:

1. **leave / join.** Finished and cancelled requests have already left (their pages are freed
   at once). Waiting requests join while the batch has room and the pool admits them
   (`PagedKVPool.reserve` of prompt + max new tokens; a request that could never fit is failed
   with the pool's message, one that could fit later waits).
2. **prefill** the joiners in one ragged forward; each gets its first token.
3. **decode** every request that was already running: one token each, in ONE batch, whatever
   their positions (ragged page tables: each row reads its own pages up to its own length).
   Nobody waits for the slowest request to finish its loop: a request leaves as soon as it hits
   its stop token or ``max_new_tokens``, and its row goes to a waiting request next iteration.

The batcher drives any `StepEngine` (a decoder over one `PagedKVPool`: prefill, decode,
free, and a static decode unit; a model's decoder engine is one).
The decode step runs either through the plain path (`StepEngine.decode`: host-built metadata)
or through the capture path: a `GraphRunner` over the engine's static decode unit (replayed
CUDA graphs on a GPU, the same static buffers run eagerly on the CPU). On the capture path
the next step's metadata (slots, kv lengths, page tables, positions) is planned by
`MetadataPlanner` on a side thread while this step runs; that is possible because it does not
depend on this step's tokens: the rows of the next step are this step's rows that will not
reach ``max_new_tokens`` plus this iteration's joiners, and a row that leaves early (stop
token, cancel) is simply dropped from the plan.

Per-step cost. A decode row's metadata changes by one token per step, so the capture path does
not rebuild it: while the rows stay the same, the step advances positions, kv lengths and slots
IN PLACE in the runner's static buffers (three tensor ops, whatever the batch) and touches the
host only for a row that starts a new page (one pool append and one page-table entry). Slots are
appended to the pool a page at a time (`_Row`: up to the end of the page, never past the tokens
the request can still generate), so the pool is called once per page, not once per token. A
full metadata build (the planner's job) happens only when rows join or leave.

Sampling is greedy (argmax); results are deterministic, so a request's tokens are the same
batched or alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from wgc_runtime.engines.capture import GraphRunner, MetadataPlanner, StaticBuffer, UnitFn
from wgc_runtime.engines.kv_pool import PagedKVPool, PoolFull

Seq = tuple[Hashable, str]  # (request, label): one sequence of the pool


class StepEngine(Protocol):
    """What `ContinuousBatcher` drives: a decoder over one `PagedKVPool` whose requests and
    labels are the pool's. ``prefill`` and ``decode`` append to the named sequences and return
    the logits of each one's last token (``[len(seqs), vocab]``); the unit of ``unit_for`` reads
    the buffers of ``decode_buffers``, and its padding rows write to ``pad_slot`` (a slot on a
    page of its own)."""

    @property
    def pool(self) -> PagedKVPool: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def pad_slot(self) -> int: ...

    def prefill(self, seqs: Sequence[Seq], prompts: Sequence[torch.Tensor]) -> torch.Tensor: ...

    def decode(self, seqs: Sequence[Seq], tokens: torch.Tensor) -> torch.Tensor: ...

    def free(self, request: Hashable) -> None: ...

    def width_for(self, max_len: int) -> int:
        """Page-table width of static buffers for sequences up to ``max_len`` tokens."""
        ...

    def decode_buffers(self, width: int) -> Mapping[str, StaticBuffer]:
        """The static inputs of one decode step: ``tokens``, ``positions``, ``slots``,
        ``kv_lens`` and ``block_tables`` (``width`` pages per row)."""
        ...

    def unit_for(self, backend: str) -> UnitFn:
        """The static decode unit (outputs ``logits`` and ``next_token``) a `GraphRunner` with
        ``backend`` should run."""
        ...


@dataclass(slots=True, eq=False)
class GenRequest:
    """One generation request: a prompt on one label, greedy decoding up to ``max_new_tokens``
    or a stop token. ``tokens`` collects the generated ids; ``logits`` each step's logits when
    the batcher keeps them."""

    id: Hashable
    prompt: torch.Tensor
    max_new_tokens: int
    label: str = "main"
    stop_tokens: frozenset[int] = frozenset()
    tokens: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    done: bool = False
    error: str | None = None
    joined_at: int = -1  # iteration it joined
    left_at: int = -1  # iteration it left

    @property
    def length(self) -> int:
        return int(self.prompt.numel()) + len(self.tokens)

    @property
    def finished(self) -> bool:
        return len(self.tokens) >= self.max_new_tokens or (
            bool(self.tokens) and self.tokens[-1] in self.stop_tokens
        )


@dataclass(slots=True)
class _Row:
    """Host-side decode state of one running sequence on the capture path."""

    length: int  # tokens in the sequence, counting the slots taken (= kv length of its step)
    left: int  # decode steps it may still run (slots it may still need)
    table: list[int]  # its pages (host copy of the pool's table)
    slot: int = 0  # the next appended-but-unused slot
    ahead: int = 0  # slots appended to the pool and not used yet


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """Powers of two up to (and including) ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


class ContinuousBatcher:
    """Continuous batching of greedy generation over one `StepEngine` (module docstring).

    ``capture``: decode through the `GraphRunner` (True) or the plain path (False).
    ``graph_backend``: how the runner runs a bucket (`GraphRunner`'s ``backend``: ``"eager"``,
    ``"cuda_graph"``, or ``"inductor"`` for a ``torch.compile``d step; None: CUDA graphs on a
    GPU, eager elsewhere).
    ``max_seq_len`` bounds prompt + new tokens (it sizes the static page tables).
    """

    def __init__(
        self,
        engine: StepEngine,
        *,
        max_batch: int = 16,
        max_seq_len: int = 2048,
        capture: bool = True,
        buckets: Sequence[int] | None = None,
        plan_ahead: bool = True,
        plan_thread: bool | None = None,
        keep_logits: bool = False,
        pool_timeout: float = 0.0,
        graph_backend: str | None = None,
    ):
        self.engine = engine
        self.max_batch = max_batch
        self.max_seq_len = max_seq_len
        self.keep_logits = keep_logits
        self.pool_timeout = pool_timeout
        self.waiting: deque[GenRequest] = deque()
        self.running: list[GenRequest] = []
        self.finished: list[GenRequest] = []
        self.iteration = 0
        self.batch_sizes: list[int] = []  # decode rows per iteration (for tests and benchmarks)
        self.runner: GraphRunner | None = None
        self.planner: MetadataPlanner | None = None
        self._plan_ids: list[Seq] | None = None  # rows of the plan being made / taken
        self._plan: dict[str, torch.Tensor] | None = None
        self._last_rows: list[Hashable] = []
        self._rows: dict[Seq, _Row] = {}  # capture path: per-row state
        # fast steps of `_lag_keys` not yet applied to their `_Row`s, and how many more can be
        # taken before some row needs a new page (then the rows are visited one by one)
        self._lag, self._budget, self._lag_keys = 0, 0, []
        if capture:
            self.width = engine.width_for(max_seq_len)
            self.runner = GraphRunner(
                engine.unit_for(graph_backend or ""),
                engine.decode_buffers(self.width),
                buckets or default_buckets(max_batch),
                device=engine.device,
                carry={"tokens": "next_token"},
                name="decode",
                backend=graph_backend,
            ).capture()
            if plan_ahead:
                staging = {
                    "positions": ((max_batch,), torch.long),
                    "slots": ((max_batch,), torch.long),
                    "kv_lens": ((max_batch,), torch.int32),
                    "block_tables": ((max_batch, self.width), torch.int32),
                }
                gpu = engine.device.type == "cuda"
                threaded = gpu if plan_thread is None else plan_thread
                self.planner = MetadataPlanner(self._plan_rows, staging, pin=gpu, threaded=threaded)

    # ------------------------------------------------------------ requests

    def submit(self, request: GenRequest) -> GenRequest:
        total = int(request.prompt.numel()) + request.max_new_tokens
        if request.prompt.numel() == 0:
            raise ValueError(f"request `{request.id}` has an empty prompt")
        if total > self.max_seq_len:
            raise ValueError(
                f"request `{request.id}` needs {total} tokens, over max_seq_len {self.max_seq_len}"
            )
        self.waiting.append(request)
        return request

    def cancel(self, request_id: Hashable) -> None:
        """Drop a request wherever it is; its pages are freed at once."""
        for q in (self.waiting, self.running):
            for r in list(q):
                if r.id == request_id:
                    q.remove(r)
                    self._leave(r, "cancelled")

    def _leave(self, r: GenRequest, error: str | None = None) -> None:
        self._rows.pop((r.id, r.label), None)
        self.engine.free(r.id)
        r.done, r.error, r.left_at = True, error, self.iteration
        self.finished.append(r)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    # ------------------------------------------------------------ one iteration

    def step(self) -> list[GenRequest]:
        """Run one iteration; returns the requests that left during it."""
        before = len(self.finished)
        decoders = list(self.running)
        joiners = self._admit()
        if joiners:
            self._prefill(joiners)
        if decoders:
            self._decode(decoders, joiners)
        else:
            self._plan_ids = self._plan = None  # every planned row left (stop tokens, cancels)
        self.running = [r for r in self.running if not r.done]
        for r in [r for r in self.running if r.finished]:
            self.running.remove(r)
            self._leave(r)
        self.iteration += 1
        return self.finished[before:]

    def run(self, requests: Iterable[GenRequest] = ()) -> list[GenRequest]:
        """Submit ``requests`` and step until every request has left."""
        for r in requests:
            self.submit(r)
        while not self.idle:
            self.step()
        return self.finished

    def _admit(self) -> list[GenRequest]:
        joiners: list[GenRequest] = []
        pool = self.engine.pool
        while self.waiting and len(self.running) < self.max_batch:
            r = self.waiting[0]
            total = int(r.prompt.numel()) + r.max_new_tokens
            try:
                pool.reserve(r.id, total, timeout=self.pool_timeout)
            except PoolFull as e:
                if pool.pages_for(total) > pool.num_pages or not self.running:
                    self.waiting.popleft()  # can never fit (or nothing will free pages)
                    self._leave(r, str(e))
                    continue
                break  # fits later: wait for running requests to leave
            self.waiting.popleft()
            r.joined_at = self.iteration
            self.running.append(r)
            joiners.append(r)
        return joiners

    def _prefill(self, joiners: list[GenRequest]) -> None:
        seqs = [(r.id, r.label) for r in joiners]
        logits = self.engine.prefill(seqs, [r.prompt for r in joiners])
        if self.runner is not None:
            pool = self.engine.pool
            for r, (rid, label) in zip(joiners, seqs, strict=True):
                n = pool.seq_len(rid, label)
                table = pool.page_table(rid, label)
                self._rows[(rid, label)] = _Row(n, r.max_new_tokens - 1, table)
        self._record(joiners, logits)

    def _record(self, rows: list[GenRequest], logits: torch.Tensor, tokens=None) -> None:
        ids = (tokens if tokens is not None else logits.argmax(-1)).tolist()
        for r, tok, i in zip(rows, ids, range(len(rows)), strict=True):
            r.tokens.append(int(tok))
            if self.keep_logits:
                r.logits.append(logits[i].clone())

    # ------------------------------------------------------------ decode

    def _decode(self, rows: list[GenRequest], joiners: list[GenRequest]) -> None:
        rows = [r for r in rows if not r.done]
        self.batch_sizes.append(len(rows))
        runner, planner = self.runner, self.planner
        if runner is None:
            last = torch.tensor([r.tokens[-1] for r in rows], dtype=torch.long)
            logits = self.engine.decode([(r.id, r.label) for r in rows], last)
            self._record(rows, logits)
            return
        ids = [r.id for r in rows]
        if ids == self._last_rows and self._plan_ids is None:
            # the same rows as last step: their metadata is still in the static buffers
            self._advance(runner, rows)
            inputs = {}
        else:
            self._sync()
            meta = self._take_plan(rows)
            self._set_budget(rows)
            inputs = {k: v[: len(rows)] for k, v in meta.items()}
            # rows moved: the carried tokens are stale
            inputs["tokens"] = torch.tensor([r.tokens[-1] for r in rows], dtype=torch.long)
        self._last_rows = ids
        if planner is not None:
            nxt = [r for r in rows if len(r.tokens) + 1 < r.max_new_tokens]
            nxt += [r for r in joiners if not r.finished]
            if [r.id for r in nxt] != ids:  # only a change of rows needs a plan
                self._submit_plan(planner, nxt)
        out = runner.run(inputs, len(rows))
        if planner is not None and self._plan_ids:
            # wait before anyone leaves: the planner appends to the pool, and freeing a request
            # while its slot is being appended would leak the page
            self._plan = planner.take()
        self._record(rows, out["logits"], out["next_token"])

    def _submit_plan(self, planner: MetadataPlanner, rows: list[GenRequest]) -> None:
        self._sync()  # the planner reads the rows' state
        self._plan_ids = [(r.id, r.label) for r in rows] or None
        self._plan = None
        if rows:
            planner.submit(self._plan_ids)

    def _take_plan(self, rows: list[GenRequest]) -> dict[str, torch.Tensor]:
        want = [(r.id, r.label) for r in rows]
        planned, staged = self._plan_ids, self._plan
        self._plan_ids = self._plan = None
        if planned and staged is not None:
            pos = {key: i for i, key in enumerate(planned)}
            if all(key in pos for key in want):
                idx = torch.tensor([pos[key] for key in want], dtype=torch.long)
                return {k: v.index_select(0, idx) for k, v in staged.items()}
            # cannot happen (rows only ever leave the plan); fail loudly rather than decode
            # with slots appended for other rows
            raise RuntimeError(f"decode rows {want} are not a subset of the plan {planned}")
        out = {
            "positions": torch.zeros(len(rows), dtype=torch.long),
            "slots": torch.zeros(len(rows), dtype=torch.long),
            "kv_lens": torch.zeros(len(rows), dtype=torch.int32),
            "block_tables": torch.zeros((len(rows), self.width), dtype=torch.int32),
        }
        self._plan_rows(want, out)
        return out

    def _take_slot(self, key: Seq) -> tuple[_Row, int, bool]:
        """The next slot of sequence ``key`` and whether it starts a new page. Slots are
        appended to the pool up to the end of the current page (at most the steps left), so
        the pool is called once per page."""
        row = self._rows[key]
        ps = self.engine.pool.page_size
        new_page = False
        if row.ahead == 0:
            n = max(1, min(ps - row.length % ps, row.left))
            row.slot = int(self.engine.pool.append(key[0], key[1], n)[0])
            row.ahead = n
            if row.length % ps == 0:
                row.table.append(row.slot // ps)
                new_page = True
        slot = row.slot
        row.slot += 1
        row.ahead -= 1
        row.length += 1
        row.left -= 1
        return row, slot, new_page

    def _sync(self) -> None:
        """Apply the lagging fast steps to the rows' host state."""
        lag, self._lag = self._lag, 0
        if lag:
            for key in self._lag_keys:
                row = self._rows.get(key)
                if row is not None:  # (a row that left has no state)
                    row.slot += lag
                    row.ahead -= lag
                    row.length += lag
                    row.left -= lag

    def _set_budget(self, rows: list[GenRequest]) -> None:
        self._lag_keys = [(r.id, r.label) for r in rows]
        self._budget = min((self._rows[k].ahead for k in self._lag_keys), default=0)

    def _advance(self, runner: GraphRunner, rows: list[GenRequest]) -> None:
        """Move the static buffers of the same rows one token on, in place. The rows' host
        state is visited only when one of them starts a new page (once per page)."""
        bufs = runner.static_inputs(len(rows))
        n = len(rows)
        for b in ("positions", "kv_lens", "slots"):
            bufs[b][:n] += 1  # within a page, a row's next slot is the one after its last
        if self._budget > 0:
            self._budget -= 1
            self._lag += 1
            return
        self._sync()
        for i, r in enumerate(rows):
            row, slot, new_page = self._take_slot((r.id, r.label))
            if new_page:  # its slot does not follow the last one
                bufs["slots"][i] = slot
                bufs["block_tables"][i, len(row.table) - 1] = row.table[-1]
        self._set_budget(rows)

    def _plan_rows(self, seqs: list[Seq], out: dict[str, torch.Tensor]) -> None:
        """Take one slot per sequence and write the step's metadata rows into ``out``."""
        pad_page = self.engine.pad_slot // self.engine.pool.page_size
        slots, lengths, tables = [], [], []
        for key in seqs:
            row, slot, _ = self._take_slot(key)
            slots.append(slot)
            lengths.append(row.length)
            tables.append(row.table + [pad_page] * (self.width - len(row.table)))
        n = len(seqs)
        if not n:
            return
        out["slots"][:n] = torch.tensor(slots, dtype=torch.long)
        kv_lens = torch.tensor(lengths, dtype=torch.long)
        out["positions"][:n] = kv_lens - 1
        out["kv_lens"][:n] = kv_lens
        out["block_tables"][:n] = torch.tensor(tables, dtype=torch.int32)

    def close(self) -> None:
        if self.planner is not None:
            self.planner.close()
