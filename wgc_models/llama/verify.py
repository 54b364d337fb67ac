"""The speculative target's verify step as a captured call (`Target.static_step`): its `accepted`
port is bounded (`i64[<=k + 1]`), so the runtime gives the step its `token` input padded to the
bound with its length, and cuts the `accepted` it returns back to the length the step chose
(`wgc_runtime.contract.capture`, bounded ports).

* ``prepare_batch`` (host): per row, the reply's bookkeeping and the target's model step: the
  accepted tokens join the committed sequence (`draft.rewind`: the KV sequence drops the
  rejected guesses), then the last committed token and the ``k`` guesses are fed in one ragged
  engine step, and the greedy ``choice`` after each is the extra buffer ``choice`` (``[k + 1]``);
  ``budget`` is how many tokens the reply may still take, ``done`` that it is complete.
* ``fn`` (static, no host read): how many guesses agree with the choices, the emission (those
  guesses and the target's own next token, cut before an end-of-sequence token and at the
  budget) padded to ``k + 1``, its length under ``accepted:len``, and ``stop``.
* ``finish`` (host): the counters and whether an end-of-sequence token ended the reply, from the
  same choices (`agreed`).

What is not static: the model step itself runs in ``prepare_batch`` through the engine's ragged
forward (``k + 1`` tokens per row; the engine's captured unit decodes one token per row).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch

from wgc_runtime.contract.capture import StaticPort, StaticStep, length_key
from wgc_runtime.contract.node import NodeError, Work

if TYPE_CHECKING:
    from wgc_models.llama.draft import Target


def agreed(chosen: Sequence[int], guess: Sequence[int]) -> int:
    """How many of the draft's guesses, in order, equal the target's greedy choices."""
    n = 0
    while n < len(guess) and guess[n] == chosen[n]:
        n += 1
    return n


def verify_step(target: Target) -> StaticStep:
    """``target``'s verify call as a static step (see the module docstring)."""
    k, eos = target.k, target.eos
    accepted_len = length_key("accepted")

    def prepare_batch(works: Sequence[Work]) -> tuple[dict[str, torch.Tensor], dict]:
        n = len(works)
        choice = torch.zeros((n, k + 1), dtype=torch.int64)
        budget = torch.zeros(n, dtype=torch.int64)
        done = torch.zeros(n, dtype=torch.bool)
        failed: dict[int, BaseException] = {}
        live, rows, seqs, feeds = [], [], [], []
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
            seq, feed = step
            rows.append(i)
            seqs.append(seq)
            feeds.append(feed)
            budget[i] = target.max_new - w.ctx.state["emitted"]
        if rows:
            kv = works[rows[0]].ctx.kv
            assert kv is not None  # `begin` checked it
            logits = target.engine(kv).forward(seqs, feeds, all_logits=True)
            for i, lg, feed in zip(rows, logits, feeds, strict=True):
                choice[i] = lg[-k - 1 :].argmax(-1).cpu()
                guess = [int(t) for t in feed[-k:]]  # the feed ends with the guesses
                works[i].ctx.state["verify"] = ([int(t) for t in choice[i]], guess)
        pick = torch.tensor(live, dtype=torch.int64)
        extra = {"choice": choice[pick], "budget": budget[pick], "done": done[pick]}
        return extra, failed

    def fn(ports: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        token, n_in = ports["token"], ports[length_key("token")]  # [B, k + 1], [B]
        choice, guess = ports["choice"], ports["proposal"]  # [B, k + 1], [B, k]
        budget, done = ports["budget"], ports["done"]
        pos = torch.arange(k + 1, device=choice.device)
        n = (guess == choice[:, :k]).to(torch.int64).cumprod(1).sum(1)  # guesses agreed
        ends = (choice == eos) & (pos <= n[:, None])
        first_end = torch.where(ends, pos, k + 1).min(1).values  # k + 1: no end chosen
        length = torch.minimum(torch.minimum(n + 1, first_end), budget.clamp(min=0))
        last = token.gather(1, (n_in - 1).clamp(min=0)[:, None])  # a complete reply's token
        emitted = torch.where(done[:, None], torch.cat([last, choice[:, 1:]], 1), choice)
        length = torch.where(done, torch.ones_like(length), length)
        return {
            "accepted": torch.where(pos < length[:, None], emitted, 0),
            accepted_len: length,
            "stop": done | (length == 0),
        }

    def finish(works: Sequence[Work], outputs: Mapping[str, torch.Tensor]) -> None:
        del outputs
        for w in works:
            st = w.ctx.state
            verified = st.pop("verify", None)
            if verified is None:  # complete: no step ran
                continue
            chosen, guess = verified
            n = agreed(chosen, guess)
            target.count(len(guess), n)
            st["ids"] = st["seq"] + guess  # what the KV holds; the next `rewind` cuts it back
            if eos in chosen[: n + 1]:
                st["done"] = True

    extra = {
        "choice": StaticPort((k + 1,), "i64"),
        "budget": StaticPort((), "i64"),
        "done": StaticPort((), "bool", True),
    }
    return StaticStep(fn=fn, extra=extra, prepare_batch=prepare_batch, finish=finish)
