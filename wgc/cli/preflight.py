"""`wgc run` / `wgc serve`: the deployment checked before any weight is built.

The checks are the runtime's (`wgc_runtime.host.preflight`: devices, weights, memory); this
module asks every node class of each rank for its weights (`Node.weights`), renders the
refusals as coded diagnostics (``error[WG825]: …``, codes registered in
`wgc.diagnostics.codes`, explained by `wgc explain`), and exits 1 with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO, TypeVar

import click

from wgc.cli.errors import UserError

if TYPE_CHECKING:
    from wgc_runtime.host.preflight import Machine, Refusal

F = TypeVar("F")


class Refused(UserError):
    """Refusals with their codes: ``error[CODE]: message`` (and ``= help:``) each."""

    def __init__(self, refusals: list[Refusal]) -> None:
        super().__init__("; ".join(r.message for r in refusals))
        self.refusals = refusals

    def show(self, file: TextIO | None = None) -> None:
        for r in self.refusals:
            click.echo(f"error[{r.code}]: {r.message}", err=file is None, file=file)
            if r.help:
                click.echo(f"  = help: {r.help}", err=file is None, file=file)


def random_weights_option(command: F) -> F:
    """``--random-weights``: run real sizes with random weights when no checkpoint is given."""
    return click.option(
        "--random-weights",
        is_flag=True,
        help="Build random weights even at real sizes (no checkpoint given).",
    )(command)  # type: ignore[return-value]


def check_deployment(
    plan_dir: str, *, random_weights: bool = False, machine: Machine | None = None
) -> None:
    """Every rank of the compiled plan checked against this machine (module docstring); and
    ``$WGC_CLIENT_PORT``, the kind of the conductor's client port (WG894)."""
    from wgc_runtime.host.loading import load_plan, node_class
    from wgc_runtime.host.preflight import Machine, preflight
    from wgc_runtime.host.transport.client_port import client_port_kind

    try:
        client_port_kind(None)
    except ValueError as exc:
        raise UserError(str(exc)) from None

    _, ranks = load_plan(plan_dir)

    from wgc_runtime.contract.node import NodeError
    from wgc_runtime.host.loading import DeploymentError

    def parts_of(node):
        # a node class that does not import, or a config it refuses, is said by the rank as it
        # starts, in its own words (`rank 0 failed to start: node `LLM`: cannot import ...`)
        try:
            return node_class(node).weights(dict(node.config))
        except (DeploymentError, NodeError, KeyError, ValueError):
            return ()

    refusals = preflight(ranks, parts_of, machine or Machine.here(), random_weights=random_weights)
    if refusals:
        raise Refused(refusals)
