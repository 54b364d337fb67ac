"""Where `wgc run` and `wgc serve` start the workers: the options both take, read once.

``--ray ADDRESS`` (or ``$WGC_RAY``): on the nodes of a Ray cluster
(`wgc_runtime.host.processes.ray_launcher`); ``--external-workers FILE``: nowhere, they are
started by another launcher with ``wgc worker --join FILE --rank R`` and join within
``--join-timeout`` seconds (`wgc_runtime.host.processes.external`, `wgc.cli.worker`); neither:
on this host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from wgc.cli.errors import UserError
from wgc.cli.seconds import SECONDS

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Workers:
    """Where the workers run (see the module docstring)."""

    ray: str | None = None
    external: str | None = None
    join_timeout: float = 300.0

    def __post_init__(self) -> None:
        if self.ray and self.external:
            raise UserError("give `--ray` or `--external-workers`, not both")
        if self.external is not None:
            folder = Path(self.external).resolve().parent
            if not folder.is_dir():
                raise UserError(f"`--external-workers {self.external}`: no folder `{folder}`")

    @property
    def placed(self) -> bool:
        """Whether they run anywhere but in processes this command spawns on this host."""
        return bool(self.ray or self.external)

    def cluster_options(self) -> dict[str, Any]:
        """`Cluster`'s keyword arguments for them."""
        from wgc_runtime.host.processes.external import ExternalWorkers

        external = (
            ExternalWorkers(str(Path(self.external).resolve()), self.join_timeout)
            if self.external
            else None
        )
        return {"ray": self.ray, "external": external}


THIS_HOST = Workers()


def worker_options(command: F) -> F:
    """``--ray``, ``--external-workers``, ``--join-timeout`` (the command's ``ray_address``,
    ``external`` and ``join_timeout`` arguments: `Workers` of them)."""
    options = [
        click.option(
            "--ray",
            "ray_address",
            metavar="ADDRESS",
            envvar="WGC_RAY",
            default=None,
            help="Start the workers on this Ray cluster's nodes (`auto`: this machine's cluster).",
        ),
        click.option(
            "--external-workers",
            "external",
            metavar="JOIN.json",
            default=None,
            help="Start no worker: write this join file and wait for `wgc worker --join "
            "JOIN.json --rank R` on each rank's host (SLURM, Kubernetes; see `wgc worker -h`).",
        ),
        click.option(
            "--join-timeout",
            type=SECONDS,
            default=300.0,
            show_default=True,
            help="Seconds to wait for every external worker to join.",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
