"""The speculative draft's decode call as a captured call (`Draft.static_step`): its `token`
input is bounded (`i64[<=k + 1]`: what the target accepted), so the runtime gives the step that
value padded to the bound with its length (`wgc_runtime.contract.capture`, bounded ports).

In the steady state the draft's sequence holds the committed tokens and its own guesses but the
last; what the target accepted then adds one or two tokens it has not fed (its own next token,
and the draft's last guess when every guess was accepted): the tail of `token`. So a call is
``k + 1`` one-token steps of the engine's static decode unit: two feed steps (the first one
unused, writing to the padding slot, when one token is new), then ``k - 1`` steps feeding each
guess back; the guesses are the greedy choices after the last fed token and after each guess.

* ``admits`` (host, before anything changes): every row feeds one or two tokens, a tail of its
  `token`; otherwise the call runs `forward`.
* ``prepare_batch`` (host): `draft.rewind` (the rejected guesses leave the KV), the slots of the
  fed tokens and of the ``k - 1`` guesses appended to the sequence, and per step the buffers
  ``slots``, ``positions``, ``kv_lens`` (``[k + 1]`` each) and the page table.
* ``fn`` (static): the ``k + 1`` decode steps, the fed tokens read from the padded `token` at its
  length; ``proposal``.
* ``finish`` (host): the guesses the sequence now holds (all but the last) join ``ids``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from wgc_models.layers.host_values import int_rows
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep, length_key
from wgc_runtime.contract.node import NodeError, Work

if TYPE_CHECKING:
    from wgc_models.llama.draft import Draft


def fed(w: Work) -> int:
    """How many tokens `draft.rewind` would feed for the request's call (nothing changed), or
    0 when that is not a tail of one or two of its `token` (then the call runs `forward`)."""
    st, token = w.ctx.state, w.inputs.get("token")
    if token is None or "seq" not in st:
        return 0
    new = [int(t) for t in token.reshape(-1)]
    seq, ids = st["seq"] + new, st.get("ids", [])
    keep, limit = 0, min(len(ids), len(seq) - 1)
    while keep < limit and ids[keep] == seq[keep]:
        keep += 1
    n = len(seq) - keep
    return n if 1 <= n <= min(2, len(new)) else 0


def draft_step(draft: Draft, call: CapturedCall) -> StaticStep | None:
    """``draft``'s decode call as a static step (see the module docstring)."""
    from wgc_models.llama.draft import rewind, room

    if call.kv is None or set(call.inputs) != {"token"}:
        return None
    k = draft.k
    engine = draft.engine(call.kv)
    width = engine.width_for(draft.kv_tokens)  # `room` keeps every sequence within it
    engine.decode_buffers(width)  # the padding page and the rope tables, before any capture
    pad_slot, pad_page = engine.pad_slot, engine.pad_slot // engine.pool.page_size
    unit = engine.unit_for(call.backend)

    def admits(works: Sequence[Work]) -> bool:
        return all(fed(w) for w in works)

    def prepare_batch(
        works: Sequence[Work],
    ) -> tuple[dict[str, torch.Tensor], dict[int, BaseException]]:
        n = len(works)
        slots = torch.full((n, k + 1), pad_slot, dtype=torch.int64)
        positions = torch.zeros((n, k + 1), dtype=torch.int64)
        kv_lens = torch.ones((n, k + 1), dtype=torch.int32)
        tables = torch.full((n, width), pad_page, dtype=torch.int32)
        failed: dict[int, BaseException] = {}
        live: list[int] = []
        for i, w in enumerate(works):
            kv, token = w.ctx.kv, w.inputs.get("token")
            try:
                if kv is None or token is None:  # `admits` saw the token
                    raise NodeError(f"node `{draft.name}`'s decode call has no KV cache or token")
                feed = rewind(kv, w.ctx.state, [int(t) for t in token.reshape(-1)])
                room(draft.name, kv, len(feed) + k, draft.kv_tokens)
            except NodeError as exc:  # fails its request only
                failed[i] = exc
                continue
            live.append(i)
            request, label = kv.request, kv.labels[0]
            start = engine.pool.seq_len(request, label)
            got = engine.pool.append_slots(request, label, len(feed) + k - 1)
            first = 2 - len(feed)  # the steps that feed a token: from `first` on
            slots[i, first:] = torch.tensor(got)
            positions[i, first:] = torch.arange(start, start + len(got))
            kv_lens[i, first:] = torch.arange(start + 1, start + len(got) + 1, dtype=torch.int32)
            pages = engine.pool.page_table(request, label)
            tables[i, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
        pick = torch.tensor(live, dtype=torch.int64)
        extra = {
            "slots": slots[pick],
            "positions": positions[pick],
            "kv_lens": kv_lens[pick],
            "block_tables": tables[pick],
        }
        return extra, failed

    def fn(ports: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        token, n_in = ports["token"], ports[length_key("token")]  # [B, k + 1], [B]
        last = token.gather(1, (n_in - 1).clamp(min=0)[:, None]).reshape(-1)
        before = token.gather(1, (n_in - 2).clamp(min=0)[:, None]).reshape(-1)
        feeds = [before, last]
        guesses: list[torch.Tensor] = []
        for j in range(k + 1):
            out = unit(
                {
                    "tokens": feeds[j] if j < 2 else guesses[-1],
                    "positions": ports["positions"][:, j],
                    "slots": ports["slots"][:, j],
                    "kv_lens": ports["kv_lens"][:, j],
                    "block_tables": ports["block_tables"],
                }
            )
            if j >= 1:
                guesses.append(out["next_token"].reshape(-1))
        return {"proposal": torch.stack(guesses, 1)}

    def finish(works: Sequence[Work], outputs: Mapping[str, torch.Tensor]) -> None:
        for w, guess in zip(works, int_rows(outputs["proposal"]), strict=True):
            w.ctx.state["ids"].extend(guess[:-1])
        draft.counts["calls"] += len(works)
        draft.counts["captured"] += len(works)

    extra = {
        "slots": StaticPort((k + 1,), "i64", pad_slot),
        "positions": StaticPort((k + 1,), "i64"),
        "kv_lens": StaticPort((k + 1,), "i32", 1),
        "block_tables": StaticPort((width,), "i32", pad_page),
    }
    return StaticStep(fn=fn, extra=extra, prepare_batch=prepare_batch, finish=finish, admits=admits)
