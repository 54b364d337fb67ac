"""`wgc serve`: a model behind an HTTP server (OpenAI-compatible routes, a native route for any
model, `/metrics`, a playground), on the same conductor and workers as `wgc run`.

    wgc serve MODEL.walk [--placement P.yaml] [--set NAME=VALUE] [--host 127.0.0.1] [--port 8000]
    wgc serve generated/<model>/<placement>/ ...

The placement defaults to ``placements/cpu.yaml`` beside the model, as for `wgc run`. Requests
are checked at the door, strictly (undeclared options, unknown wants and input modalities are
refused). ``--seed`` seeds every request that names no seed of its own; ``--max-queue`` is how
many requests may wait behind the placement's ``max_concurrent_requests`` before the server
answers 429; ``--limit NAME=VALUE`` bounds what one input may be (bytes, text length, image
pixels, audio seconds, JSON depth, segments: `wgc_runtime.host.inputs`; 400 / 413 past them).
``--api-key KEY`` (repeatable) and ``WGC_API_KEY`` (comma-separated) are the keys clients send as
``Authorization: Bearer KEY`` (401 without one); a ``--host`` other than loopback refuses to
start without a key unless ``--insecure-no-auth``. ``--header-timeout`` / ``--body-timeout``
(408) and ``--max-connections`` (503) bound slow and hostile clients; ``--log-format json|text``
writes one line per request on stderr. The plan
drawing of the playground is ``wgc show --placement --format html``'s, rendered here (the
runtime never imports the compiler). The server itself lives in the runtime
(`wgc_runtime.host.server`) and needs the ``serve`` extra.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from wgc.cli.errors import UserError
from wgc.cli.preflight import random_weights_option
from wgc.cli.run import require_runtime
from wgc.cli.run_inputs import input_limits, limit_option
from wgc.cli.run_plan import check_plan, deployment_errors, prepare
from wgc.cli.seconds import SECONDS
from wgc.cli.targets import model_file, placement_file
from wgc.cli.workers import Workers, worker_options
from wgc.config import Env

if TYPE_CHECKING:
    from wgc_runtime.host.inputs import Limits

SERVE_MODULES = ("fastapi", "uvicorn", "sse_starlette", "prometheus_client", "PIL", "multipart")


def require_serve() -> None:
    """`wgc serve` needs the ``serve`` extra, which the core install leaves out."""
    require_runtime("serve", "serve")
    for module in SERVE_MODULES:
        try:
            __import__(module)
        except ImportError:
            raise UserError(
                f"`wgc serve` needs the HTTP server, and `{module}` is not installed: "
                "install it with `pip install 'wgc[serve]'`"
            ) from None


def plan_drawing(
    target: str, placement: str | None, sets: tuple[str, ...], plan: str
) -> str | None:
    """The plan as ``wgc show --placement --format html`` draws it, or None when the model
    cannot be compiled here (a generated folder whose sources moved or changed)."""
    from wgc.cli.compile import _parse_sets
    from wgc.driver import Driver
    from wgc.show.plan_html import render_plan_html

    overrides = _parse_sets(sets)
    walk, yaml = target, placement
    if Path(target).is_dir():
        try:
            dumped = json.loads((Path(plan) / "plan.json").read_text(encoding="utf-8"))
            sources = dumped["sources"][:2]
            if any(_sha256(s["path"]) != s["sha256"] for s in sources):
                return None  # the sources changed since: the drawing would not be this plan's
            walk, yaml = (s["path"] for s in sources)
            overrides = {str(k): json.dumps(v) for k, v in dumped.get("params", [])}
        except (OSError, ValueError, KeyError, TypeError):
            return None
    if yaml is None:
        yaml = str(Path(walk).parent / "placements" / "cpu.yaml")
    if not (Path(walk).is_file() and Path(yaml).is_file()):
        return None
    result = Driver().plan(walk, yaml, overrides)
    return render_plan_html(result.plan) if result.plan is not None and result.ok else None


def _sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_text(encoding="utf-8").encode("utf-8")).hexdigest()


@click.command()
@click.argument("target", metavar="MODEL.walk|GENERATED_DIR")
@click.option("--placement", "-p", metavar="P.yaml", help="The placement (for MODEL.walk).")
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Override a param.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option("--port", type=int, default=8000, show_default=True, help="0: any free port.")
@click.option("--seed", type=int, default=None, help="The seed of requests that name none.")
@click.option(
    "--max-queue",
    type=click.IntRange(0),
    default=64,
    show_default=True,
    help="Requests that may wait behind the admission cap before 429.",
)
@click.option("--plan-dir", metavar="DIR", help="Where to write the compile of MODEL.walk.")
@click.option(
    "--ready-timeout",
    type=SECONDS,
    default=600.0,
    show_default=True,
    help="Seconds to wait for workers to load.",
)
@click.option(
    "--restarts",
    type=click.IntRange(0),
    default=3,
    show_default=True,
    help="Restarts of a dead worker within 10 minutes before the server stops (0: never).",
)
@click.option(
    "--api-key",
    "api_keys",
    multiple=True,
    metavar="KEY",
    help="A key clients send as `Authorization: Bearer KEY` (repeatable; also WGC_API_KEY).",
)
@click.option(
    "--insecure-no-auth",
    is_flag=True,
    help="Serve a host other than loopback without an API key (anyone reaching it may use it).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default=None,
    help="One log line per request on stderr, as JSON or key=value text.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds a client may take to send a request's head (408 past it).",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a request body may go without a byte arriving (408 past it).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1),
    default=1000,
    show_default=True,
    help="Open connections at most (within the open-file limit); past it: 503.",
)
@worker_options
@random_weights_option
@limit_option
@click.pass_obj
def serve(
    env: Env,
    target: str,
    placement: str | None,
    sets: tuple[str, ...],
    host: str,
    port: int,
    seed: int | None,
    max_queue: int,
    plan_dir: str | None,
    ready_timeout: float,
    restarts: int,
    ray_address: str | None,
    external: str | None,
    join_timeout: float,
    random_weights: bool,
    limits: tuple[str, ...],
    api_keys: tuple[str, ...],
    insecure_no_auth: bool,
    log_format: str | None,
    header_timeout: float,
    body_timeout: float,
    max_connections: int,
) -> None:
    """Serve a model over HTTP: OpenAI-compatible routes, /v1/requests, /metrics, a playground."""
    keys = (*api_keys, *env.api_keys)
    if any(not k.strip() or any(ch.isspace() for ch in k) for k in keys):
        raise UserError("an API key is a non-empty word without spaces")
    if not keys and not insecure_no_auth and not is_loopback(host):
        raise UserError(
            f"`--host {host}` is not loopback: give an API key (`--api-key KEY` or "
            "WGC_API_KEY), or `--insecure-no-auth` to serve it to anyone who reaches it"
        )
    require_serve()
    edge = input_limits(limits)
    code = run_server(
        target,
        placement,
        sets,
        host,
        port,
        seed,
        max_queue,
        plan_dir,
        ready_timeout,
        restarts,
        Workers(ray_address, external, join_timeout),
        edge,
        random_weights,
        Front(keys, header_timeout, body_timeout, max_connections, log_format),
    )
    click.get_current_context().exit(code)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback name or address (only this machine reaches it)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Front:
    """What the HTTP front asks of clients: API keys, timeouts, the connection cap, the log."""

    api_keys: tuple[str, ...] = ()
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000
    log_format: str | None = None


def run_server(
    target: str,
    placement: str | None,
    sets: tuple[str, ...],
    host: str = "127.0.0.1",
    port: int = 8000,
    seed: int | None = None,
    max_queue: int = 64,
    plan_dir: str | None = None,
    ready_timeout: float = 600.0,
    restarts: int = 3,
    workers: Workers | None = None,
    limits: Limits | None = None,
    random_weights: bool = False,
    front: Front | None = None,
) -> int:
    """Compile when needed, then serve until stopped; the exit code (`wgc run --serve` too)."""
    from wgc_runtime.host.loading import ensure_import_root
    from wgc_runtime.host.server.guard import Guard
    from wgc_runtime.host.server.main import serve as serve_plan

    front = front or Front()
    target = model_file(target)
    placement = placement_file(placement, target)
    plan = prepare(target, placement, sets, Path(plan_dir) if plan_dir else None)
    temporary = plan != target and not plan_dir
    try:
        check_plan(plan, random_weights)
        ensure_import_root()
        html = plan_drawing(target, placement, sets, plan)
        try:
            return serve_plan(
                plan,
                host=host,
                port=port,
                seed=seed,
                max_queue=max_queue,
                plan_html=html,
                ready_timeout=ready_timeout,
                restarts=restarts,
                **(workers or Workers()).cluster_options(),
                limits=limits,
                api_keys=front.api_keys,
                guard=Guard(front.header_timeout, front.body_timeout, front.max_connections),
                log_format=front.log_format,
            )
        except deployment_errors() as exc:
            click.echo(f"error: {exc}", err=True)
            return 1
    finally:
        if temporary:
            shutil.rmtree(plan, ignore_errors=True)
