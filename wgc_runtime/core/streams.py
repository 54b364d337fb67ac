"""Stream buffers: one per (request, stream), turning produced items into consumer chunks.

Items are numbered 0, 1, 2, ... in the order the producer port produces them; ``[a, b)`` is
items a to b-1. Items concatenate on dim 0 (scalar items stack on a new dim 0).

Full chunks (the language reference, §6):

| policy                      | chunk j                                  | full size |
|-----------------------------|------------------------------------------|-----------|
| ``fixed(k)``                | ``[j·k, (j+1)·k)``                       | k         |
| ``sliding(window=W, stride=S)`` | ``[j·S, j·S + W)``                   | W         |
| ``left_context(chunk=C, left=L)`` | ``[max(0, j·C − L), (j+1)·C)``     | C + L     |

(``left_context`` chunk 0 is ``[0, C)``: no context, short when L > 0.)

**When the producer is done** (`StreamBuffer.done`) with n items, m full chunks exist (every
chunk j whose end ≤ n) and the *residual* is what no full chunk covers: ``[m·k, n)`` for fixed,
``[m·S, n)`` for sliding (when some item is in no full window; with n < W that is all n items),
``[max(0, m·C − L), n)`` for left_context (context, then n mod C new items).

**The chunk sequence** is a function of the items alone, never of timing:

1. full chunks 0 .. m−1, each delivered (`ready`) as soon as its last item exists and never
   final (no hold-back: a consumer sees a full chunk with no added latency);
2. then, once the producer is done, exactly one *final* chunk: the residual if there is one and
   ``final`` keeps it (``partial``: short; ``pad``: padded with zeros to the full size, with its
   valid length), otherwise an *empty* chunk (valid length 0). Under ``drop`` the final chunk is
   always empty; for n = 0 it is the only chunk.

**Empty chunks** (valid length 0): the empty final chunk, and under ``after_done continue`` the
chunks offered after the final one (flagged ``after_done``, never final). Under ``pad`` and
``drop`` an empty chunk is a full-size chunk of zeros (those modes allow static consumers, which
must always receive their static shape); under ``partial`` it has zero rows. ``pad`` also pads
``left_context``'s short chunk 0 to C + L rows.

**Back-pressure.** The buffer keeps only the items a future chunk needs. It holds at most
``capacity`` of them: `can_push` says whether one more fits, `push` raises `StreamFull` when it
does not, and the producer must stall (keep the item and retry after the consumer took a chunk).
``capacity`` must be at least one full chunk (`min_capacity`).
When no consumer is left (`abandon`), items are accepted and dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from wgc_runtime.contract.node import ChunkInfo

POLICIES = {"fixed": ("k",), "sliding": ("window", "stride"), "left_context": ("chunk", "left")}
FINAL_MODES = ("partial", "pad", "drop")


class StreamError(Exception):
    """Misuse of a stream (pushing after done, taking past the end, a bad item)."""


class StreamFull(StreamError):
    """`push` on a full buffer: the producer must wait until the consumer takes a chunk."""


class StreamEnded(StreamError):
    """`take` after the final chunk of an `after_done stop` stream."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A chunk policy's geometry, in items."""

    kind: str
    params: tuple[tuple[str, int], ...]

    @staticmethod
    def of(kind: str, params: Mapping[str, int] | None = None, **kw: int) -> Policy:
        given = {**(params or {}), **kw}
        if kind not in POLICIES:
            raise ValueError(f"unknown chunk policy `{kind}` (one of {', '.join(POLICIES)})")
        names = POLICIES[kind]
        if set(given) != set(names):
            raise ValueError(f"`{kind}` takes parameters {', '.join(names)}, got {sorted(given)}")
        p = Policy(kind, tuple((n, int(given[n])) for n in names))
        p._validate()
        return p

    def get(self, name: str) -> int:
        for n, v in self.params:  # one to three parameters: no dict per call (`ready` asks)
            if n == name:
                return v
        raise KeyError(name)

    def _validate(self) -> None:
        if self.kind == "fixed" and self.get("k") < 1:
            raise ValueError("fixed: k must be >= 1")
        if self.kind == "sliding" and not 1 <= self.get("stride") <= self.get("window"):
            raise ValueError("sliding: need 1 <= stride <= window")
        if self.kind == "left_context" and (self.get("chunk") < 1 or self.get("left") < 0):
            raise ValueError("left_context: need chunk >= 1 and left >= 0")

    @property
    def full(self) -> int:
        """Items in a full chunk."""
        if self.kind == "fixed":
            return self.get("k")
        if self.kind == "sliding":
            return self.get("window")
        return self.get("chunk") + self.get("left")

    @property
    def advance(self) -> int:
        if self.kind == "fixed":
            return self.get("k")
        if self.kind == "sliding":
            return self.get("stride")
        return self.get("chunk")

    def span(self, j: int) -> tuple[int, int]:
        """``[start, end)`` of full chunk j."""
        if self.kind == "fixed":
            k = self.get("k")
            return j * k, (j + 1) * k
        if self.kind == "sliding":
            s = self.get("stride")
            return j * s, j * s + self.get("window")
        c, left = self.get("chunk"), self.get("left")
        return max(0, j * c - left), (j + 1) * c

    def full_chunks(self, n: int) -> int:
        """How many full chunks n items make."""
        if self.kind == "sliding":
            w, s = self.get("window"), self.get("stride")
            return 0 if n < w else (n - w) // s + 1
        return n // self.advance

    def residual(self, n: int) -> tuple[int, int] | None:
        """``[start, end)`` of the items no full chunk covers once the producer is done."""
        m = self.full_chunks(n)
        if m > 0 and self.span(m - 1)[1] >= n:
            return None
        if n == 0:
            return None
        if self.kind == "left_context":
            return max(0, m * self.get("chunk") - self.get("left")), n
        return m * self.advance, n


def chunk_plan(policy: Policy, final: str, n: int) -> list[tuple[int, int, bool]]:
    """The closed form: ``(start, end, final)`` of every chunk of a stream of n items (before
    any `after_done` chunks): the full chunks, then one final chunk, the residual or, when there
    is none (or ``final`` is ``drop``), the empty chunk ``(n, n, True)``."""
    out = [(*policy.span(j), False) for j in range(policy.full_chunks(n))]
    res = policy.residual(n)
    if res is not None and final != "drop":
        out.append((*res, True))
    else:
        out.append((n, n, True))
    return out


def min_capacity(policy: Policy, final: str = "partial") -> int:
    """The fewest items a buffer must hold so that it can always deliver its next chunk: one
    full chunk, whatever the ``final`` mode (full chunks are never held back)."""
    del final  # kept for callers: the need no longer depends on the final mode
    return policy.full


@dataclass(slots=True)
class Chunk:
    data: torch.Tensor
    info: ChunkInfo


class StreamBuffer:
    """One request's buffer of one stream (see the module docstring for the exact rules).

    ``item_shape`` and ``dtype`` describe one item (the producer port's type); they are needed
    only to shape empty and padded chunks before any item arrived, and are otherwise taken from
    the first item.
    """

    def __init__(
        self,
        policy: Policy,
        final: str = "partial",
        after_done: bool = False,
        capacity: int | None = None,
        item_shape: tuple[int, ...] | None = None,
        dtype: torch.dtype | None = None,
        name: str = "",
    ) -> None:
        if final not in FINAL_MODES:
            raise ValueError(f"unknown final mode `{final}` (one of {', '.join(FINAL_MODES)})")
        self.policy = policy
        self.final = final
        self.after_done = after_done
        self.name = name
        need = min_capacity(policy, final)
        self.capacity = max(capacity if capacity is not None else 4 * need, need)
        if capacity is not None and capacity < need:
            raise ValueError(
                f"stream `{name}`: capacity {capacity} is below the {need} items one chunk needs"
            )
        self.item_shape = item_shape
        self.dtype = dtype
        self._items: list[torch.Tensor] = []  # items [base, produced)
        self._base = 0
        self.produced = 0
        self.is_done = False
        self._next = 0  # index of the next chunk to hand out
        self._final_taken = False
        self._plan: list[tuple[int, int, bool]] | None = None  # set when done
        self.abandoned = False
        self.starved_at = -1  # the chunk a consumer last found not ready (underruns: once each)

    # ------------------------------------------------------------------ producer side
    @property
    def held(self) -> int:
        """Items the buffer holds now (at most ``capacity``)."""
        return len(self._items)

    def can_push(self) -> bool:
        return not self.is_done and (self.abandoned or len(self._items) < self.capacity)

    def push(self, item: torch.Tensor) -> None:
        if self.is_done:
            raise StreamError(f"stream `{self.name}`: push after the producer is done")
        if self.abandoned:
            return
        if len(self._items) >= self.capacity:
            raise StreamFull(f"stream `{self.name}` is full ({self.capacity} items)")
        self._check_item(item)
        self._items.append(item)
        self.produced += 1

    def done(self) -> None:
        """The producer will produce no more items for this request."""
        if not self.is_done:
            self.is_done = True
            self._plan = chunk_plan(self.policy, self.final, self.produced)

    def abandon(self) -> None:
        """No consumer will take another chunk (its flows ended or never ran): drop what is
        held and accept later items without keeping them, so the producer never stalls."""
        self.abandoned = True
        self._items.clear()

    def _check_item(self, item: torch.Tensor) -> None:
        if self.item_shape is None:
            self.item_shape = tuple(item.shape)
        if self.dtype is None:
            self.dtype = item.dtype
        if item.shape != self.item_shape or item.dtype != self.dtype:
            raise StreamError(
                f"stream `{self.name}`: item of shape {tuple(item.shape)} {item.dtype}, "
                f"expected {self.item_shape} {self.dtype}"
            )

    # ------------------------------------------------------------------ consumer side
    @property
    def ended(self) -> bool:
        """True when the final chunk was taken and nothing more will be offered."""
        return self._final_taken and not self.after_done

    @property
    def taken(self) -> int:
        """Chunks handed out so far (after_done chunks included)."""
        return self._next

    @property
    def final_taken(self) -> bool:
        return self._final_taken

    def ready(self) -> bool:
        """True when `take` would return a chunk now."""
        if self._final_taken:
            return self.after_done
        if self.is_done:
            return True
        # a full chunk is ready as soon as its last item exists: it is never the final one
        return self.produced >= self.policy.span(self._next)[1]

    def next_is_empty(self) -> bool:
        """True when the chunk `take` would return now is an empty one (valid length 0)."""
        if self._final_taken:
            return self.after_done
        if self._plan is None:
            return False
        start, end, _ = self._plan[self._next]
        return start == end

    def take(self) -> Chunk | None:
        """The next chunk, or None when it is not ready yet. Raises `StreamEnded` past the end."""
        if self._final_taken:
            if not self.after_done:
                raise StreamEnded(f"stream `{self.name}` ended: its final chunk was taken")
            self._next += 1
            return self._empty(self._next - 1, final=False, after_done=True)
        if not self.ready():
            return None
        j = self._next
        if self._plan is not None:
            start, end, final = self._plan[j]
        else:
            (start, end), final = self.policy.span(j), False
        self._next += 1
        if final:
            self._final_taken = True
        chunk = self._empty(j, final, False) if start == end else self._slice(j, start, end, final)
        self._trim()
        return chunk

    # ------------------------------------------------------------------ chunks
    def _rows(self, items: int) -> int:
        lead = self.item_shape[0] if self.item_shape else 1
        return items * lead

    def _padded(self) -> bool:
        return self.final in ("pad", "drop")

    def _slice(self, j: int, start: int, end: int, final: bool) -> Chunk:
        parts = self._items[start - self._base : end - self._base]
        data = torch.stack(parts) if self.item_shape == () else torch.cat(parts)
        valid = data.shape[0]
        size = valid
        if self.final == "pad" and end - start < self.policy.full:
            size = self._rows(self.policy.full)
            pad = data.new_zeros((size - valid, *data.shape[1:]))
            data = torch.cat([data, pad])
        return Chunk(data, ChunkInfo(j, start, end - start, valid, size, final))

    def _empty(self, j: int, final: bool, after_done: bool) -> Chunk:
        trailing = tuple(self.item_shape[1:]) if self.item_shape else ()
        known = self.item_shape is not None
        rows = self._rows(self.policy.full) if self._padded() and known else 0
        data = torch.zeros((rows, *trailing), dtype=self.dtype or torch.float32)
        start = self.produced
        return Chunk(data, ChunkInfo(j, start, 0, 0, rows, final, after_done))

    def _trim(self) -> None:
        """Drop items no future chunk needs."""
        keep_from = self.policy.span(self._next)[0]
        if self._plan is not None and self._next < len(self._plan):
            keep_from = min(keep_from, self._plan[self._next][0])
        drop = max(0, min(keep_from, self.produced) - self._base)
        if drop:
            del self._items[:drop]
            self._base += drop

    def __repr__(self) -> str:
        return (
            f"StreamBuffer({self.name!r}, {self.policy.kind}{dict(self.policy.params)}, "
            f"final={self.final}, produced={self.produced}, next={self._next}, "
            f"done={self.is_done})"
        )
