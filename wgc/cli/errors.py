"""How the CLI fails: user errors exit 1 without a traceback, internal errors exit 2 as bugs.

`UserError` is for anything the person running wgc can fix (a missing file, an unknown code).
`guarded` wraps a whole command-line invocation: an unexpected exception becomes an "internal
compiler error" report with a repro line, and the traceback only when ``WGC_BACKTRACE=1``.
"""

from __future__ import annotations

import shlex
import traceback
from collections.abc import Callable, Sequence
from typing import TextIO

import click

from wgc.config import Env

EXIT_OK = 0
EXIT_USER = 1
EXIT_INTERNAL = 2


class UserError(click.ClickException):
    """A problem with the command line or its inputs; printed as ``error: ...``, exit 1."""

    exit_code = EXIT_USER

    def show(self, file: TextIO | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=file is None, file=file)


def repro_line(argv: Sequence[str]) -> str:
    return "wgc " + shlex.join(argv) if argv else "wgc"


def report_internal_error(exc: BaseException, argv: Sequence[str], env: Env) -> None:
    """Say that ``exc`` is a bug in wgc, how to reproduce it, and (if asked) where it came from."""
    lines = [
        f"error: internal compiler error: {type(exc).__name__}: {exc}",
        "note: this is a bug in wgc; please report it with this command line:",
        f"    {repro_line(argv)}",
    ]
    if env.backtrace:
        lines.append("".join(traceback.format_exception(exc)).rstrip())
    else:
        lines.append("note: run with `WGC_BACKTRACE=1` to include a backtrace")
    click.echo("\n".join(lines), err=True)


def guarded(invoke: Callable[[], int | None], argv: Sequence[str], env: Env) -> int:
    """Run ``invoke`` (a non-standalone click invocation) and map every outcome to an exit code.

    Click's own usage errors exit 2 by default; wgc reserves 2 for its own bugs, so usage errors
    exit 1 like every other user error.
    """
    try:
        result = invoke()
    except click.ClickException as exc:
        exc.show()
        return EXIT_USER if isinstance(exc, click.UsageError) else exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:
        report_internal_error(exc, argv, env)
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK
