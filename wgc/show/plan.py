"""`wgc show --placement`: the plan in every `wgc show` format.

`render_plan(plan, fmt)`: ``text`` (a table per rank and the cross-rank transfers,
`wgc.show.plan_text`), ``json`` (`Plan.to_json()`, the stable contract), and drawings of the
placed plan (`wgc.show.plan_graph`) with ranks as clusters: ``dot``, ``mermaid`` and ``html``.
Deterministic like the IR views: the same bytes across runs and hash seeds.
"""

from __future__ import annotations

from wgc.lower.plan import Plan
from wgc.show import FORMATS


def render_plan(plan: Plan, fmt: str = "text") -> str:
    if fmt not in FORMATS:
        raise ValueError(f"unknown show format `{fmt}`")
    if fmt == "text":
        from wgc.show.plan_text import render_plan_text

        return render_plan_text(plan)
    if fmt == "json":
        return plan.to_json()
    from wgc.show import plan_graph

    if fmt == "dot":
        return plan_graph.render_plan_dot(plan)
    if fmt == "mermaid":
        return plan_graph.render_plan_mermaid(plan)
    from wgc.show.plan_html import render_plan_html

    return render_plan_html(plan)
