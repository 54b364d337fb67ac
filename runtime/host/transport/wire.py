"""The compact wire form of runtime messages: positional lists instead of ``to_wire()`` dicts.

A process hop used to turn each message into a dict with string keys (`Message.to_wire`, a
``dataclasses.replace`` to swap the tensor out and back in), msgpack it, and rebuild the dict and
then the dataclass on the other side: ~24 µs per hop, more than the raw ZeroMQ hop. Here a
message is ``[code, field_0, ..., field_n]`` in its dataclass field order (one C-level
``attrgetter`` call), its tensor left in place for the codec (`codec.encode` turns it into an
inline extension value, an arena descriptor or a frame), and a *batch* of messages for one peer
is one msgpack array of such lists: one ZeroMQ send per peer per loop turn.

Same meaning as `Message.to_wire` / `messages.from_wire` (what a `from_wire(to_wire(m))` round
trip gives, this gives): every field but ``data`` and ``dests`` comes back with lists turned into
tuples, ``dests`` are `Dest` dataclasses, ``data`` arrives as sent (a tensor where one was
sent). Codes are positions in `messages.MESSAGES`: both ends run the same code. Nothing here
pickles: unknown codes and wrong field counts are `CodecError`.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

from wgc_runtime.contract import messages as m
from wgc_runtime.contract.spec import Dest
from wgc_runtime.host.transport.codec import CodecError


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    cls: type[m.Message]
    code: int
    get: Any  # attrgetter of every field, in order
    size: int  # number of fields
    data: int  # index of the ``data`` field, or -1
    dests: int  # index of the ``dests`` field, or -1


def _kind(code: int, cls: type[m.Message]) -> _Kind:
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    get = operator.attrgetter(*names) if len(names) > 1 else (lambda msg: (getattr(msg, names[0]),))
    index = {n: i for i, n in enumerate(names)}
    return _Kind(cls, code, get, len(names), index.get("data", -1), index.get("dests", -1))


KINDS: list[_Kind] = [_kind(i, cls) for i, cls in enumerate(m.MESSAGES.values())]
_BY_CLASS: dict[type, _Kind] = {k.cls: k for k in KINDS}


def pack(msg: m.Message) -> list[Any]:
    """``[code, *fields]``; a tensor in ``data`` stays a tensor (the codec encodes it)."""
    kind = _BY_CLASS[type(msg)]
    out = [kind.code, *kind.get(msg)]
    if kind.dests >= 0:
        out[kind.dests + 1] = [dataclasses.asdict(d) for d in out[kind.dests + 1]]
    return out


def unpack(item: Any) -> m.Message:
    """The message `pack` made ``item`` from (after a msgpack round trip)."""
    try:
        kind = KINDS[item[0]]
    except (TypeError, IndexError, KeyError):
        raise CodecError(f"unknown message code {item[0] if item else None!r}") from None
    if len(item) != kind.size + 1:
        raise CodecError(f"{kind.cls.__name__}: {len(item) - 1} fields, expected {kind.size}")
    values = [_tuple(v) if v.__class__ is list else v for v in item[1:]]
    if kind.data >= 0:
        values[kind.data] = item[kind.data + 1]  # data arrives as sent (lists stay lists)
    if kind.dests >= 0:
        values[kind.dests] = tuple(
            Dest(**{**d, "ranks": tuple(d["ranks"])}) for d in item[kind.dests + 1]
        )
    try:
        return kind.cls(*values)
    except TypeError as exc:
        raise CodecError(f"bad {kind.cls.__name__}: {exc}") from None


def _tuple(v: Any) -> Any:
    if v.__class__ is list:
        return tuple(_tuple(x) for x in v)
    return v
