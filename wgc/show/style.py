"""How each edge kind is drawn, in one table every renderer (dot, mermaid, html) reads.

A kind's `dash` is ``solid``, ``dashed`` or ``dotted``; `back` edges (loop-carried) are drawn
curving backwards against the layout direction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EdgeStyle:
    color: str
    dash: str  # "solid" | "dashed" | "dotted"
    back: bool
    legend: str


EDGE_STYLES: dict[str, EdgeStyle] = {
    "input": EdgeStyle("#6b7280", "solid", False, "walk input → port"),
    "internal": EdgeStyle("#1f2937", "solid", False, "channel within one iteration"),
    "loop_init": EdgeStyle("#15803d", "dotted", False, "initial value of a loop-carried channel"),
    "loop_carried": EdgeStyle("#ea580c", "dashed", True, "iteration i → iteration i+1"),
    "loop_invariant": EdgeStyle(
        "#2563eb", "dotted", False, "bound before the loop, read every iteration"
    ),
    "terminal": EdgeStyle("#7c3aed", "solid", False, "yield last: the final iteration's value"),
    "accumulated": EdgeStyle("#a21caf", "solid", False, "yield all: every iteration, stacked"),
    "emitted": EdgeStyle("#dc2626", "solid", False, "emit to the client (modality)"),
    "persisted": EdgeStyle("#92400e", "dashed", False, "persist for later walks"),
    "streamed": EdgeStyle("#0d9488", "dashed", False, "stream, chunked by its policy"),
}


def style(kind: str) -> EdgeStyle:
    return EDGE_STYLES.get(kind, EDGE_STYLES["internal"])
