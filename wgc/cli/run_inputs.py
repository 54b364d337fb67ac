"""`wgc run`'s inputs and options, read and bounded at the edge: ``--input NAME=VALUE[,FIELD=...]``
(a file by its suffix, else text), ``--option`` values, ``--limit`` (`wgc_runtime.host.inputs`),
and ``-o OUTDIR`` checked before anything runs. `wgc serve` shares ``--limit``."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wgc.cli.errors import UserError
from wgc.cli.request_input import field_value, split_fields

if TYPE_CHECKING:
    from wgc_runtime.host.inputs import Limits


def parse_value(text: str) -> Any:
    """An option value: JSON scalars (``3``, ``0.5``, ``true``, ``null``), else the string."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser: text
        return text
    return value if isinstance(value, (int, float, bool, str)) or value is None else text


def name_value_pairs(items: tuple[str, ...], flag: str) -> list[tuple[str, str]]:
    """Each ``NAME=VALUE`` of a repeatable ``flag`` as (name, value); anything else is a user
    error."""
    out = []
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UserError(f"`{flag} {item}`: expected NAME=VALUE")
        out.append((name.strip(), value))
    return out


def read_file(value: str, where: str, limits: Limits) -> tuple[Any, dict[str, Any]] | None:
    """(data, fields) of a file named by ``value``, read by its suffix and checked against
    ``limits`` (`wgc_runtime.host.inputs.read_file`: a bad or oversized file is a user error
    naming it); None when ``value`` names no file (it is text then)."""
    from wgc_runtime.host.inputs import read_file as read_checked

    path = Path(value)
    if not (len(value) < 4096 and path.suffix and path.is_file()):
        return None
    with as_user_error():
        return read_checked(path, where, limits)


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:40]}..."


@contextlib.contextmanager
def as_user_error() -> Iterator[None]:
    """An input the edge refuses (`wgc_runtime.host.inputs.InputError`) as exit 1."""
    from wgc_runtime.host.inputs import InputError

    try:
        yield
    except InputError as exc:
        raise UserError(str(exc)) from None


def read_input(name: str, value: str, limits: Limits) -> tuple[str, Any, dict[str, Any]]:
    """(modality, data, fields) of one ``--input NAME=VALUE[,FIELD=VALUE...]``: a file by its
    suffix, else text; each field a file, a JSON scalar or list, else text
    (`wgc.cli.request_input`); all within ``limits``."""
    from wgc_runtime.host.inputs import check_value

    text, field_texts = split_fields(value)
    got = read_file(text, f"`--input {name}={text}`", limits)  # a file: named in full
    data, fields = got if got is not None else (text, {})

    def file_data(v: str, at: str) -> Any | None:
        got = read_file(v, at, limits)
        return None if got is None else got[0]

    with as_user_error():
        for field, ftext in field_texts:
            fields[field] = field_value(ftext, file_data, f"`--input {name}=...,{field}=`", limits)
        check_value(data, f"`--input {name}={_short(text)}`", limits)
        for field, v in fields.items():
            check_value(v, f"`--input {name}=...,{field}=`", limits)
    return name, data, fields


limit_option = click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="NAME=VALUE",
    help="An input limit, e.g. text_chars=4096 (see `wgc_runtime.host.inputs`).",
)
"""``--limit NAME=VALUE`` (repeatable; `wgc run` and `wgc serve`), read by `input_limits`."""


def input_limits(pairs: tuple[str, ...]) -> Limits:
    """The deployment's input limits: the defaults with each ``--limit NAME=VALUE`` applied."""
    from wgc_runtime.host.inputs import Limits

    with as_user_error():
        return Limits().with_pairs(name_value_pairs(pairs, "--limit"))


def output_dir(output: str | None) -> Path | None:
    """``-o OUTDIR``, checked now (before any compile or process): a path that is a file, or a
    folder that cannot be made, is a user error. The folder itself is made by the first output
    written into it, so a request refused at the door leaves nothing behind."""
    if output is None:
        return None
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise UserError(f"`-o {output}`: is a file, not a folder (outputs are written into it)")
    base = path.absolute()
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        raise UserError(f"`-o {output}`: cannot make the folder (`{base}` is a file)")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserError(f"`-o {output}`: cannot make the folder (`{base}`: permission denied)")
    return path
