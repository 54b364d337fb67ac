"""The generated folder `wgc run` and `wgc serve` run: compiled from MODEL.walk when asked
(`prepare`), loaded and checked once before any process starts (`check_plan`), and what it says
about audio rates (the rate inputs are resampled to, the rate each audio output is written at)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wgc.cli.errors import UserError
from wgc.cli.preflight import check_deployment


def at_input_rate(plan_dir: str, segments: list[Any]) -> list[Any]:
    """The (modality, data, fields) inputs with each audio one resampled to the rate the plan's
    audio-reading node declares (`wgc_runtime.host.audio`), as the server's routes do."""
    from wgc_runtime.host.audio import RateError, at_rate, input_rate
    from wgc_runtime.host.loading import load_conductor, load_rank

    spec = load_conductor(plan_dir)
    rate = input_rate(load_rank(plan_dir, r) for r in range(spec.world_size))
    try:
        return [(mo, *at_rate(mo, d, f, rate, f"input {i}")) for i, (mo, d, f) in
                enumerate(segments)]  # fmt: skip
    except RateError as exc:
        raise UserError(str(exc)) from None


def sample_rates(plan_dir: str) -> dict[str, int]:
    """Emitted modality -> the emitting node's ``sample_rate`` config, where it has one."""
    from wgc_runtime.host.loading import load_conductor, load_rank

    out: dict[str, int] = {}
    spec = load_conductor(plan_dir)
    for r in range(spec.world_size):
        rank = load_rank(plan_dir, r)
        configs = {n.name: dict(n.config) for n in rank.nodes}
        for piece in rank.pieces:
            for call in piece.calls:
                rate = configs.get(call.node, {}).get("sample_rate")
                if not isinstance(rate, int):
                    continue
                for o in call.outputs:
                    for d in o.dests:
                        if d.kind == "client" and d.name:
                            out.setdefault(d.name, rate)
    return out


def prepare(target: str, placement: str | None, sets: tuple[str, ...], keep: Path | None) -> str:
    """The generated folder to run: ``target`` itself, or a fresh compile of MODEL.walk."""
    from wgc.cli.compile import _parse_sets, _report, resolve_names, sync
    from wgc.driver import Driver

    path, placement = resolve_names(target, placement)  # names of families, placements
    if path.is_dir():
        if placement:
            raise UserError("`--placement` is for MODEL.walk; a generated folder is already placed")
        if not (path / "conductor.py").is_file():
            raise UserError(f"`{target}` has no conductor.py: is it a `wgc compile` output?")
        return str(path)
    if not path.is_file():
        raise UserError(f"no such file or folder: `{target}`")
    if not placement:
        default = path.parent / "placements" / "cpu.yaml"
        if not default.is_file():
            raise UserError(
                "give `--placement P.yaml` to run a .walk model (no `placements/cpu.yaml` beside "
                "it to default to)"
            )
        placement = str(default)
        click.echo(f"note: no `--placement`: using `{placement}`", err=True)
    if not Path(placement).is_file():
        raise UserError(f"no such file: `{placement}`")
    result = Driver().compile(str(path), placement, _parse_sets(sets))
    _report(result, color=False)
    if not result.ok:
        raise UserError(f"`{target}` does not compile for `{placement}`")
    assert result.plan is not None
    from wgc_runtime.host.scratch import private_dir

    # a SIGKILLed `wgc run`/`wgc serve` cannot remove it: the next start sweeps it (its owner file)
    out = keep or Path(private_dir(f"wgc-run-{result.plan.model}-"))
    sync(out, result.files, check=False)
    return str(out)


def check_plan(plan_dir: str, random_weights: bool = False) -> None:
    """Load the generated modules once before any process starts: a folder from another wgc
    version, or one that does not import, is a user error with its reason; then the devices,
    weights and memory of every rank (`wgc.cli.preflight`), before any weight is built."""
    from wgc_runtime.host.loading import DeploymentError, load_plan

    try:
        load_plan(plan_dir)
        check_deployment(plan_dir, random_weights=random_weights)
    except DeploymentError as exc:
        raise UserError(str(exc)) from None


def deployment_errors() -> tuple[type[Exception], ...]:
    """What a deployment that cannot start raises: its own fault, said in one line (exit 1). A
    host that does not resolve or cannot be bound is one too (`TransportError`)."""
    from wgc_runtime.host.loading import DeploymentError
    from wgc_runtime.host.transport.sockets import TransportError

    return DeploymentError, TransportError
