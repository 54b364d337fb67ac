"""`wgc fmt PATH...`: rewrite `.walk` files in the canonical layout (see `wgc.fmt`).

`--check` rewrites nothing and fails (exit 1) when a file would change; `--diff` prints what
would change as a unified diff (stdout) and rewrites nothing. `-` formats stdin to stdout. A file
with a syntax error is reported like `wgc check` reports it and left untouched (exit 1). Files
are written only when they change, atomically (a temporary file renamed over the original).
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from pathlib import Path

import click

from wgc.cli.check import _use_color, expand_paths
from wgc.cli.errors import EXIT_OK, EXIT_USER, UserError
from wgc.config import Env
from wgc.diagnostics.diagnostic import SourceMap
from wgc.diagnostics.render import render_text
from wgc.fmt import Formatted, format_source
from wgc.parse.parser import Parser


def _write_atomic(path: str, text: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".wgc-fmt-", suffix=".walk", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read `{path}`: {exc}") from exc


def _report_syntax(path: str, source: str, result: Formatted, color: bool) -> None:
    sources = SourceMap()
    sources.add(path, source)
    click.echo(render_text(list(result.diagnostics), sources, color=color), err=True, nl=False)


def _diff(path: str, before: str, after: str) -> str:
    lines = difflib.unified_diff(
        _lines(before), _lines(after), f"{path} (original)", f"{path} (formatted)"
    )
    return "".join(lines)


def _lines(text: str) -> list[str]:
    """``text`` cut after each `\n`, line ends kept: lines as the lexer counts them, which
    `str.splitlines` does not (it also cuts at `\u2028`, `\x0c`, ... inside comments)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _format_stdin(parser: Parser, color: bool) -> int:
    source = sys.stdin.read()
    result = format_source(source, "<stdin>", parser)
    if result.text is None:
        _report_syntax("<stdin>", source, result, color)
        return EXIT_USER
    click.echo(result.text, nl=False)
    return EXIT_OK


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--check", is_flag=True, help="Rewrite nothing; exit 1 if a file would change.")
@click.option(
    "--diff",
    is_flag=True,
    help="Rewrite nothing; print a unified diff; exit 1 if a file would change.",
)
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Color syntax errors.",
)
@click.pass_obj
def fmt(env: Env, paths: tuple[str, ...], check: bool, diff: bool, color: str) -> None:
    """Format .walk files in the canonical layout.

    PATHS are files, folders (searched recursively for *.walk), glob patterns, or `-` for stdin
    (formatted to stdout).
    """
    parser = Parser()
    use_color = _use_color(color, env)
    ctx = click.get_current_context()
    if paths == ("-",):
        ctx.exit(_format_stdin(parser, use_color))
    failed = changed = unchanged = 0
    for path in expand_paths(paths, placements=False):
        source = _read(path)
        result = format_source(source, path, parser)
        if result.text is None:
            _report_syntax(path, source, result, use_color)
            failed += 1
        elif result.text == source:
            unchanged += 1
        else:
            changed += 1
            if diff:
                click.echo(_diff(path, source, result.text), nl=False)
            if check:
                click.echo(f"would reformat {path}", err=True)
            if not (check or diff):
                _write_atomic(path, result.text)
    click.echo(_summary(changed, unchanged, failed, dry=check or diff), err=True)
    ctx.exit(EXIT_USER if failed or ((check or diff) and changed) else EXIT_OK)


def _summary(changed: int, unchanged: int, failed: int, *, dry: bool) -> str:
    def files(n: int) -> str:
        return f"{n} file" + ("" if n == 1 else "s")

    verb = "would be reformatted" if dry else "reformatted"
    parts = [f"{files(changed)} {verb}", f"{files(unchanged)} left unchanged"]
    if failed:
        parts.append(f"{files(failed)} with syntax errors")
    return ", ".join(parts)
