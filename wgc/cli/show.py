"""`wgc show FILE`: print the IR of a `.walk` file, or draw its walks.

Runs the front end like `wgc check`; errors are printed the same way and stop with exit 1,
warnings are printed to stderr and the IR is shown anyway. `--walk` narrows the output to one
walk; `--format` picks text (default), json (the stable contract for tools), dot, mermaid or
html (one self-contained page). Output goes to stdout, or to `-o FILE`.

With `--placement P.yaml` (and `--set NAME=VALUE` overrides, as for `wgc compile`) it shows the
PLAN instead: text is a table per rank and the cross-rank transfers per walk, json is
`Plan.to_json()`, and the drawings put every call in its rank's cluster with the cross-rank hops
highlighted and labelled with their bytes. Placement errors print like model errors (exit 1).
"""

from __future__ import annotations

from pathlib import Path

import click

from wgc.cli.check import _use_color
from wgc.cli.errors import UserError
from wgc.cli.targets import model_file, placement_file
from wgc.config import Env
from wgc.diagnostics.codes import Severity
from wgc.diagnostics.render import render_summary, render_text
from wgc.diagnostics.suggest import closest
from wgc.driver import Driver, FrontEndResult
from wgc.ir.model import Model
from wgc.lower.plan import Plan
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
    close = closest(name, names)
    if close:
        message += f"\n  = help: did you mean `{close}`?"
    elif names:
        message += "\n  = note: its walks are " + ", ".join(f"`{n}`" for n in names)
    return UserError(message)


def _report_all(diags: list, sources, path: str, color: bool) -> None:
    """Diagnostics of the model and the placement, with `wgc check`'s closing summary."""
    if not diags:
        return
    click.echo(render_text(diags, sources, color=color), err=True, nl=False)
    n_err = sum(d.severity is Severity.ERROR for d in diags)
    n_warn = sum(d.severity is Severity.WARNING for d in diags)
    summary = render_summary(n_err, n_warn, path, color)
    if summary:
        click.echo(summary + "\n", err=True)


def build_plan(
    file: str, placement: str, sets: dict[str, str], driver: Driver, color: bool
) -> Plan | None:
    """Front end, placement rules, overrides and lowering, as `wgc compile` does them (without
    code generation); prints every diagnostic and returns None when there are errors."""
    result = driver.plan(file, placement, sets)
    _report_all(result.diagnostics, result.sources, file, color)
    return result.plan if result.ok else None


@click.command()
@click.argument("file", metavar="FILE")
@click.option("--walk", "walk_name", metavar="NAME", help="Show only the walk NAME.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text and json dump the IR (or the plan); dot, mermaid and html draw the walks "
    "(or the placed plan, ranks as clusters).",
)
@click.option(
    "--placement",
    "-p",
    metavar="P.yaml",
    help="Show the plan for this placement instead of the IR.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="NAME=VALUE",
    help="With --placement: override a param (wins over the placement's `params:`).",
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
    env: Env,
    file: str,
    walk_name: str | None,
    fmt: str,
    placement: str | None,
    sets: tuple[str, ...],
    output: str | None,
    color: str,
) -> None:
    """Print the IR of FILE, or draw its walks (dot, mermaid, html); with --placement, the plan."""
    file = model_file(file)
    if not Path(file).is_file():
        raise UserError(f"no such file: `{file}`")
    placement = placement_file(placement, file)
    if placement is not None:
        _write(_show_plan(env, file, placement, sets, walk_name, fmt, color), output)
        return
    if sets:
        raise UserError("`--set` overrides params of a placement: give `--placement P.yaml` too")
    result = Driver().front_end(file)
    _report(result, _use_color(color, env))
    if result.errors or result.model is None:
        click.get_current_context().exit(1)
    model = result.model
    if walk_name is not None and model.walk(walk_name) is None:
        raise _unknown_walk(model, walk_name)
    _write(render(model, fmt, walk_name), output)


def _show_plan(
    env: Env,
    file: str,
    placement: str,
    sets: tuple[str, ...],
    walk_name: str | None,
    fmt: str,
    color: str,
) -> str:
    from wgc.cli.compile import _parse_sets
    from wgc.driver import display_path
    from wgc.show.plan import render_plan

    if walk_name is not None:
        raise UserError("`--walk` narrows the IR view; the plan is shown whole")
    if not Path(placement).is_file():
        raise UserError(f"no such file: `{placement}`")
    plan = build_plan(
        display_path(file),
        display_path(placement),
        _parse_sets(sets),
        Driver(),
        _use_color(color, env),
    )
    if plan is None:
        click.get_current_context().exit(1)
    assert plan is not None
    return render_plan(plan, fmt)


def _write(text: str, output: str | None) -> None:
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise UserError(f"cannot write `{output}`: {exc.strerror or exc}") from None
    click.echo(f"wrote {output}", err=True)
