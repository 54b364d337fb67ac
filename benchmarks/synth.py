"""A generator of synthetic, valid `.walk` models of a given size, for scaling benchmarks.

`synth_model(n)` spreads `n` node declarations over walks of ten calls each: a call chain, a
two-branch `par`, a loop whose body carries a channel (with `yield last`), and every fifth walk
streams into the next one, which an `on STREAM` flow runs once per chunk. Every walk is reached
from a flow, every channel is read, so the model checks clean: the benchmark measures the
front end on the happy path, which is what `wgc check` spends its time on in CI.
"""

from __future__ import annotations

PER_WALK = 10


def synth_model(n_nodes: int) -> str:
    out = [
        f"# synthetic model: {n_nodes} nodes",
        "model synth",
        "param d = 8",
        "param steps = 4",
        "type T = f32[4, d]",
        "",
    ]
    n_walks = max(1, n_nodes // PER_WALK)
    streamed = {w for w in range(n_walks - 1) if w % 5 == 0}
    for i in range(n_nodes):
        w, k = divmod(i, PER_WALK)
        extra = "  in z: f32[4, d]\n" if (k == 0 and w - 1 in streamed) else ""
        out.append(
            f'node n{i}: stateless {{\n  impl "synth.nodes:N"\n  in a: T\n  in b: T\n'
            f"{extra}  out c: T\n}}\n"
        )
    for w in range(n_walks):
        if w in streamed and (w + 1) * PER_WALK < n_nodes:
            out.append(
                f"stream s{w}: n{w * PER_WALK + PER_WALK - 1}.c -> n{(w + 1) * PER_WALK}.z\n"
                "  chunk fixed(k = 1)\n  final drop\n"
            )
    main_calls = []
    on_flows = []
    for w in range(n_walks):
        ids = list(range(w * PER_WALK, min((w + 1) * PER_WALK, n_nodes)))
        if not ids:
            continue
        out.append(_walk(w, ids))
        if w - 1 in streamed:
            on_flows.append(f"flow f{w} on s{w - 1} {{\n  w{w}()\n}}\n")
        else:
            main_calls.append(f"  w{w}()")
    out.append("flow main {\n" + "\n".join(main_calls) + "\n}\n")
    out.extend(on_flows)
    return "\n".join(out)


def _walk(w: int, ids: list[int]) -> str:
    """A walk over calls `ids`: chain, par, carried loop, chain; emits its last channel."""
    lines = [f"walk w{w}(x?: f32[4, d]) {{", f"  n{ids[0]}(a = x, b = x) -> c0 = c"]
    prev = "c0"
    rest = ids[1:]
    step = 1
    while rest:
        if len(rest) >= 2 and step % 3 == 1:
            a, b, rest = rest[0], rest[1], rest[2:]
            lines.append("  par {")
            lines.append(f"    n{a}(a = {prev}, b = {prev}) -> p{step}a = c")
            lines.append(f"    n{b}(a = {prev}, b = {prev}) -> p{step}b = c")
            lines.append("  }")
            lines.append("  # join")
            prev = f"p{step}a"
            other = f"p{step}b"
            if rest:
                c, rest = rest[0], rest[1:]
                lines.append(f"  n{c}(a = {prev}, b = {other}) -> j{step} = c")
                prev = f"j{step}"
        elif len(rest) >= 2 and step % 3 == 2:
            a, b, rest = rest[0], rest[1], rest[2:]
            # `x` is carried: iteration 0 reads the walk input (or the previous loop's yield)
            lines.append(f"  loop l{w}_{step} max steps {{")
            lines.append(f"    n{a}(a = x, b = {prev}) -> g{step} = c")
            lines.append(f"    n{b}(a = g{step}, b = {prev}) -> x = c")
            lines.append("  } yield last x")
            prev = "x"
        else:
            a, rest = rest[0], rest[1:]
            lines.append(f"  n{a}(a = {prev}, b = {prev}) -> q{step} = c")
            prev = f"q{step}"
        step += 1
    lines.append(f"  emit {prev} as tensor")
    lines.append("}")
    return "\n".join(lines) + "\n"
