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

The decode step runs either through the plain path (`DecoderEngine.decode`: host-built
`AttentionMetadata`, ``backend.forward``) or through the capture path: a `GraphRunner` over the
engine's static decode unit (replayed CUDA graphs on a GPU, the same static buffers run eagerly
on the CPU). On the capture path the next step's metadata (slots, kv lengths, page tables,
positions) is planned by `MetadataPlanner` on a side thread while this step runs; that is
possible because it does not depend on this step's tokens: the rows of the next step are this
step's rows that will not reach ``max_new_tokens`` plus this iteration's joiners, and a row
that leaves early (stop token, cancel) is simply dropped from the plan.

Sampling is greedy (argmax); results are deterministic, so a request's tokens are the same
batched or alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

import torch

from wgc_runtime.components.llama import DecoderEngine
from wgc_runtime.engines.cuda_graph import GraphRunner, MetadataPlanner
from wgc_runtime.engines.kv_pool import PoolFull


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


def default_buckets(max_batch: int) -> tuple[int, ...]:
    """Powers of two up to (and including) ``max_batch``."""
    out, b = [], 1
    while b < max_batch:
        out.append(b)
        b *= 2
    return (*out, max_batch)


class ContinuousBatcher:
    """Continuous batching of greedy generation over one `DecoderEngine` (module docstring).

    ``capture``: decode through the `GraphRunner` (True) or the plain path (False).
    ``max_seq_len`` bounds prompt + new tokens (it sizes the static page tables).
    """

    def __init__(
        self,
        engine: DecoderEngine,
        *,
        max_batch: int = 16,
        max_seq_len: int = 2048,
        capture: bool = True,
        buckets: Sequence[int] | None = None,
        plan_ahead: bool = True,
        plan_thread: bool | None = None,
        keep_logits: bool = False,
        pool_timeout: float = 0.0,
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
        self._plan_ids: list[Hashable] | None = None  # rows of the plan being made / taken
        self._plan: dict[str, torch.Tensor] | None = None
        self._last_rows: list[Hashable] = []
        if capture:
            self.width = engine.width_for(max_seq_len)
            self.runner = GraphRunner(
                engine.decode_unit,
                engine.decode_buffers(self.width),
                buckets or default_buckets(max_batch),
                device=engine.device,
                carry={"tokens": "next_token"},
                name="decode",
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
        if self.runner is None:
            last = torch.tensor([r.tokens[-1] for r in rows], dtype=torch.long)
            logits = self.engine.decode([(r.id, r.label) for r in rows], last)
            self._record(rows, logits)
            return
        meta = self._take_plan(rows)
        inputs = {k: v[: len(rows)] for k, v in meta.items()}
        ids = [r.id for r in rows]
        if ids != self._last_rows:  # rows moved: the carried tokens are stale
            inputs["tokens"] = torch.tensor([r.tokens[-1] for r in rows], dtype=torch.long)
        self._last_rows = ids
        if self.planner is not None:
            nxt = [r for r in rows if len(r.tokens) + 1 < r.max_new_tokens]
            nxt += [r for r in joiners if not r.finished]
            self._submit_plan(nxt)
        out = self.runner.run(inputs, len(rows))
        if self._plan_ids:
            # wait before anyone leaves: the planner appends to the pool, and freeing a request
            # while its slot is being appended would leak the page
            self._plan = self.planner.take()
        self._record(rows, out["logits"], out["next_token"])

    def _submit_plan(self, rows: list[GenRequest]) -> None:
        self._plan_ids = [(r.id, r.label) for r in rows] or None
        self._plan = None
        if rows:
            self.planner.submit(self._plan_ids)

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

    def _plan_rows(self, seqs: list[tuple[Hashable, str]], out: dict[str, torch.Tensor]) -> None:
        """Append one slot per sequence and write the step's metadata rows into ``out``."""
        pool = self.engine.pool
        pad_page = self.engine.pad_slot // pool.page_size
        for i, (rid, label) in enumerate(seqs):
            slot = int(pool.append(rid, label, 1)[0])
            n = pool.seq_len(rid, label)
            table = pool.page_table(rid, label)
            out["slots"][i] = slot
            out["positions"][i] = n - 1
            out["kv_lens"][i] = n
            row = out["block_tables"][i]
            row[: len(table)] = torch.tensor(table, dtype=torch.int32)
            row[len(table) :] = pad_page

    def close(self) -> None:
        if self.planner is not None:
            self.planner.close()
