"""What a client of the conductor deals in: an `Output`, a failure (`ErrorInfo`,
`RequestFailed`, `RequestTimeout`), an input segment as sent (`segment_wire`), and why an address
cannot be reached (`unreachable`). `wgc_runtime.host.client` re-exports them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wgc_runtime.contract import control as c

if TYPE_CHECKING:
    import torch


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
