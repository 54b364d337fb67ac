"""`wgc worker`: this host's ranks of a deployment whose conductor side runs elsewhere, for any
launcher that starts one process per host (SLURM, Kubernetes, a shell loop over ``ssh``).

    wgc run  MODEL.walk -p P.yaml --external-workers /shared/join.json --input ...   # one host
    wgc worker --join /shared/join.json --rank 1 [--rank 2 ...]                     # each host

The conductor side (``wgc run`` or ``wgc serve`` with ``--external-workers FILE``) writes the
join file (the launcher's address, the deployment's secret and CURVE keys: mode 0600, on a
folder the worker hosts see) and waits ``--join-timeout`` seconds for every rank; ``wgc worker``
waits for the file (``--wait``), reads it (the secret is never an argument: ``ps`` would show
it), and runs each ``--rank`` as the local launcher would. It must start in the project folder
(node implementations import relative to it) with the same Python environment, and finds the
plan at the conductor side's path unless ``--plan DIR`` says where it is here. It exits 0 when
the conductor side stops it, 1 when a rank fails or the conductor side goes away.
(`wgc_runtime.host.processes.external` owns both sides.)
"""

from __future__ import annotations

import click

from wgc.cli.errors import UserError
from wgc.cli.run import require_runtime
from wgc.cli.seconds import SECONDS
from wgc.config import Env


@click.command()
@click.option(
    "--join",
    "join_file",
    envvar="WGC_JOIN",
    required=True,
    metavar="FILE",
    help="The join file the conductor side writes (`--external-workers FILE`; env: WGC_JOIN).",
)
@click.option(
    "--rank",
    "ranks",
    type=click.IntRange(0),
    multiple=True,
    required=True,
    help="A rank to run on this host (repeatable).",
)
@click.option("--plan", "plan_dir", metavar="DIR", help="The plan folder here [default: theirs].")
@click.option(
    "--wait",
    type=SECONDS,
    default=300.0,
    show_default=True,
    help="Seconds to wait for the join file to appear.",
)
@click.pass_obj
def worker(
    env: Env, join_file: str, ranks: tuple[int, ...], plan_dir: str | None, wait: float
) -> None:
    """Run ranks of a deployment started with `--external-workers` (SLURM, Kubernetes...).

    The conductor side (`wgc run` or `wgc serve` with `--external-workers JOIN.json`, on the
    host of rank 0) writes the join file (mode 0600: it holds the deployment's secret and keys)
    and waits for every rank; this reads it, never the secret from the command line. Start it in
    the project folder; the plan must be at the conductor side's path (or give --plan). Exit 0
    when the run stops it, 1 when a rank fails or the conductor side goes away.

    \b
    SLURM (one task per node; the placement's hosts name the nodes in order):
      JOIN=/shared/wgc-$SLURM_JOB_ID/join.json
      wgc serve generated/M/P --host 0.0.0.0 --external-workers $JOIN &
      srun bash -c "wgc worker --join $JOIN --rank \\$SLURM_PROCID"
    Kubernetes (a StatefulSet; hosts wgc-0.wgc, wgc-1.wgc...; a shared volume):
      wgc worker --join /shared/join.json --rank ${HOSTNAME##*-}
    """
    del env
    require_runtime("worker")
    from wgc_runtime.host.loading import ensure_import_root
    from wgc_runtime.host.processes.external import JoinError, join_boot, read_join, run_workers

    if len(set(ranks)) != len(ranks):
        raise UserError("each `--rank` once")
    ensure_import_root()
    try:
        doc = read_join(join_file, wait)
        boots = [join_boot(doc, r, plan_dir) for r in ranks]
    except JoinError as exc:
        raise UserError(str(exc)) from None
    names = ", ".join(f"rank {r}" for r in ranks)
    click.echo(f"wgc worker: {names} joining {doc['boot']['launcher']}", err=True)
    code = run_workers(doc, boots, lambda line: click.echo(line, err=True))
    click.get_current_context().exit(code)
