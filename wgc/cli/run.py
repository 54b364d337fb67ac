"""`wgc run`: run a compiled model as processes (or in one process with `--local`).

    wgc run MODEL.walk --placement P.yaml [--set NAME=VALUE] ...   # compiles first
    wgc run generated/<model>/<placement>/ ...                       # an existing compile

One-shot use: ``--input NAME=VALUE[,FIELD=VALUE...]`` (repeatable, in order: an input segment
of modality NAME; VALUE is text, or a file: ``.png``/``.jpg`` images (through PIL when
installed), ``.wav`` audio (stdlib ``wave``), ``.npy`` arrays; each ``,FIELD=VALUE`` a field of
the segment: a file, a JSON scalar or list, else text), or ``--request FILE.json`` (the general
form: segments with fields, want, options, seed; `wgc.cli.request_input`), ``--want MODALITY``
(repeatable), ``--option NAME=VALUE`` (JSON-ish: ints, floats, true/false, else a string),
``-o OUTDIR`` (a folder, checked before anything runs). Every input is read and bounded at the edge
(`wgc_runtime.host.inputs`, as the server reads its own; ``--limit NAME=VALUE`` changes a limit):
a malformed or oversized one exits 1 naming the file and the reason. Every emitted output is
written as it arrives: audio is appended to ``OUTDIR/<modality>.wav`` (16-bit PCM at the
emitting node's ``sample_rate`` config, else 24 kHz), images go to ``<modality>_NNN.png``, a
video to ``<modality>_NNN.npy`` plus its frames as ``<modality>_NNN/frame_KKKK.png``, text
streams to stdout (and ``<modality>.txt``; byte outputs through an incremental UTF-8 decoder),
anything else to ``<modality>_NNN.npy``. While the workers start, a progress bar (on a
terminal) follows their weights loading and capture (`wgc.cli.progress`); at the end each
audio output's length, first-audio latency, real-time factor and any clipped samples are
reported (`wgc.cli.speech_stats`). Exits 0 when
the request finished, 1 when it failed (the error names node, walk and message) or a worker
died (the message names the rank; workers are not restarted).

The request is checked at the door before any process starts (`wgc_runtime.core.conductor.door`,
strict: an undeclared option, an unknown want or input modality, a missing segment field, a value
a walk input cannot take: every problem is printed and the exit code is 1); ``--option`` values
are read as the option's declared type (``true``/``false``/``1``/``0`` for a bool); without
``--want`` every modality the model emits is wanted. ``--seed N`` seeds the nodes (default: the
request id).

Where the workers run: this host, or ``--ray ADDRESS`` (the nodes of a Ray cluster), or
``--external-workers JOIN.json`` (started elsewhere with ``wgc worker``), as for `wgc serve`
(`wgc.cli.workers`).

Server use: ``--serve`` is `wgc serve` (the HTTP server, `wgc.cli.serve`) on its default address.

``--local`` runs the one-shot request in this process on `wgc_runtime.host.local.LocalCluster` (no
sockets, no processes): handy for debugging.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wgc.cli.door import at_the_door
from wgc.cli.errors import EXIT_OK, EXIT_USER, UserError
from wgc.cli.preflight import random_weights_option
from wgc.cli.request_input import read_request_file
from wgc.cli.run_inputs import (
    as_user_error,
    input_limits,
    limit_option,
    name_value_pairs,
    output_dir,
    parse_value,
    read_file,
    read_input,
)
from wgc.cli.run_outputs import DEFAULT_SAMPLE_RATE, OutputWriter, kind_of
from wgc.cli.run_plan import at_input_rate, check_plan, deployment_errors, prepare, sample_rates
from wgc.cli.run_stream import WorkerDied, stream_local, stream_processes
from wgc.cli.seconds import SECONDS
from wgc.cli.speech_stats import RequestStats
from wgc.cli.workers import THIS_HOST, Workers, worker_options
from wgc.config import Env

if TYPE_CHECKING:
    from wgc_runtime.host.inputs import Limits


# ------------------------------------------------------------------------- the runtime


def require_runtime(command: str = "run", extra: str = "runtime") -> None:
    """`wgc run` needs the runtime's dependencies, which the core install leaves out."""
    import importlib.util

    for module in ("torch", "zmq", "msgspec", "numpy"):  # found, not imported: torch takes ~1.5 s
        if importlib.util.find_spec(module) is None:
            raise UserError(
                f"`wgc {command}` needs the runtime, and `{module}` is not installed: "
                f"install it with `pip install 'wgc[{extra}]'`"
            ) from None


@click.command()
@click.argument("target", metavar="MODEL.walk|GENERATED_DIR")
@click.option("--placement", "-p", metavar="P.yaml", help="The placement (for MODEL.walk).")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a param.")
@click.option(
    "--input",
    "-i",
    "inputs",
    multiple=True,
    metavar="NAME=VALUE",
    help="An input segment: text, or a .png/.wav/.npy file (repeatable, in order).",
)
@click.option(
    "--request",
    "request_file",
    metavar="FILE.json",
    help="The request as JSON: inputs with fields, want, options, seed (see `wgc run --help`).",
)
@click.option("--want", "-w", multiple=True, metavar="MODALITY", help="An output modality.")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE", help="A request option.")
@click.option("-o", "--output", metavar="OUTDIR", help="Write emitted outputs here.")
@click.option("--serve", is_flag=True, help="Serve over HTTP instead: `wgc serve`.")
@click.option("--seed", type=int, default=None, help="What the nodes seed from (default: the id).")
@click.option("--local", is_flag=True, help="Run in this process (no sockets, no processes).")
@worker_options
@click.option(
    "--plan-dir",
    metavar="DIR",
    help="Where to write the compile of MODEL.walk [default: a temp folder].",
)
@click.option(
    "--ready-timeout",
    type=SECONDS,
    default=600.0,
    show_default=True,
    help="Seconds to wait for workers to load.",
)
@click.option("--timeout", type=SECONDS, default=None, help="Deadline of the request, seconds.")
@random_weights_option
@limit_option
@click.pass_obj
def run(
    env: Env,
    target: str,
    placement: str | None,
    sets: tuple[str, ...],
    inputs: tuple[str, ...],
    request_file: str | None,
    want: tuple[str, ...],
    options: tuple[str, ...],
    output: str | None,
    serve: bool,
    seed: int | None,
    local: bool,
    ray_address: str | None,
    external: str | None,
    join_timeout: float,
    plan_dir: str | None,
    ready_timeout: float,
    timeout: float | None,
    random_weights: bool,
    limits: tuple[str, ...],
) -> None:
    """Run a model: one request (--input/--want/-o) or a server (--serve)."""
    del env
    require_runtime()
    edge = input_limits(limits)
    if serve and (inputs or request_file or local):
        raise UserError(
            "`--serve` takes requests from clients: give no --input, --request or --local"
        )
    if not serve and not inputs and not request_file:
        raise UserError(
            "give at least one `--input NAME=VALUE`, a `--request FILE.json` or `--serve`"
        )
    workers = Workers(ray_address, external, join_timeout)
    if local and workers.placed:
        raise UserError("`--local` runs in this process: give no --ray or --external-workers")
    if serve:
        from wgc.cli.serve import require_serve, run_server

        require_serve()
        ctx = click.get_current_context()
        code = run_server(
            target,
            placement,
            sets,
            seed=seed,
            plan_dir=plan_dir,
            ready_timeout=ready_timeout,
            workers=workers,
            limits=edge,
            random_weights=random_weights,
        )
        ctx.exit(code)
    out_dir = output_dir(output)
    plan = prepare(target, placement, sets, Path(plan_dir) if plan_dir else None)
    temporary = plan != target and not plan_dir
    try:
        check_plan(plan, random_weights)
        code = _one_shot(
            plan,
            inputs,
            request_file,
            want,
            options,
            out_dir,
            local,
            ready_timeout,
            timeout,
            seed,
            edge,
            workers=workers,
        )
    finally:
        if temporary:
            shutil.rmtree(plan, ignore_errors=True)
    click.get_current_context().exit(code)


def _one_shot(
    plan: str,
    inputs: tuple[str, ...],
    request_file: str | None,
    want: tuple[str, ...],
    options: tuple[str, ...],
    output: Path | None,
    local: bool,
    ready_timeout: float,
    timeout: float | None,
    seed: int | None,
    limits: Limits,
    workers: Workers = THIS_HOST,
) -> int:
    from wgc_runtime.host.client import RequestFailed

    segments = [
        read_input(name, value, limits) for name, value in name_value_pairs(inputs, "--input")
    ]
    opts = {name: parse_value(value) for name, value in name_value_pairs(options, "--option")}
    if request_file is not None:  # the file's inputs first; the command line adds / overrides
        with as_user_error():
            doc = read_request_file(request_file, lambda v, w: read_file(v, w, limits), limits)
        segments = [*doc["inputs"], *segments]
        want = want or tuple(doc["want"])
        opts = {**doc["options"], **opts}
        seed = seed if seed is not None else doc["seed"]
    segments = at_input_rate(plan, segments)
    want, opts = at_the_door(plan, segments, want, opts, seed, limits)
    rates = sample_rates(plan)
    stats = RequestStats()
    for modality in want:  # a wanted audio output that never comes is said, too
        if kind_of(modality) == "audio":
            stats.expect(modality, rates.get(modality, DEFAULT_SAMPLE_RATE))
    writer = OutputWriter(output, rates, stats=stats)
    t0 = time.monotonic()
    n = 0
    code = EXIT_OK
    try:
        events = (
            stream_local(plan, segments, want, opts, seed, stats.submit)
            if local
            else stream_processes(
                plan, segments, want, opts, ready_timeout, timeout, seed, stats.submit, workers
            )
        )
        for out in events:
            writer.write(out.modality, out.value)
            n += 1
    except KeyboardInterrupt:
        writer.close()
        click.echo("wgc: interrupted", err=True)
        return 130
    except deployment_errors() as exc:
        writer.close()
        click.echo(f"error: {exc}", err=True)
        return EXIT_USER
    except WorkerDied as exc:
        writer.close()
        click.echo(f"error: {exc}; the run is stopped (workers are not restarted)", err=True)
        code = EXIT_USER
    except RequestFailed as exc:
        writer.close()
        click.echo(f"error: request failed: {exc}", err=True)
        code = EXIT_USER
    writer.close()
    if code == EXIT_OK:
        files = ", ".join(str(p) for p in writer.written) or "no files"
        click.echo(
            f"wgc: {n} output{'s' if n != 1 else ''} in {time.monotonic() - t0:.1f} s -> {files}",
            err=True,
        )
        for line in stats.lines():
            click.echo(line, err=True)
    return code
