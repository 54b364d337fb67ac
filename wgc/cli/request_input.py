"""What `wgc run` sends: input segments with their fields, from the command line or a JSON file.

``--input NAME=VALUE[,FIELD=VALUE...]``: a segment of modality NAME; VALUE is text or a file
(read by its suffix: `read_value`); each ``,FIELD=VALUE`` after it is a field of the segment
(a comma starts a field only when an identifier and ``=`` follow it, so text with commas stays
whole; quote the whole argument for the shell). A field's value is a file too, or a JSON
scalar or list (a list becomes an array), else the text.

``--request FILE.json``, the general form::

    {"inputs": [{"modality": "video", "data": "clip.npy",
                 "fields": {"actions": "actions.npy", "states": [[0.1, 0.2], [0.3, 0.4]]}}],
     "want": ["tensor"], "options": {"horizon": 4}, "seed": 7}

``data`` and each field value: a string names a file relative to the JSON file's folder (when
one exists there) or is text; a list is an array (float32 when any element is a float, else
int64); a number or bool stays one. ``want``, ``options`` and ``seed`` are optional; the command
line's ``--want`` / ``--option`` / ``--seed`` add to or override them.

Everything read here is bounded by the deployment's `wgc_runtime.host.inputs.Limits` (the file's
size and JSON nesting before it is parsed, each text and array after): what is over a limit or
malformed raises `wgc_runtime.host.inputs.InputError` naming the place (exit 1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wgc.cli.errors import UserError

if TYPE_CHECKING:
    from wgc_runtime.host.inputs import Limits

_FIELD = re.compile(r",(?=[A-Za-z_][A-Za-z0-9_]*=)")

Segment = tuple[str, Any, dict[str, Any]]  # (modality, data, fields)


def split_fields(flag_value: str) -> tuple[str, list[tuple[str, str]]]:
    """``'obs.png,prompt=pick it up'`` -> ``('obs.png', [('prompt', 'pick it up')])``."""
    value, *fields = _FIELD.split(flag_value)
    return value, [(f.partition("=")[0], f.partition("=")[2]) for f in fields]


def array(values: list, where: str, limits: Limits):
    """A JSON list as a numpy array: float32 when any element is a float, else int64."""
    import numpy as np

    from wgc_runtime.host.inputs import check_elements

    try:
        x = np.asarray(values)
    except (ValueError, OverflowError) as exc:  # ragged; an int past 64 bits
        raise UserError(f"{where}: not a rectangular array ({exc})") from None
    check_elements(x.size, where, limits)
    if x.dtype.kind == "f":
        return x.astype(np.float32)
    if x.dtype.kind in "iub":
        return x.astype(np.int64) if x.dtype.kind != "b" else x
    raise UserError(f"{where}: an array holds numbers, not {x.dtype.name}")


def field_value(
    text: str, read_file: Callable[[str, str], Any | None], where: str, limits: Limits
) -> Any:
    """A ``,FIELD=VALUE`` of ``--input``: a file, a JSON scalar or list, else the text."""
    from wgc_runtime.host.inputs import check_json

    got = read_file(text, where)
    if got is not None:
        return got
    raw = text.encode("utf-8", "surrogateescape")
    check_json(raw, where, limits)
    try:
        value = json.loads(raw)
    except ValueError:
        return text
    if isinstance(value, list):
        return array(value, where, limits)
    return value if isinstance(value, (int, float, bool, str)) else text


def read_request_file(
    path: str, read_file: Callable[[str, str], tuple[Any, dict[str, Any]] | None], limits: Limits
) -> dict[str, Any]:
    """The JSON request file as ``{"inputs": [Segment...], "want": [...], "options": {...},
    "seed": int | None}`` (see the module docstring); ``read_file(text, where)`` reads a file
    value as (data, fields) (None when ``text`` names no file): a segment's data file's fields
    (a WAV's ``sample_rate``) are its fields unless ``fields`` sets them."""
    from wgc_runtime.host.inputs import check_text, parse_json, read_bytes

    file = Path(path)
    raw = read_bytes(file, f"`--request {path}`", limits, "request_bytes")
    doc = parse_json(raw, f"`--request {path}`", limits)
    if not isinstance(doc, dict):
        raise UserError(f"`--request {path}`: expected an object with `inputs`")
    unknown = sorted(set(doc) - {"inputs", "want", "options", "seed"})
    if unknown:
        raise UserError(
            f"`--request {path}`: unknown key `{unknown[0]}` "
            "(a request has `inputs`, `want`, `options`, `seed`)"
        )
    base = file.parent

    def value(v: Any, where: str, found: dict[str, Any] | None = None) -> Any:
        if isinstance(v, str):
            if v and (base / v).is_file():
                got = read_file(str(base / v), where)
                if got is not None:  # a file's own fields (a WAV's `sample_rate`) go to `found`
                    data, own = got
                    if found is not None:
                        found.update(own)
                    return data
            return check_text(v, where, limits)
        if isinstance(v, list):
            return array(v, where, limits)
        if isinstance(v, (int, float, bool)) or v is None:
            return v
        raise UserError(f"{where}: expected text, a file name, a number or a list")

    inputs = doc.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise UserError(f"`--request {path}`: `inputs` must be a non-empty list of segments")
    segments: list[Segment] = []
    for i, seg in enumerate(inputs):
        where = f"`--request {path}` inputs[{i}]"
        if not isinstance(seg, dict) or not isinstance(seg.get("modality"), str):
            raise UserError(f"{where}: expected an object with a `modality` string")
        extra = sorted(set(seg) - {"modality", "data", "fields"})
        if extra:
            raise UserError(f"{where}: unknown key `{extra[0]}` (modality, data, fields)")
        fields = seg.get("fields", {})
        if not isinstance(fields, dict):
            raise UserError(f"{where}.fields: expected an object")
        own: dict[str, Any] = {}
        data = value(seg.get("data"), f"{where}.data", own)
        given = {str(k): value(v, f"{where}.fields.{k}") for k, v in fields.items()}
        segments.append((seg["modality"], data, {**own, **given}))
    want = doc.get("want", [])
    if not isinstance(want, list) or not all(isinstance(w, str) for w in want):
        raise UserError(f"`--request {path}`: `want` must be a list of modality names")
    options = doc.get("options", {})
    if not isinstance(options, dict):
        raise UserError(f"`--request {path}`: `options` must be an object")
    seed = doc.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise UserError(f"`--request {path}`: `seed` must be an integer")
    return {"inputs": segments, "want": want, "options": options, "seed": seed}
