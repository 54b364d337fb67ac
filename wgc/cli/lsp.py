"""`wgc lsp`: the language server for `.walk` and placement files, over stdio (`wgc.lsp`).

Needs the `lsp` extra (`pip install 'wgc[lsp]'`: pygls and lsprotocol); without it the command
says so and exits 1. Editors start it themselves (see docs/editors.md).
"""

from __future__ import annotations

import click

from wgc.cli.errors import UserError


@click.command()
@click.option("--stdio", is_flag=True, help="Talk over stdin/stdout (the default and only way).")
def lsp(stdio: bool) -> None:
    """Run the language server over stdio (for editors; see docs/editors.md)."""
    del stdio  # editors pass `--stdio`; stdio is the only transport
    try:
        from wgc.lsp.server import make_server
    except ModuleNotFoundError as exc:
        if exc.name not in ("pygls", "lsprotocol") and not str(exc.name).startswith("pygls."):
            raise
        raise UserError("`wgc lsp` needs the `lsp` extra: pip install 'wgc[lsp]'") from None
    make_server().start_io()
