"""The figures of benchmarks/README.md, drawn from the JSON the benchmark scripts write (the
copies `benchmarks/all.py` keeps in benchmarks/results/) as SVG files in benchmarks/plots/.

matplotlib is imported here only, when a figure is drawn: the benchmark scripts never need it.
The files are deterministic for one matplotlib version (a fixed ``svg.hashsalt``, no date in
the metadata, text kept as text), so a redraw from the same JSON gives the same bytes and a
changed figure shows in the diff.

    .venv/bin/python benchmarks/all.py --plots-only   # redraw from benchmarks/results/
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

# The paper's rollout speed-ups and the goals (issue 12, "Measure"), at H = 4, 15, 30.
PAPER_ROLLOUT = {4: 2.08, 15: 3.76, 30: 12.5}
GOAL_ROLLOUT = {4: 2.0, 15: 4.0, 30: 10.0}
_META = ("tokens", "threads", "repeat", "load", "load_after")  # speech_tts's keys that are no side


def vjepa(ax: Any, rows: list[dict]) -> None:
    """Re-prefill / runtime (KV) against the horizon, one line per model size."""
    ax = ax[0]
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = sorted((r for r in rows if r["model"] == model), key=lambda r: r["horizon"])
        hs = [r["horizon"] for r in mine]
        ax.plot(hs, [r["native_over_runtime"] for r in mine], "o-", label=f"wgc, {model}")
    ax.plot(
        list(PAPER_ROLLOUT), list(PAPER_ROLLOUT.values()), "s--", color="gray", label="paper (GPU)"
    )
    ax.plot(
        list(GOAL_ROLLOUT),
        list(GOAL_ROLLOUT.values()),
        "_",
        color="red",
        markersize=14,
        mew=2,
        linestyle="none",
        label="goal",
    )
    ax.axhline(1.0, color="black", linewidth=0.5)
    top = max([r["native_over_runtime"] for r in rows] + list(PAPER_ROLLOUT.values()))
    ticks = [t for t in (0.5, 1, 2, 5, 10, 20, 50, 100) if t <= 1.5 * top]
    ax.set(
        xlabel="horizon H (steps)",
        ylabel="re-prefill time / runtime time",
        title="V-JEPA 2-AC rollout: speed-up of the KV cache",
        yscale="log",
    )
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.legend()


def pi05(ax: Any, rows: list[dict]) -> None:
    """Chunks/s of the runtime and of the reference loop against concurrent observations."""
    ax = ax[0]
    ns = [r["concurrency"] for r in rows]
    for side, label in (
        ("runtime", "wgc (batched across requests)"),
        ("reference", "reference loop (one at a time)"),
    ):
        ax.plot(ns, [r["chunks_per_s"][side] for r in rows], "o-", label=label)
    ax.set(
        xlabel="concurrent observations",
        ylabel="action chunks / s (median)",
        title="π0.5: action chunks per second",
        xscale="log",
    )
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_ylim(bottom=0)
    ax.legend()


def speech(ax: Any, report: dict) -> None:
    """Throughput and first-audio latency against concurrency, one line per side."""
    sides = [k for k in report if k not in _META]
    for side in sides:
        cs = sorted(report[side], key=int)
        xs = [int(c) for c in cs]
        label = side if side == "reference" else f"wgc, {side}"
        ax[0].plot(xs, [report[side][c]["throughput"] for c in cs], "o-", label=label)
        ax[1].plot(xs, [report[side][c]["first_audio_s"] for c in cs], "o-", label=label)
    xs = sorted({int(c) for s in sides for c in report[s]})
    ax[0].set(
        xlabel="concurrent requests", ylabel="audio seconds / wall second", title="TTS throughput"
    )
    ax[1].set(
        xlabel="concurrent requests",
        ylabel="first audio (s, median)",
        title="TTS first-audio latency",
    )
    for a in ax:
        a.set_xscale("log")
        a.set_xticks(xs, [str(x) for x in xs])
        a.set_ylim(bottom=0)
        a.legend()


def bagel_mixed(ax: Any, r: dict) -> None:
    """Requests/s, per-task p50 latency and memory held: one deployment vs three."""
    mib = 2**20
    sides = (("mixed", "one deployment, mixed"), ("per_task", "three, one task each"))
    colors = ("tab:blue", "tab:orange")
    for i, (side, label) in enumerate(sides):
        ax[0].bar(i, r["rps"][side]["median"], color=colors[i], label=label)
    ax[0].set_xticks([0, 1], ["mixed", "per task"])
    ax[0].set(ylabel="requests / s (median)", title="throughput")
    tasks = list(r["p50_s"]["mixed"])
    width = 0.38
    for i, (side, label) in enumerate(sides):
        xs = [j + (i - 0.5) * width for j in range(len(tasks))]
        ax[1].bar(xs, [r["p50_s"][side][t] for t in tasks], width, color=colors[i], label=label)
    ax[1].set_xticks(range(len(tasks)), tasks)
    ax[1].set(ylabel="latency p50 (s)", title="per-task latency")
    ax[1].legend(fontsize="small")
    m = r["memory"]
    three = sum(v["private"] for v in m["per_task"].values())
    ax[2].bar(0, m["mixed"]["private"] / mib, color=colors[0])
    ax[2].bar(1, three / mib, color=colors[1])
    ax[2].set_xticks([0, 1], ["one", "three"])
    ax[2].set(ylabel="private memory of the processes (MiB)", title="memory held")


# name -> (the results file it reads, its number of panels, the function drawing them)
FIGURES: dict[str, tuple[str, int, Callable[[Any, Any], None]]] = {
    "vjepa_rollout": ("vjepa_rollout", 1, vjepa),
    "pi05_actions": ("pi05_actions", 1, pi05),
    "speech_tts": ("speech_tts", 2, speech),
    "bagel_mixed": ("bagel_mixed", 3, bagel_mixed),
}


def draw(results: Path, out: Path) -> list[Path]:
    """Every figure whose results file is in ``results``, written to ``out``; the paths."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    style: dict[Any, Any] = {
        "svg.hashsalt": "wgc-benchmarks",
        "svg.fonttype": "none",
        "figure.dpi": 100,
    }
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(style):
        for name, (source, panels, fn) in FIGURES.items():
            path = results / f"{source}.json"
            if not path.is_file():
                continue
            fig, ax = plt.subplots(1, panels, figsize=(5.2 * panels, 3.8), squeeze=False)
            fn(ax[0], json.loads(path.read_text()))
            fig.tight_layout()
            target = out / f"{name}.svg"
            fig.savefig(target, format="svg", metadata={"Date": None})
            plt.close(fig)
            written.append(target)
    return written
