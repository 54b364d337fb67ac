"""`wgc show FILE`: print the IR of a `.walk` file, or draw its walks.

Runs the front end like `wgc check`; errors are printed the same way and stop with exit 1,
warnings are printed to stderr and the IR is shown anyway. `--walk` narrows the output to one
walk; `--format` picks text (default), json (the stable contract for tools), dot, mermaid or
html (one self-contained page). Output goes to stdout, or to `-o FILE`.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import click

from wgc.cli.check import _use_color
from wgc.cli.errors import UserError
from wgc.config import Env
from wgc.diagnostics.codes import Severity
from wgc.diagnostics.render import render_summary, render_text
from wgc.driver import Driver, FrontEndResult
from wgc.ir.model import Model
from wgc.show import FORMATS, render


def _report(result: FrontEndResult, color: bool) -> None:
    """Diagnostics to stderr as `wgc check` prints them (with its closing summary)."""
    if not result.diagnostics:
        return
    click.echo(render_text(result.diagnostics, result.sources, color=color), err=True, nl=False)
    n_err = sum(d.severity is Severity.ERROR for d in result.diagnostics)
    n_warn = sum(d.severity is Severity.WARNING for d in result.diagnostics)
    summary = render_summary(n_err, n_warn, result.path, color)
    if summary:
        click.echo(summary + "\n", err=True)


def _unknown_walk(model: Model, name: str) -> UserError:
    names = [w.name for w in model.walks]
    message = f"no walk named `{name}` in `{model.file}`"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f"\n  = help: did you mean `{close[0]}`?"
    elif names:
        message += "\n  = note: its walks are " + ", ".join(f"`{n}`" for n in names)
    return UserError(message)


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--walk", "walk_name", metavar="NAME", help="Show only the walk NAME.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text and json dump the IR; dot, mermaid and html draw the walks.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="Write to this file instead of stdout.",
)
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    help="Color diagnostics.",
)
@click.pass_obj
def show(
    env: Env, file: str, walk_name: str | None, fmt: str, output: str | None, color: str
) -> None:
    """Print the IR of FILE, or draw its walks (dot, mermaid, html)."""
    if not Path(file).is_file():
        raise UserError(f"no such file: `{file}`")
    result = Driver().front_end(file)
    _report(result, _use_color(color, env))
    if result.errors or result.model is None:
        click.get_current_context().exit(1)
    model = result.model
    if walk_name is not None and model.walk(walk_name) is None:
        raise _unknown_walk(model, walk_name)
    text = render(model, fmt, walk_name)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write `{output}`: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)
