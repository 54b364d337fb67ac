"""`wgc explain CODE` and `wgc explain --list`: what a diagnostic code means and how to fix it."""

from __future__ import annotations

import click

from wgc.cli.errors import UserError
from wgc.diagnostics import explain as explanations
from wgc.diagnostics.codes import REGISTRY, Code
from wgc.diagnostics.suggest import ranked


def _unknown(code: str) -> UserError:
    message = f"unknown diagnostic code `{code}`"
    close = ranked(code, REGISTRY, n=3)
    if close:
        message += "\n  = help: did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
    message += "\n  = note: `wgc explain --list` lists every code"
    return UserError(message)


def _listing() -> str:
    by_stage: dict[str, list[Code]] = {}
    for entry in sorted(REGISTRY.values(), key=lambda c: c.code):
        by_stage.setdefault(entry.stage, []).append(entry)
    blocks = []
    for stage, entries in by_stage.items():
        head = f"{stage} (WG{entries[0].code[2]}xx)"
        rows = [
            f"  {c.code}  {c.severity.value:<7}  {c.title}" + ("  (retired)" if c.retired else "")
            for c in entries
        ]
        blocks.append("\n".join([head, *rows]))
    return "\n\n".join(blocks)


@click.command()
@click.argument("code", required=False)
@click.option("--list", "list_all", is_flag=True, help="List every code, grouped by stage.")
def explain(code: str | None, list_all: bool) -> None:
    """Explain diagnostic CODE (e.g. WG401 or 401), with a failing and a fixed example."""
    if list_all:
        click.echo(_listing())
        return
    if code is None:
        raise click.UsageError("give a CODE to explain, or `--list`")
    normalized = explanations.normalize_code(code)
    if normalized not in REGISTRY:
        raise _unknown(normalized)
    try:
        text = explanations.explanation(normalized)
    except KeyError:
        title = REGISTRY[normalized].title
        raise UserError(f"`{normalized}` ({title}) has no written explanation yet") from None
    click.echo(text.rstrip("\n"))
