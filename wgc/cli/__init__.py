"""The `wgc` command line: a click group and the commands registered on it.

`check` and `explain` always exist; `show` and `fmt` are registered when their modules are present
(each module exposes a click command named like the module), and imported only when run or
listed, so `wgc check` never pays for `compile`'s imports. Every invocation runs through
`wgc.cli.errors.guarded`, so exit codes mean the same thing for every command: 0 clean, 1 user
error, 2 a bug in wgc.
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import click

from wgc.cli.check import check
from wgc.cli.errors import guarded
from wgc.cli.explain import explain
from wgc.config import Env

_OPTIONAL_COMMANDS = ("show", "fmt", "compile", "run", "serve", "worker", "lsp")


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
        _tolerant_streams()

        def invoke() -> Any:
            return parent.main(argv, prog_name or "wgc", complete_var, False, **extra)

        code = guarded(invoke, argv, env)
        if standalone_mode:
            sys.exit(code)
        return code

    # Optional commands are imported only when named (or listed by `--help`): `compile` pulls in
    # codegen, jinja2, yaml and the runtime, which would double the start-up of `wgc check`.
    def list_commands(self, ctx: click.Context) -> list[str]:
        optional = [n for n in _OPTIONAL_COMMANDS if _optional_exists(n)]
        return sorted({*super().list_commands(ctx), *optional})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in _OPTIONAL_COMMANDS:
            command = _load_optional(cmd_name)
            if command is not None:
                self.add_command(command)
        return command


def _tolerant_streams() -> None:
    """Let stdout and stderr print any text: a file name with a byte that is not UTF-8 reaches
    Python as a lone surrogate, and a strict stream (a UTF-8 locale's default) would fail on it
    after the work is done, as an internal error. It prints as its escape (`\\udcff`)."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


@click.group(cls=WgcGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", "-V", prog_name="wgc")
def main() -> None:
    """wgc: check, show, format, compile and run `.walk` model graphs."""


def _optional_exists(name: str) -> bool:
    return importlib.util.find_spec(f"{__name__}.{name}") is not None


def _load_optional(name: str) -> click.Command | None:
    module_name = f"{__name__}.{name}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # only a module that is not written yet is optional; its own missing imports are bugs
        if exc.name == module_name:
            return None
        raise
    return getattr(module, name)


main.add_command(check)
main.add_command(explain)
