"""`wgc show`: print and draw the IR of a `.walk` file.

`render(model, fmt, walk)` is the one entry point: ``text`` (a readable dump), ``json`` (the
stable contract for tools), and drawings of the walks built from one drawing model
(`wgc.show.graph`): ``dot`` (Graphviz), ``mermaid`` and ``html`` (one self-contained page).
Every format is deterministic: the same bytes across runs and hash seeds.
"""

from __future__ import annotations

from collections.abc import Callable

from wgc.ir.model import Model

FORMATS = ("text", "json", "dot", "mermaid", "html")


def _draw(render_graph: Callable) -> Callable[[Model, str | None], str]:
    from wgc.show.graph import build_graph

    return lambda m, w: render_graph(build_graph(m, w))


def _renderer(fmt: str) -> Callable[[Model, str | None], str]:
    # imported on use, so `wgc show --format text` loads neither networkx nor jinja2
    if fmt == "text":
        from wgc.show.text import render_text

        return render_text
    if fmt == "json":
        from wgc.show.json import render_json

        return render_json
    if fmt == "dot":
        from wgc.show.dot import render_dot

        return _draw(render_dot)
    if fmt == "mermaid":
        from wgc.show.mermaid import render_mermaid

        return _draw(render_mermaid)
    from wgc.show.html import render_html

    return render_html


def render(model: Model, fmt: str = "text", walk: str | None = None) -> str:
    """``model`` (or its walk ``walk``, which must exist) in format ``fmt`` (one of `FORMATS`)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown show format `{fmt}`")
    if walk is not None and model.walk(walk) is None:
        raise KeyError(walk)
    return _renderer(fmt)(model, walk)
