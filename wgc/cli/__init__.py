"""The `wgc` command line: a click group and the commands registered on it.

`check` and `explain` always exist; `show` and `fmt` are registered when their modules are present
(each module exposes a click command named like the module). Every invocation runs through
`wgc.cli.errors.guarded`, so exit codes mean the same thing for every command: 0 clean, 1 user
error, 2 a bug in wgc.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import click

from wgc.cli.check import check
from wgc.cli.errors import guarded
from wgc.cli.explain import explain
from wgc.config import Env

_OPTIONAL_COMMANDS = ("show", "fmt", "compile")


def _version() -> str:
    try:
        return metadata.version("wgc")
    except metadata.PackageNotFoundError:
        return "0.1.0+unknown"


class WgcGroup(click.Group):
    """A click group whose every run goes through `guarded` (see module docstring)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> int:
        argv = list(sys.argv[1:] if args is None else args)
        env = extra.get("obj")
        if not isinstance(env, Env):
            env = extra["obj"] = Env.from_environ()
        parent = super()

        def invoke() -> Any:
            return parent.main(argv, prog_name or "wgc", complete_var, False, **extra)

        code = guarded(invoke, argv, env)
        if standalone_mode:
            sys.exit(code)
        return code


@click.group(cls=WgcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", "-V", prog_name="wgc")
def main() -> None:
    """wgc: check, inspect and format `.walk` model graphs."""


def _register_optional(group: click.Group, name: str) -> None:
    module_name = f"{__name__}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # only a module that is not written yet is optional; its own missing imports are bugs
        if exc.name == module_name:
            return
        raise
    group.add_command(getattr(module, name))


main.add_command(check)
main.add_command(explain)
for _name in _OPTIONAL_COMMANDS:
    _register_optional(main, _name)
