"""The playground at ``/`` and the plan drawing at ``/plan``.

The page (``playground.html.j2``, no external scripts) offers the model's choices (which input
modalities it takes, which it emits, its options, a seed), sends the request to the native route
as NDJSON with ``trace`` on, and shows what comes back as it comes: text as it decodes, audio
played as its chunks arrive (Web Audio) and offered as a WAV at the end, images drawn, other
tensors by shape; each walk's start and finish is listed with its time and lit up in the plan
drawing (the ``wgc show --placement --format html`` page, which `wgc serve` renders when it
compiles the model and serves at ``/plan``); while it runs, every second, the node calls since
it was sent (``GET /v1/wgc/nodes``: calls, rows, milliseconds per call, per rank) are listed and
written under each call of the drawing.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import jinja2
import markupsafe

PLAN_MISSING = (
    "<!doctype html><meta charset='utf-8'><p style='font-family: system-ui'>No plan drawing: "
    "<code>wgc serve</code> draws it when it can compile the model "
    "(serve <code>MODEL.walk</code>, or a generated folder whose sources are still there).</p>"
)


def page(info: dict[str, Any]) -> str:
    here = resources.files("wgc_runtime.host.server")
    template = here.joinpath("playground.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True)
    # the JSON goes into a <script>: `<` is escaped so no string in it can close the tag
    data = json.dumps(info, sort_keys=True).replace("<", "\\u003c")
    return env.from_string(template).render(
        model=info["model"], placement=info["placement"], info_json=markupsafe.Markup(data)
    )
