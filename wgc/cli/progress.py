"""Start-up progress of `wgc run` / `wgc serve`: while the workers load their nodes' weights and
capture their steps, a progress bar (tqdm) on a terminal, the launcher's lines otherwise.

The launcher reports each process's steps as lines (``rank 0: loading `LLM` ...``, ``loaded
`LLM` in 1.2 s``, ``capturing decode:0 LLM ...``, ``captured 1 step(s) ...``, ``ready``); the
plan says how many to expect: per rank, one per node it hosts, one for its captures, one for
being ready, and one for the conductor. The bar advances on each, showing the latest line.
"""

from __future__ import annotations

import sys
from typing import Any

_DONE = ("loaded `", "captured ", "no captured steps", "ready")


def startup_steps(plan_dir: str) -> int:
    """How many step lines a start of the plan in ``plan_dir`` reports."""
    from wgc_runtime.host.loading import load_conductor, load_rank

    world = load_conductor(plan_dir).world_size
    return 1 + sum(len(load_rank(plan_dir, r).nodes) + 2 for r in range(world))


class StartupProgress:
    """The launcher's ``progress`` callback (see the module docstring)."""

    def __init__(self, total: int, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        if getattr(self.stream, "isatty", lambda: False)():
            try:
                from tqdm import tqdm
            except ImportError:  # the runtime extra brings it; without it, plain lines
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(
                    total=total, file=self.stream, unit="step", leave=False, dynamic_ncols=True
                )

    def __call__(self, line: str) -> None:
        if self.bar is None:
            print(line, file=self.stream, flush=True)
            return
        text = line.strip()
        if text.startswith("wgc: ready") or text.startswith("wgc: error"):
            self.close()
            print(line, file=self.stream, flush=True)
            return
        self.bar.set_description_str(text[:60], refresh=False)
        step = text.split(": ", 1)[-1]
        if step.startswith(_DONE):
            self.bar.update(1)
        else:
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
