"""Effective param values: the model's `param`s, then the placement's `params`, then `--set`.

`--set NAME=VALUE` on the command line wins over the YAML. Params are re-evaluated in
declaration order with the overrides pinned, so a param computed from an overridden one follows
it (`--set latent_side=64` also changes `latent_tokens = latent_side * latent_side`); an
overridden param ignores its own expression.

Only `--set` problems are reported here (WG815, at the command line): invalid YAML overrides are
reported by `wgc.placement.rules` and skipped, so a compile reports each problem once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from wgc.diagnostics.diagnostic import Diagnostic, Span, diag
from wgc.diagnostics.suggest import closest
from wgc.ir.decls import Param
from wgc.ir.expr import EvalError, Value, evaluate, in_range, int_literal
from wgc.placement.model import Placement
from wgc.placement.rules import kind_name, value_fits

COMMAND_LINE = Span("<command line>", 0, 0, 0, 0)
_DECIMAL = re.compile(r"[0-9]+")


def apply_overrides(
    model_params: Sequence[Param],
    placement: Placement | None,
    cli_sets: dict[str, str],
) -> tuple[dict[str, Value], list[Diagnostic]]:
    """(effective values of every param that has one, problems with ``cli_sets``)."""
    declared = {p.name: p for p in model_params}
    pinned: dict[str, Value] = {}
    for o in placement.params if placement is not None else ():
        p = declared.get(o.name)
        if p is not None and p.value is not None and value_fits(p.value, o.value):
            pinned[o.name] = _coerce(p.value, o.value)
    diags: list[Diagnostic] = []
    for name, text in cli_sets.items():
        got = _parse_set(declared, name, text, diags)
        if got is not None:
            pinned[name] = got
    return _evaluate(model_params, pinned), diags


def _evaluate(model_params: Sequence[Param], pinned: dict[str, Value]) -> dict[str, Value]:
    env: dict[str, Value] = {}
    for p in model_params:
        if p.name in env:
            continue  # a duplicate declaration: the names pass reports it, the first one wins
        if p.name in pinned:
            env[p.name] = pinned[p.name]
            continue
        try:
            env[p.name] = evaluate(p.expr, env)
        except EvalError:
            if p.value is not None:
                env[p.name] = p.value
    return env


def _parse_set(
    declared: dict[str, Param], name: str, text: str, diags: list[Diagnostic]
) -> Value | None:
    p = declared.get(name)
    if p is None:
        close = closest(name, list(declared))
        diags.append(
            diag(
                "WG815",
                f"`--set {name}={text}` names no param of the model",
                COMMAND_LINE,
                help=f"did you mean `{close}`?"
                if close
                else "`--set` overrides a declared `param`",
            )
        )
        return None
    if p.value is None:
        return None  # its declaration is broken: the front end reported it
    value = parse_value(p.value, text)
    if value is not None and not in_range(value):
        diags.append(
            diag(
                "WG815",
                f"`--set {name}=...`: the value is out of range",
                COMMAND_LINE,
                help="param values are 64-bit integers (-2^63 to 2^63 - 1) or finite floats",
            )
        )
        return None
    if value is None:
        diags.append(
            diag(
                "WG815",
                f"`--set {name}={text}`: param `{name}` is {kind_name(p.value)}",
                COMMAND_LINE,
                help=f"write {kind_name(p.value)}, e.g. `--set {name}={_literal(p.value)}`",
            )
        )
    return value


def parse_value(declared: Value, text: str) -> Value | None:
    """``text`` read as the kind of ``declared``, or None if it is not one."""
    text = text.strip()
    if isinstance(declared, bool):
        low = text.lower()
        return True if low == "true" else False if low == "false" else None
    digits = text.removeprefix("-").removeprefix("+")
    if isinstance(declared, int) and _DECIMAL.fullmatch(digits):
        # decimal digits, even too many for `int()` (those are far out of range anyway)
        return -int_literal(digits) if text.startswith("-") else int_literal(digits)
    try:
        if isinstance(declared, int):
            return int(text)
        if isinstance(declared, float):
            return float(text)
    except ValueError:
        return None
    return text


def _coerce(declared: Value, value: Value) -> Value:
    return float(value) if isinstance(declared, float) else value


def _literal(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
