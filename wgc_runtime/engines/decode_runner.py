"""The running batch of one `kv_cache` node's decode step: what the step needs besides the model.

A decoder node's captured decode step (`wgc_runtime.contract.capture.StaticStep`) reads, per
row, its token's KV slot, its position, its sequence length and its page table. `DecodeRunner`
keeps those for every request in the running batch, in one place and as arrays:

* **page tables as one array** ``[rows, width]`` (int32, padded with the padding page): a
  request's row is written when it joins and then only when its sequence takes a page (once in
  ``page_size`` steps); a batch's tables are one gather of its rows;
* **lengths** as an array: which capture form (page-table width) admits a batch is one
  comparison of the batch's longest sequence, not a walk over its rows;
* **the step's metadata** (`DecodeRunner.step`): one call per batch appends every row's token to
  its sequence and returns the batch's ``positions``, ``slots``, ``kv_lens`` and
  ``block_tables`` as tensors; a row whose sequence is full fails alone (``failed``), the
  others run. The row indices of a batch are cached: the same requests step after step (a
  decode loop's steady state) reuse them. The first step of a batch, and any step after the
  pool changed otherwise (``PagedKVPool.changes``: a prefill, a fork, a request freed), goes
  through the pool's per-sequence appends (`PagedKVPool.append_tokens`) and checks each row's
  table; the steps after it are array operations over the batch (`_step_fast`: slots from the
  tables and lengths, a page taken only for the rows whose last page is full, once in
  ``page_size`` steps) and one length update per row's `PageTable`. Both give the same pages,
  slots and tables;
* **per-row columns** the node's own step bookkeeping keeps beside the tables (e.g. a TTS
  model's audio position, token budget and whether it samples): set once when a row joins (`fresh`),
  read and updated as arrays over the batch's rows after that.

The host-side arrays are numpy's: an operation on a few dozen numbers costs ~1 µs there and
~3-5 µs as a torch op, and a step makes a dozen of them; the step's inputs are torch views of
them (``torch.from_numpy``). A row joins on its first step and leaves with `leave` (the request
ended or moved): per-row Python happens then, and in the pool's append. Padding rows of a
bucket write to the padding page the engine keeps aside (``pad_page``) and attend to one token.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from wgc_runtime.engines.kv_pool import PagedKVPool, PageTable, SequenceFull

if TYPE_CHECKING:
    from wgc_runtime.contract.node import Work


def requests_of(works: Sequence[Work]) -> list[Hashable]:
    """The KV sequences' requests of a kv-cache node's batch, in order."""
    out = []
    for w in works:
        kv = w.ctx.kv
        if kv is None:
            raise ValueError(f"a call of request `{w.ctx.request_id}` has no KV cache")
        out.append(kv.request)
    return out


@dataclass(slots=True)
class StepMeta:
    """One decode step's metadata for a batch (`DecodeRunner.step`): tensors over the rows that
    run (``rows``: their positions in the batch asked for), and the rows that failed with why."""

    positions: torch.Tensor  # [n] int64
    slots: torch.Tensor  # [n] int64
    kv_lens: torch.Tensor  # [n] int32
    block_tables: torch.Tensor  # [n, width] int32
    rows: list[int]
    failed: dict[int, BaseException]
    row_ids: np.ndarray  # [n] the runner's rows of the rows that ran (for `columns`)

    def tensors(self, width: int) -> dict[str, torch.Tensor]:
        """The step's extra buffers, page tables cut to ``width`` pages."""
        return {
            "positions": self.positions,
            "slots": self.slots,
            "kv_lens": self.kv_lens,
            "block_tables": self.block_tables[:, :width],
        }


@dataclass(slots=True, eq=False)
class _Fast:
    """A batch the runner steps as arrays (`DecodeRunner._step_fast`): its rows (`rows_of`'s
    cached entry), their `PageTable`s, their last slots, and how many steps on none of them
    takes a page or reaches its limit."""

    key: object
    tabs: list[PageTable]
    slots: np.ndarray
    calm: int


class DecodeRunner:
    """The running batch of one kv-cache node's decode step (module docstring).

    ``label``: the sequence of each request the step appends to; ``width``: the widest page
    table a step reads (pages); ``limit``: the tokens a sequence may hold (`SequenceFull` past
    it); ``pad_page``: the padding page the tables are filled with; ``columns``: the node's
    per-row values, by name and numpy dtype (zero until set)."""

    def __init__(
        self,
        pool: PagedKVPool,
        *,
        label: str,
        width: int,
        limit: int,
        pad_page: int,
        columns: Mapping[str, Any] | None = None,
    ) -> None:
        self.pool, self.label, self.width = pool, label, width
        self.limit, self.pad_page = limit, pad_page
        self._index: dict[Hashable, int] = {}  # request -> its row in the arrays
        self._free: list[int] = []  # rows left by requests, to reuse
        self._tables = np.full((0, width), pad_page, dtype=np.int32)
        self._lengths = np.zeros(0, dtype=np.int64)
        self.columns = {n: np.zeros(0, dtype=d) for n, d in (columns or {}).items()}
        self._fresh: set[int] = set()  # rows joined whose columns the node has not set
        # per row: the pool's page list it was written from and how many of its pages
        self._pages: list[list[int] | None] = []
        self._written: list[int] = []
        self._last: tuple[tuple[Hashable, ...], np.ndarray] | None = None  # cached batch rows
        # after a step of the batch `_last` in which every row ran: `_last` and the rows'
        # `PageTable`s, exact while the pool's ``changes`` stays ``_seen`` (`_step_fast`)
        self._fast: _Fast | None = None
        self._seen = -1

    # ------------------------------------------------------------------ rows
    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, request: Hashable) -> bool:
        return request in self._index

    def _join(self, request: Hashable) -> int:
        if self._free:
            row = self._free.pop()
        else:
            row = len(self._pages)
            self._pages.append(None)
            self._written.append(0)
            if row >= self._tables.shape[0]:  # grow by doubling: joins stay amortised O(1)
                grow = max(8, self._tables.shape[0])
                pad = np.full((grow, self.width), self.pad_page, dtype=np.int32)
                self._tables = np.concatenate((self._tables, pad))
                self._lengths = np.concatenate((self._lengths, np.zeros(grow, dtype=np.int64)))
                for name, col in self.columns.items():
                    self.columns[name] = np.concatenate((col, np.zeros(grow, dtype=col.dtype)))
        self._index[request] = row
        self._pages[row], self._written[row] = None, 0
        self._tables[row] = self.pad_page
        self._lengths[row] = self.pool.seq_len(request, self.label)
        for col in self.columns.values():
            col[row] = 0
        self._fresh.add(row)
        return row

    def leave(self, request: Hashable) -> None:
        """The request left the running batch (ended, failed, cancelled, moved)."""
        row = self._index.pop(request, None)
        if row is None:
            return
        self._pages[row] = None
        self._free.append(row)
        self._fresh.discard(row)
        self._last = None

    def rows_of(self, requests: Sequence[Hashable]) -> np.ndarray:
        """The arrays' rows of ``requests`` (joining the new ones), cached for a repeated
        batch."""
        key = tuple(requests)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        index = self._index
        rows = np.array(
            [index[r] if r in index else self._join(r) for r in requests], dtype=np.int64
        )
        self._last = (key, rows)
        return rows

    def fresh(self, requests: Sequence[Hashable]) -> list[int]:
        """The positions in ``requests`` of rows that joined since the node last asked: their
        ``columns`` are to be set (`set`). Empty, and O(1), while no row joins."""
        if not self._fresh:
            return []
        index, fresh = self._index, self._fresh
        out = [i for i, r in enumerate(requests) if index.get(r, -1) in fresh]
        fresh.difference_update(index[requests[i]] for i in out)
        return out

    def get(self, request: Hashable, column: str) -> Any:
        """One row's value of a column (a Python number)."""
        return self.columns[column][self._index[request]].item()

    def set(self, request: Hashable, column: str, value: Any) -> None:
        self.columns[column][self._index[request]] = value

    def sync(self, request: Hashable) -> None:
        """The request's sequence grew outside `step` (a plain `forward` of the node): its
        length is read again."""
        row = self._index.get(request)
        if row is not None:
            self._lengths[row] = self.pool.seq_len(request, self.label)

    def longest(self, requests: Sequence[Hashable]) -> int:
        """The longest sequence among ``requests`` before their next token (joins the new
        ones): what decides the narrowest page table that admits their step."""
        if not requests:
            return 0
        rows = self.rows_of(requests)  # first: a join may grow the arrays
        return int(self._lengths[rows].max())

    # ------------------------------------------------------------------ one step
    def step(self, requests: Sequence[Hashable]) -> StepMeta:
        """Append one token to each request's sequence; the batch's step metadata."""
        rows = self.rows_of(requests)
        fast = self._fast
        if fast is not None and fast.key is self._last and self.pool.changes == self._seen:
            meta = self._step_fast(requests, rows, fast)
            if meta is not None:
                return meta
        self._fast = None
        meta = self._step_rows(requests, rows)
        if not meta.failed:  # the rows' tables are exact: the next step of the batch is fast
            tables = self.pool._tables  # pyright: ignore[reportPrivateUsage]
            label = self.label
            tabs = [tables[r][label] for r in requests]
            self._fast = _Fast(self._last, tabs, meta.slots.numpy(), 0)
            self._fast.calm = self._calm(meta.kv_lens.numpy())
            self._seen = self.pool.changes
        return meta

    def _calm(self, lengths: np.ndarray) -> int:
        """How many of the batch's next steps take no page and reach no limit, from its rows'
        ``lengths``: in those each row's slot is its last one's next."""
        ps = self.pool.page_size
        return int(min(((-lengths) % ps).min(), (self.limit - lengths).min()))

    def _step_fast(
        self, requests: Sequence[Hashable], rows: np.ndarray, fast: _Fast
    ) -> StepMeta | None:
        """`step` of the batch whose last step ran every row, while nothing but this runner
        changed the pool: the lengths and tables here are the pool's. None (nothing changed)
        when a row is full or would pass ``width`` (`_step_rows` says so)."""
        pool, ps, tables, tabs = self.pool, self.pool.page_size, self._tables, fast.tabs
        lengths = self._lengths[rows]  # before this token
        with pool._cond:  # pyright: ignore[reportPrivateUsage]
            if pool.changes != self._seen:
                return None
            if fast.calm > 0:  # no row takes a page or reaches its limit
                fast.calm -= 1
                slots = fast.slots + 1
            else:
                if bool((lengths >= self.limit).any()):
                    return None
                new = np.flatnonzero(lengths % ps == 0)  # the last page is full: take one
                if new.size and int(lengths[new].max()) // ps >= self.width:
                    return None
                self._take_pages(requests, rows, tabs, new.tolist())
                slots = tables[rows, lengths // ps].astype(np.int64) * ps + lengths % ps
                fast.calm = self._calm(lengths + 1)
            for t in tabs:
                t.length += 1
        fast.slots = slots
        kv_lens = lengths + 1
        self._lengths[rows] = kv_lens
        return StepMeta(
            positions=torch.from_numpy(lengths),
            slots=torch.from_numpy(slots),
            kv_lens=torch.from_numpy(kv_lens.astype(np.int32)),
            block_tables=torch.from_numpy(tables[rows]),
            rows=list(range(len(tabs))),
            failed={},
            row_ids=rows,
        )

    def _take_pages(
        self, requests: Sequence[Hashable], rows: np.ndarray, tabs: list[PageTable], new: list[int]
    ) -> None:
        """A page each for the batch's rows ``new`` (in order), in the pool and the tables."""
        pool, tables, written = self.pool, self._tables, self._written
        for i in new:
            request, row = requests[i], int(rows[i])
            try:
                (page,) = pool._take(  # pyright: ignore[reportPrivateUsage]
                    request, 1, f"`{request}`/`{self.label}` (+1 tokens)"
                )
            except BaseException:  # as `append_tokens`: the rows before it grew
                for t in tabs[:i]:
                    t.length += 1
                pool.changes += 1
                self._fast = None
                raise
            tabs[i].pages.append(page)
            tables[row, written[row]] = page
            written[row] += 1

    def _step_rows(self, requests: Sequence[Hashable], rows: np.ndarray) -> StepMeta:
        """`step` row by row, through the pool's appends (`PagedKVPool.append_tokens`)."""
        pool, label, limit = self.pool, self.label, self.limit
        slots: list[int] = []
        lengths: list[int] = []
        ran: list[int] = []
        failed: dict[int, BaseException] = {}
        pages_of, written, tables = self._pages, self._written, self._tables
        appended = pool.append_tokens(requests, label, limit)
        for i, (request, row, got) in enumerate(
            zip(requests, rows.tolist(), appended, strict=True)
        ):
            if isinstance(got, SequenceFull):
                failed[i] = got
                continue
            slot, length, pages = got
            if pages is not pages_of[row] or len(pages) != written[row]:
                # the sequence took a page (or its table is new): its row of the tables
                n = len(pages)
                if n > self.width:
                    failed[i] = SequenceFull(
                        f"`{request}`/`{label}` holds {length} tokens, past {self.width} pages"
                    )
                    continue
                tables[row, :n] = pages
                tables[row, n:] = self.pad_page
                pages_of[row], written[row] = pages, n
            slots.append(slot)
            lengths.append(length)
            ran.append(i)
        if failed:
            rows = rows[ran]
        kv_lens = np.array(lengths, dtype=np.int64)  # the pool's: a plain step counts
        self._lengths[rows] = kv_lens
        return StepMeta(
            positions=torch.from_numpy(kv_lens - 1),
            slots=torch.from_numpy(np.array(slots, dtype=np.int64)),
            kv_lens=torch.from_numpy(kv_lens.astype(np.int32)),
            block_tables=torch.from_numpy(tables[rows]),
            rows=ran,
            failed=failed,
            row_ids=rows,
        )
