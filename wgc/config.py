"""The one place wgc reads environment variables.

Everything else receives an `Env` value (the CLI builds it once per invocation and passes it
down), so behaviour never depends on hidden global state and tests can construct any `Env`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

_FALSE = frozenset({"", "0", "false", "no", "off"})


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "").strip().lower() not in _FALSE


@dataclass(frozen=True, slots=True)
class Env:
    r"""Settings that come from the environment.

    ``backtrace``: ``WGC_BACKTRACE=1`` prints the traceback of an internal compiler error.
    ``no_color``: ``NO_COLOR`` (https://no-color.org) turns off ``--color auto``.
    ``force_color``: ``CLICOLOR_FORCE`` or ``FORCE_COLOR`` turns on ``--color auto``.
    ``api_keys``: ``WGC_API_KEY``, one key or several separated by commas: what `wgc serve`
    asks of HTTP clients (beside its ``--api-key``\ s).
    """

    backtrace: bool = False
    no_color: bool = False
    force_color: bool = False
    api_keys: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> Env:
        env = os.environ if environ is None else environ
        return cls(
            backtrace=_flag(env, "WGC_BACKTRACE"),
            # NO_COLOR counts when set to anything non-empty, even "0" (per no-color.org)
            no_color=bool(env.get("NO_COLOR", "")),
            force_color=_flag(env, "CLICOLOR_FORCE") or _flag(env, "FORCE_COLOR"),
            api_keys=tuple(k.strip() for k in env.get("WGC_API_KEY", "").split(",") if k.strip()),
        )
