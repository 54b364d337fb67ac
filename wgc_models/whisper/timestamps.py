"""Whisper's timestamp tokens (``<|0.00|>`` … ``<|30.00|>``, every id past
``<|notimestamps|>``), decoded as ``generate(return_timestamps=True)`` decodes them.

With timestamps on, the prompt ends at the task token (no ``<|notimestamps|>``), and each
step's logits, after the suppressed tokens, follow ``WhisperTimeStampLogitsProcessor``'s rules
(`timestamp_rules`), over the tokens generated so far in the window:

* ``<|notimestamps|>`` is never chosen;
* timestamps come in pairs: after a pair (or a lone one at the start) the next token is not a
  timestamp; after a lone one closing a text run, it is a timestamp or the end of text;
* timestamps do not go back: one at least as late as the last (later than it once a pair
  closed);
* the first token is a timestamp, at most ``max_initial_timestamp_index`` steps of 20 ms in;
* when the timestamps' total probability beats every text token's, a timestamp is chosen.

A timestamp token stands for ``(id - first timestamp id) * 0.02`` seconds into the window.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def timestamp_rules(
    logits: torch.Tensor,
    generated: Sequence[int],
    *,
    no_timestamps: int,
    eos: int,
    max_initial: int | None,
) -> torch.Tensor:
    """``logits`` (``[vocab]``, the suppressed tokens already at -inf) with the rules of the
    module docstring applied, given the window's ``generated`` tokens (after the prompt)."""
    out = logits.clone()
    first = no_timestamps + 1
    out[no_timestamps] = float("-inf")
    last_ts = len(generated) >= 1 and generated[-1] >= first
    pair = len(generated) < 2 or generated[-2] >= first
    if last_ts:
        if pair:
            out[first:] = float("-inf")
        else:
            out[:eos] = float("-inf")
    stamps = [t for t in generated if t >= first]
    if stamps:
        floor = stamps[-1] if last_ts and not pair else stamps[-1] + 1
        out[first:floor] = float("-inf")
    if not generated:
        out[:first] = float("-inf")
        if max_initial is not None:
            out[first + max_initial + 1 :] = float("-inf")
    logprobs = torch.log_softmax(out.float(), dim=-1)
    stamp_mass = logprobs[first:].logsumexp(dim=-1)
    if not torch.isnan(stamp_mass) and stamp_mass > logprobs[:first].max():
        out[:first] = float("-inf")
    return out
