"""What a client of the conductor deals in: a request's `Stream` of `Output`s, a failure
(`ErrorInfo`, `RequestFailed`, `RequestTimeout`), an input segment as sent (`segment_wire`), and
why an address cannot be reached (`unreachable`). `wgc_runtime.host.client` re-exports them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract import control as c

if TYPE_CHECKING:
    import torch

    from wgc_runtime.host.client import Client


@dataclass(frozen=True, slots=True)
class Output:
    """One emitted value: ``iteration`` has one entry per loop around the `emit`."""

    request: str
    flow: str
    walk: str
    modality: str
    channel: str
    value: torch.Tensor | None
    iteration: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """Why a request failed: a `FailKind`, the message, where; ``cause``: for a node's failure,
    ``input`` (the node refused a value of the request) or ``internal``."""

    kind: str
    message: str
    flow: str | None = None
    walk: str | None = None
    node: str | None = None
    cause: str | None = None

    def __str__(self) -> str:
        where = ", ".join(
            f"{k} `{v}`"
            for k, v in (("node", self.node), ("walk", self.walk), ("flow", self.flow))
            if v
        )
        return f"{self.message} ({where})" if where and "`" not in self.message else self.message


class RequestFailed(RuntimeError):
    def __init__(self, error: ErrorInfo) -> None:
        super().__init__(str(error))
        self.error = error


class RequestTimeout(RequestFailed):
    pass


@dataclass
class Stream:
    """The outputs of one request, as they arrive (`wgc_runtime.host.client`'s docstring)."""

    client: Client
    rid: str
    deadline: float | None  # monotonic
    queued: bool = False
    submitted: float = 0.0  # monotonic
    done: bool = False
    error: ErrorInfo | None = None
    direct: int = 0  # its number for direct outputs (`rank_links`); 0: through the conductor
    received: int = 0  # the outputs the ranks sent it directly, so far
    expect: int | None = None  # how many there are: it finished, and waits for the rest
    finished_at: float = 0.0  # monotonic: when its `Finished` came
    drops: int = 0  # `RankLinks.drops` when it was sent (`RankLinks.loss`)
    _buffer: list[Output] = field(default_factory=list[Output])

    def __iter__(self) -> Iterator[Output]:
        while True:
            while self._buffer:
                yield self._buffer.pop(0)
            if self.done:
                if self.error is not None:
                    raise (RequestTimeout if self.error.kind == "timeout" else RequestFailed)(
                        self.error
                    )
                return
            self.client._pump(self)  # pyright: ignore[reportPrivateUsage]

    def collect(self) -> list[Output]:
        return list(self)

    def cancel(self) -> None:
        self.client.cancel(self.rid)


def segment_wire(seg: Any) -> c.InputSegment:
    """An input segment as sent: ``(modality, data)``, ``(modality, data, fields)``, a
    ``Segment`` or a dict. numpy arrays travel as tensors."""
    if isinstance(seg, Mapping):
        modality, data, fields = seg["modality"], seg.get("data"), dict(seg.get("fields", {}))
    elif hasattr(seg, "modality"):
        modality, data, fields = seg.modality, seg.data, dict(seg.fields)
    else:
        modality, data, *rest = seg
        fields = dict(rest[0]) if rest else {}
    return c.InputSegment(
        str(modality), plain_value(data), {str(k): plain_value(v) for k, v in fields.items()}
    )


def plain_value(v: Any) -> Any:
    if type(v).__module__ == "numpy" and hasattr(v, "dtype"):  # an array: sent as a tensor
        import numpy as np
        import torch

        return torch.from_numpy(np.ascontiguousarray(v))
    return v


def unreachable(address: str) -> str:
    """Why nothing accepts a connection to ``address``: an ``ipc://`` port another user's
    private folder hides (WG893), or no conductor there."""
    folder = os.path.dirname(address.removeprefix("ipc://"))
    if address.startswith("ipc://") and os.path.isdir(folder) and not os.access(folder, os.X_OK):
        return (
            f"WG893: cannot reach the conductor at {address}: its client port is in the "
            "deployment's private folder, which only the user who started it may open (run "
            "the client as that user, or start the deployment with `WGC_CLIENT_PORT=curve` and "
            "give the client its key)"
        )
    return (
        f"cannot reach the conductor at {address}: nothing accepts the connection there (it "
        "stopped or crashed, or the address is wrong)"
    )
