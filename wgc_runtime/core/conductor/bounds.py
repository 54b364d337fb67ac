"""The door's bounds on values a declared type allows but the model cannot run: checked for
every request (`door.check`), so the HTTP routes, the ZeroMQ client port and `wgc run` refuse
them alike, before admission, instead of a node failing on them later (a 500).

* **Token limits**: an int option named ``max_tokens`` (or ``max_*_tokens``) is at least 1 and,
  when the model declares ``param kv_tokens`` (what one request may hold per KV label), at most
  that: a larger limit can never be reached, the cache fills first.
* **Prompt tokens**: the ``text`` segments' tokens (a string's UTF-8 bytes, the stand-in byte
  tokenizer's; an integer array's elements) fit in ``kv_tokens``.
* **Token ids**: a ``text`` segment given as integer ids holds ids within ``[0, V)``, ``V`` the
  model's ``param text_vocab``, else ``param vocab`` (any id at least 0 when it declares neither).
* **Sampling values**: float options named ``temperature`` (or ``*_temperature``) lie in
  [0, `MAX_TEMPERATURE`], ``top_p`` in (0, 1], ``repetition_penalty`` in (0,
  `MAX_PENALTY`]: finite (the door's type check) is not enough, ``1e308`` overflows the logits.

Pure, like the door: no I/O, and no torch import (arrays are read through numpy, a tensor only
when the caller already imported torch).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from wgc_runtime.contract.conductor import ConductorSpec
from wgc_runtime.contract.flow import Request, SimpleRequest
from wgc_runtime.contract.kinds import OptionType

MAX_TEMPERATURE = 100.0
MAX_PENALTY = 100.0


def capacity(spec: ConductorSpec) -> int | None:
    """The tokens one request may hold (``param kv_tokens``), when the model says."""
    value = dict(spec.params).get("kv_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def vocabulary(spec: ConductorSpec) -> int | None:
    """How many text token ids there are (``param text_vocab``, else ``vocab``)."""
    params = dict(spec.params)
    for name in ("text_vocab", "vocab"):
        value = params.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def token_limit(name: str) -> bool:
    """Whether option ``name`` bounds the tokens a request decodes."""
    return name == "max_tokens" or (name.startswith("max_") and name.endswith("_tokens"))


def bounds(spec: ConductorSpec, request: Request) -> list[tuple[str, str]]:
    """Every ``(field, why)`` of ``request`` past a bound (see the module docstring)."""
    out: list[tuple[str, str]] = []
    if isinstance(request, SimpleRequest):
        out += _options(spec, request.options)
    out += _text(spec, request)
    return out


def _options(spec: ConductorSpec, given: Mapping[str, Any]) -> list[tuple[str, str]]:
    declared = {o.name: o.type for o in spec.options}
    kv = capacity(spec)
    out: list[tuple[str, str]] = []
    for name, value in given.items():
        kind = declared.get(name)
        if kind is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue  # undeclared or ill-typed: the door's type check says so
        where = f"options.{name}"
        if kind is OptionType.INT and token_limit(name):
            if value < 1:
                out.append((where, f"got `{value}`: a token limit is at least 1"))
            elif kv is not None and value > kv:
                out.append(
                    (where, f"got `{value}`: at most {kv}, the tokens one request may hold "
                            "(`kv_tokens`)")
                )  # fmt: skip
        elif kind is OptionType.FLOAT:
            why = _sampling(name, float(value))
            if why:
                out.append((where, f"got `{value:g}`: {why}"))
    return out


def _sampling(name: str, value: float) -> str:
    if value != value:  # NaN (the type check refuses it too)
        return "a number"
    if name == "temperature" or name.endswith("_temperature"):
        ok = 0.0 <= value <= MAX_TEMPERATURE
        return "" if ok else f"a temperature lies in [0, {MAX_TEMPERATURE:g}]"
    if name == "top_p" or name.endswith("_top_p"):
        return "" if 0.0 < value <= 1.0 else "top_p lies in (0, 1]"
    if name == "repetition_penalty" or name.endswith("_repetition_penalty"):
        ok = 0.0 < value <= MAX_PENALTY
        return "" if ok else f"a repetition penalty lies in (0, {MAX_PENALTY:g}]"
    return ""


def _text(spec: ConductorSpec, request: Request) -> list[tuple[str, str]]:
    kv, vocab = capacity(spec), vocabulary(spec)
    out: list[tuple[str, str]] = []
    total = 0
    for i, seg in enumerate(request.inputs):
        if seg.modality != "text":
            continue
        data = seg.data
        if isinstance(data, str):
            total += len(data.encode("utf-8", "surrogatepass"))
            continue
        ids = _int_array(data)
        if ids is None:
            continue  # not token ids: the type check's concern
        total += int(ids.size)
        if ids.size:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or (vocab is not None and high >= vocab):
                bad = low if low < 0 else high
                allowed = f"[0, {vocab})" if vocab is not None else "at least 0"
                out.append((f"inputs[{i}].data", f"token id {bad} is not in {allowed}"))
    if kv is not None and total > kv:
        out.append(
            ("inputs", f"the prompt is {total:,} tokens, over the {kv:,} one request may hold "
                       "(`kv_tokens`)")
        )  # fmt: skip
    return out


def _int_array(data: Any) -> Any:
    """``data`` as an integer numpy array, or None when it is not one."""
    import numpy as np

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(data, torch.Tensor):
        if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool:
            return None
        return data.detach().reshape(-1).cpu().numpy()
    if isinstance(data, bool | float | str | bytes) or data is None:
        return None
    try:
        x = np.asarray(data)
    except (ValueError, TypeError, OverflowError):
        return None
    return x.reshape(-1) if x.dtype.kind in "iu" else None
