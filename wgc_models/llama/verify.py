"""The speculative target's verify step as a captured call (`Target.static_step`): its `accepted`
port is bounded (`i64[<=k + 1]`), so the runtime gives the step its `token` input padded to the
bound with its length, and cuts the `accepted` it returns back to the length the step chose
(`wgc_runtime.contract.capture`, bounded ports).

* ``admits`` (host, before anything changes): the batch runs here when every running row feeds
  exactly one committed token before its ``k`` guesses (the steady state: the target's own last
  choice); otherwise the call runs `forward` (the ragged engine step).
* ``prepare_batch`` (host): per row, the reply's bookkeeping (`Target.begin`: the accepted
  tokens join the committed sequence, the rejected guesses leave the KV) and ``k + 1`` KV slots
  appended to the sequence: the buffers ``slots``, ``positions``, ``kv_lens`` (``[k + 1]`` each),
  the page table ``block_tables``, and ``budget`` (tokens the reply may still take) and ``done``
  (the reply is complete: no step).
* ``fn`` (static, no host read): the engine's static decode unit ``k + 1`` times (the last
  committed token, read at its length from the padded `token`, then each guess), the greedy
  choice after each, how many guesses agree, and the emission (those guesses and the target's
  own next token, cut before an end-of-sequence token and at the budget) padded to ``k + 1``,
  with its length under ``accepted:len``, and ``stop``.
* ``finish`` (host): the counters, what the KV holds, and whether an end-of-sequence token ended
  the reply (`agreed`, on the same choices read back once per batch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from wgc_models.layers.host_values import int_rows
from wgc_runtime.contract.capture import CapturedCall, StaticPort, StaticStep, length_key
from wgc_runtime.contract.node import NodeError, Work

if TYPE_CHECKING:
    from wgc_models.llama.draft import Target


def agreed(chosen: Sequence[int], guess: Sequence[int]) -> int:
    """How many of the draft's guesses, in order, equal the target's greedy choices."""
    n = 0
    while n < len(guess) and guess[n] == chosen[n]:
        n += 1
    return n


def feeds_one(w: Work) -> bool:
    """Whether the request's next verify feeds one committed token (what `draft.rewind` would
    feed, computed without changing anything)."""
    st = w.ctx.state
    token = w.inputs.get("token")
    if token is None:
        return False
    seq = st.get("seq", []) + [int(t) for t in token.reshape(-1)]
    ids = st.get("ids", [])
    keep, limit = 0, min(len(ids), len(seq) - 1)
    while keep < limit and ids[keep] == seq[keep]:
        keep += 1
    return len(seq) - keep == 1


def verify_step(target: Target, call: CapturedCall) -> StaticStep | None:
    """``target``'s verify call as a static step (see the module docstring)."""
    if call.kv is None:
        return None
    k, eos = target.k, target.eos
    engine = target.engine(call.kv)
    width = engine.width_for(target.kv_tokens)  # `room` keeps every sequence within it
    engine.decode_buffers(width)  # the padding page and the rope tables, before any capture
    pad_slot, pad_page = engine.pad_slot, engine.pad_slot // engine.pool.page_size
    unit = engine.unit_for(call.backend)

    def admits(works: Sequence[Work]) -> bool:
        return all(feeds_one(w) for w in works if not target.complete(w))

    def prepare_batch(
        works: Sequence[Work],
    ) -> tuple[dict[str, torch.Tensor], dict[int, BaseException]]:
        n = len(works)
        slots = torch.full((n, k + 1), pad_slot, dtype=torch.int64)
        positions = torch.zeros((n, k + 1), dtype=torch.int64)
        kv_lens = torch.ones((n, k + 1), dtype=torch.int32)
        tables = torch.full((n, width), pad_page, dtype=torch.int32)
        budget = torch.zeros(n, dtype=torch.int64)
        done = torch.zeros(n, dtype=torch.bool)
        failed: dict[int, BaseException] = {}
        live: list[int] = []
        for i, w in enumerate(works):
            try:
                step = target.begin(w)
            except NodeError as exc:  # a full sequence fails its request only
                failed[i] = exc
                continue
            live.append(i)
            if step is None:
                done[i] = True
                continue
            (request, label), feed = step
            if len(feed) != k + 1:  # `admits` saw to it
                raise NodeError(f"a verify step fed {len(feed)} tokens, expected {k + 1}")
            start = engine.pool.seq_len(request, label)
            slots[i] = torch.tensor(engine.pool.append_slots(request, label, k + 1))
            positions[i] = torch.arange(start, start + k + 1)
            kv_lens[i] = torch.arange(start + 1, start + k + 2, dtype=torch.int32)
            pages = engine.pool.page_table(request, label)
            tables[i, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
            budget[i] = target.max_new - w.ctx.state["emitted"]
            w.ctx.state["verify"] = [int(t) for t in feed[1:]]  # the guesses
        pick = torch.tensor(live, dtype=torch.int64)
        extra = {
            "slots": slots[pick],
            "positions": positions[pick],
            "kv_lens": kv_lens[pick],
            "block_tables": tables[pick],
            "budget": budget[pick],
            "done": done[pick],
        }
        return extra, failed

    def fn(ports: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        token, n_in = ports["token"], ports[length_key("token")]  # [B, k + 1], [B]
        guess = ports["proposal"]  # [B, k]
        last = token.gather(1, (n_in - 1).clamp(min=0)[:, None])  # [B, 1]
        fed = torch.cat([last, guess], 1)  # [B, k + 1]
        chosen: list[torch.Tensor] = []
        for j in range(k + 1):  # one static decode step per fed token
            out = unit(
                {
                    "tokens": fed[:, j],
                    "positions": ports["positions"][:, j],
                    "slots": ports["slots"][:, j],
                    "kv_lens": ports["kv_lens"][:, j],
                    "block_tables": ports["block_tables"],
                }
            )
            chosen.append(out["next_token"].reshape(-1))
        choice = torch.stack(chosen, 1)  # [B, k + 1]
        budget, done = ports["budget"], ports["done"]
        pos = torch.arange(k + 1, device=choice.device)
        n = (guess == choice[:, :k]).to(torch.int64).cumprod(1).sum(1)  # guesses agreed
        ends = (choice == eos) & (pos <= n[:, None])
        first_end = torch.where(ends, pos, k + 1).min(1).values  # k + 1: no end chosen
        length = torch.minimum(torch.minimum(n + 1, first_end), budget.clamp(min=0))
        emitted = torch.where(done[:, None], torch.cat([last, choice[:, 1:]], 1), choice)
        length = torch.where(done, torch.ones_like(length), length)
        return {
            "accepted": torch.where(pos < length[:, None], emitted, 0),
            length_key("accepted"): length,
            "stop": done | (length == 0),
            "accepted:choice": choice,  # for `finish`
        }

    def finish(works: Sequence[Work], outputs: Mapping[str, torch.Tensor]) -> None:
        choices = int_rows(outputs["accepted:choice"])  # one host read for the batch
        for w, chosen in zip(works, choices, strict=True):
            st = w.ctx.state
            guess = st.pop("verify", None)
            if guess is None:  # complete: no step ran
                continue
            n = agreed(chosen, guess)
            target.count(len(guess), n, captured=True)
            st["ids"] = st["seq"] + guess  # what the KV holds; the next `rewind` cuts it back
            if eos in chosen[: n + 1]:
                st["done"] = True

    extra = {
        "slots": StaticPort((k + 1,), "i64", pad_slot),
        "positions": StaticPort((k + 1,), "i64"),
        "kv_lens": StaticPort((k + 1,), "i32", 1),
        "block_tables": StaticPort((width,), "i32", pad_page),
        "budget": StaticPort((), "i64"),
        "done": StaticPort((), "bool", True),
    }
    return StaticStep(fn=fn, extra=extra, prepare_batch=prepare_batch, finish=finish, admits=admits)
