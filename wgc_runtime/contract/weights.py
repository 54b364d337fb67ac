"""What a node's weights will take, said before they are built (`Node.weights`).

The launcher (`wgc run` / `wgc serve`) asks every node class of a rank for its weights before it
starts the rank, so a placement whose weights cannot fit its device, or that would build billions
of random parameters because no checkpoint was named, stops at the door with the numbers instead
of minutes later in a traceback.

A node returns one `WeightParts` record per set of weights it holds. Nodes of one process that
share weights (a ``like`` copy, a vision tower and the policy cut from one file) return parts
with the same ``key``, counted once per rank. ``params`` is the count at the node's configured
sizes; ``dtype_bytes`` what one parameter takes on the device (the node's compute dtype, not the
checkpoint's). When ``checkpoint`` names the files the part is loaded from, the launcher counts
the parameters there instead (the tensors whose names contain one of ``names``, every tensor
when there is none, minus those containing one of ``skip``), reading only the files'
headers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class WeightParts:
    """One set of weights a node holds (module docstring)."""

    key: str
    params: int
    dtype_bytes: int
    checkpoint: str = ""
    names: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return self.params * self.dtype_bytes
