"""Kill each rank of every multi-rank example at points of a request's life; time how fast
every in-flight request ends.

    .venv/bin/python benchmarks/kill_matrix.py [--trials 50] [--seed 0] [--concurrent 3]
        [--only orpheus/cpu-2rank ...] [--jobs N] [--jsonl PATH] [--markdown PATH]
    .venv/bin/python benchmarks/kill_matrix.py --report PATH.jsonl [--markdown PATH]

For each checked-in multi-rank plan (`generated/<family>/cpu-*rank*`, and the splits
whose placement names do not say so: `NAMED`) one deployment (processes,
the toy nodes, restarts allowed) is started; then for each rank, `--trials` times: a reference
request's output count is known, `--concurrent` requests are submitted, the rank is SIGKILLed at
a point drawn from the seed: **handoff** (0-40 ms after the submit, while prompts prefill and
hand over to decode, before any output), **first** (as the first output arrives), **mid** (half
way through the outputs) or **final** (at the last output but one); one more request is
submitted right after the kill (admitted during the restart). The trial passes when every
request that was in flight either failed within 1 s of the kill with a message naming the
killed rank, or finished (it held nothing there: it had not started, or its part on that rank
was done, and it waited for the restart): none waits for the watchdog (issue 34, point 1); and
the request admitted during the restart either ran once the rank was back or failed naming it.
The next trial starts once `health` is `ok` again. A trial whose requests stall (none out
`STALL_S` after the submit, or one still running `STALL_S` after the kill) records what every
process holds then (``stalled``: `Cluster.usage`, a process that does not answer says so), so a
hang shows whether a rank is stuck or a message was lost; the conductor's timeout error says
what it knew of the deaths.

Where the time goes: each trial records its phases (``--jsonl``: one line per trial, appended as
it ends, so a long run can be read, and its report made with ``--report``, at any point): the
kill until every in-flight request ended, until the late request ended, and until health is
``ok`` again (the restart: a new process importing torch and loading its nodes is most of a
trial), and each deployment its start. ``--jobs N`` runs N plans at once, each in its own
process (their restarts overlap; each plan's trials are drawn from ``--seed`` and the plan, so a
plan's trials are the same whatever the jobs).

Prints one row per plan and rank (trials, passed, the slowest end after the kill, the restart
time) and the failures; exits 1 when any trial failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wgc_runtime.host.client import Client, RequestFailed, RequestTimeout  # noqa: E402
from wgc_runtime.host.processes.launcher import Cluster  # noqa: E402

IMAGES = torch.arange(3 * 16 * 16 * 3).reshape(3, 16, 16, 3).remainder(251).to(torch.uint8)
CLIP = torch.sin(torch.linspace(0, 200, 16000)) * 0.5
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
GOAL = torch.arange(16 * 16 * 3).reshape(1, 16, 16, 3).mul(7).remainder(251).to(torch.uint8)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
PLANS = torch.stack([torch.linspace(-1, 1, 16 * 7).reshape(16, 7) * (k + 1) / 4 for k in range(4)])
PROMPT_IDS = torch.tensor([5, 17, 42, 8, 99, 23])
# family -> (segments, want, options): small requests with several outputs each
REQUESTS: dict[str, tuple[list[tuple[Any, ...]], list[str], dict[str, Any]]] = {
    "orpheus": ([("text", "hello there, how are you")], ["audio"], {"max_tokens": 84}),
    "qwen3_omni": ([("text", "hello there")], ["text", "audio"], {"max_tokens": 6}),
    "bagel": ([("text", "a cat")], ["image"], {}),
    "pi05": ([("image", IMAGES, {"prompt": "pick up the cup"})], ["action"], {}),
    "whisper": ([("audio", CLIP)], ["text"], {}),
    "vjepa2_ac": (
        [("video", VIDEO, {"goal": GOAL, "plans": PLANS, "states": STATES})],
        ["action"],
        {},
    ),
    "gpt2": ([("text", PROMPT_IDS)], ["text"], {}),
    "speculative": ([("text", PROMPT_IDS)], ["text"], {}),
}
# multi-rank plans whose placement name does not say `rank` (prefill/decode split, draft/target)
NAMED = ("generated/gpt2/cpu-pd", "generated/speculative/spec-cpu-split")
POINTS = ("handoff", "first", "mid", "final")
LIMIT = 1.0  # seconds after the kill by which every in-flight request must have ended
STALL_S = 10.0  # a trial with no progress this long records what every process holds


@dataclass
class Trial:
    plan: str
    rank: int
    point: str
    ends: list[float] = field(default_factory=list)  # seconds after the kill, per failure
    outcomes: list[str] = field(default_factory=list)  # "ok" / "failed" / "timeout", per request
    problems: list[str] = field(default_factory=list)
    restart: float = 0.0
    # seconds after the kill: every in-flight request ended, the late one ended; the trial's
    # whole time (submit to health `ok`)
    inflight: float = 0.0
    late: float = 0.0
    total: float = 0.0
    stalled: list[str] = field(default_factory=list)  # what each process held at a stall
    said: list[str] = field(default_factory=list)  # the launcher's lines, when it failed


class TimedClient(Client):
    """A client that notes when each of its requests ended (monotonic)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.ended: dict[str, float] = {}

    def _handle(self, stream, msg) -> None:  # type: ignore[override]
        super()._handle(stream, msg)
        if stream.done:
            self.ended.setdefault(stream.rid, time.monotonic())

    def _fail_all(self, why: str) -> None:
        now = time.monotonic()
        for rid, stream in self.streams.items():
            if not stream.done:
                self.ended.setdefault(rid, now)
        super()._fail_all(why)


def plans(only: list[str] | None) -> list[str]:
    found = [*ROOT.glob("generated/*/cpu-*rank*"), *(ROOT / n for n in NAMED)]
    out = sorted(str(p.relative_to(ROOT)) for p in found if p.parent.name in REQUESTS)
    return [p for p in out if only is None or p.removeprefix("generated/") in only]


def drain(stream, limit: float) -> tuple[str, int]:
    """("ok" | "failed: ..." | "timeout: ...", outputs) of ``stream``."""
    n = 0
    try:
        for _ in stream:
            n += 1
            if time.monotonic() > limit:
                return "timeout: still running", n
    except RequestTimeout as exc:
        return f"timeout: {exc}", n
    except RequestFailed as exc:
        return f"failed: {exc.error.message}", n
    return "ok", n


def held(cluster: Cluster) -> list[str]:
    """What every process holds now, in words (one that does not answer in 5 s says so)."""
    usage = cluster.usage(timeout=5.0)
    out = [f"health {cluster.health().status}"]
    for who in sorted(cluster.procs, key=Cluster._order):
        u = usage.get(who)
        if u is None:
            out.append(f"{who}: no answer")
            continue
        streams = ", ".join(f"{f.stream} {f.held}" for f in u.streams if f.held)
        out.append(
            f"{who}: {u.requests} requests, pages {dict(u.kv_pages)}"
            + (f", stream items held: {streams}" if streams else "")
        )
    return out


class StallWatch:
    """Records `held` once, when a trial's requests stall (see the module docstring)."""

    def __init__(self, cluster: Cluster, t: Trial, streams: list[Any]) -> None:
        self.cluster, self.t, self.streams = cluster, t, streams
        self.began = time.monotonic()
        self.killed_at: float | None = None
        self.first = threading.Event()  # the first output arrived
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            now = time.monotonic()
            before = self.killed_at is None and not self.first.is_set()
            if (before and now - self.began > STALL_S) or (
                self.killed_at is not None
                and now - self.killed_at > STALL_S
                and any(not s.done for s in self.streams)
            ):
                self.t.stalled = held(self.cluster)
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def outputs_of(client: Client, family: str) -> int:
    segments, want, options = REQUESTS[family]
    return len(client.run(segments, want, options, deadline=600))


def trial(cluster: Cluster, client: TimedClient, plan: str, rank: int, point: str,
          count: int, concurrent: int, rng: random.Random) -> Trial:  # fmt: skip
    family = Path(plan).parent.name
    segments, want, options = REQUESTS[family]
    t = Trial(plan, rank, point)
    began = time.monotonic()
    streams = [client.submit(segments, want, options, deadline=600) for _ in range(concurrent)]
    watch = StallWatch(cluster, t, streams)
    try:
        _run_trial(cluster, client, t, streams, watch, rank, point, count, rng)
    finally:
        watch.close()
    t.total = time.monotonic() - began
    return t


def _run_trial(cluster: Cluster, client: TimedClient, t: Trial, streams: list[Any],
               watch: StallWatch, rank: int, point: str, count: int,
               rng: random.Random) -> None:  # fmt: skip
    segments, want, options = REQUESTS[Path(t.plan).parent.name]
    first = iter(streams[0])
    if point == "handoff":
        time.sleep(rng.uniform(0, 0.04))
    else:
        at = {"first": 1, "mid": max(1, count // 2), "final": max(1, count - 1)}[point]
        for _ in range(at):
            try:
                next(first)
            except (StopIteration, RequestFailed):
                break
            watch.first.set()
    killed_at = watch.killed_at = time.monotonic()
    cluster.kill(f"rank {rank}")
    late = client.submit(segments, want, options, deadline=600)
    for s in streams:
        outcome, _ = drain(s, killed_at + 600)
        end = client.ended.get(s.rid, time.monotonic()) - killed_at
        if outcome.startswith("failed") and f"rank {rank}" not in outcome:
            t.problems.append(f"failed without naming rank {rank}: {outcome}")
        t.outcomes.append(outcome.split(":")[0])
        if outcome.startswith("timeout") or (outcome.startswith("failed") and end > LIMIT):
            t.problems.append(f"ended {end:.2f} s after the kill ({outcome[:120]})")
        if outcome.startswith("failed"):
            t.ends.append(end)
    t.inflight = time.monotonic() - killed_at
    outcome, _ = drain(late, killed_at + 600)
    t.late = time.monotonic() - killed_at
    if outcome.startswith("timeout") or (
        outcome.startswith("failed") and f"rank {rank}" not in outcome
    ):
        t.problems.append(f"the request admitted during the restart: {outcome[:160]}")
    deadline = time.monotonic() + 600
    while cluster.health().status != "ok" and time.monotonic() < deadline:
        time.sleep(0.05)
    t.restart = time.monotonic() - killed_at


def run_plan(plan: str, trials: int, concurrent: int, seed: int, jsonl: Path | None) -> list[Trial]:
    family = Path(plan).parent.name
    rng = random.Random(f"{seed}/{plan}")
    cwd = os.getcwd()
    os.chdir(ROOT)  # workers import node impls relative to the project root
    t0 = time.monotonic()
    try:
        # the supervisor's lines (a death, a restart, a conductor it could not reach): kept
        # with a trial that failed
        lines: list[str] = []
        cluster = Cluster(plan, progress=lines.append, ready_timeout=600, restarts=10**6)
        cluster.start()
    finally:
        os.chdir(cwd)
    _log(jsonl, {"plan": plan, "start": time.monotonic() - t0})
    out: list[Trial] = []
    try:
        client = TimedClient(cluster.client_address, idle_timeout=600)
        with client:
            count = outputs_of(client, family)
            for _ in range(trials):  # round by round: a partial run covers every rank
                for rank in range(cluster.world):
                    point = rng.choice(POINTS)
                    del lines[:]
                    t = trial(cluster, client, plan, rank, point, count, concurrent, rng)
                    if t.problems:
                        t.said = [ln for ln in list(lines) if ln.startswith("wgc:")]
                    out.append(t)
                    _log(jsonl, dataclasses.asdict(t))
                    print(
                        f"{plan} rank {rank} {point}: {'ok' if not t.problems else 'FAILED'}; "
                        f"in flight ended {t.inflight:.2f} s, late {t.late:.2f} s, restart "
                        f"{t.restart:.2f} s, trial {t.total:.2f} s",
                        file=sys.stderr,
                        flush=True,
                    )
    finally:
        cluster.stop()
    return out


def _log(jsonl: Path | None, row: dict[str, Any]) -> None:
    if jsonl is not None:
        with jsonl.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path: Path) -> tuple[list[Trial], dict[str, float]]:
    """The trials and the deployments' start times a ``--jsonl`` log holds so far."""
    trials, starts = [], {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written
        if "start" in row:
            starts[row["plan"]] = row["start"]
        else:
            trials.append(Trial(**row))
    return trials, starts


def parallel(opts: argparse.Namespace, todo: list[str]) -> int:
    """Run ``todo``'s plans ``opts.jobs`` at a time, each in a process of its own that appends
    to ``opts.jsonl``; the exit status: 1 when any trial failed."""
    rc, running = 0, []
    base = [sys.executable, __file__, "--trials", str(opts.trials), "--seed", str(opts.seed)]
    base += ["--concurrent", str(opts.concurrent), "--jsonl", str(opts.jsonl)]
    for plan in todo:
        while len(running) >= opts.jobs:
            rc |= running.pop(0).wait() != 0
        only = plan.removeprefix("generated/")
        running.append(subprocess.Popen([*base, "--only", only], stdout=subprocess.DEVNULL))
    for p in running:
        rc |= p.wait() != 0
    return rc


def report(results: list[Trial]) -> str:
    lines = [
        "| plan | rank | trials (handoff / first / mid / final) | passed | requests failed / "
        "finished | slowest failure after the kill | restart (median) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted({(t.plan, t.rank) for t in results})
    for plan, rank in keys:
        ts = [t for t in results if (t.plan, t.rank) == (plan, rank)]
        by = "/".join(str(sum(t.point == p for t in ts)) for p in POINTS)
        passed = sum(not t.problems for t in ts)
        slowest = max((e for t in ts for e in _ends(t)), default=0.0)
        restart = sorted(t.restart for t in ts)[len(ts) // 2]
        failed = sum(o == "failed" for t in ts for o in t.outcomes)
        ok = sum(o == "ok" for t in ts for o in t.outcomes)
        lines.append(
            f"| `{plan.removeprefix('generated/')}` | {rank} | {len(ts)} ({by}) | {passed} | "
            f"{failed} / {ok} | {slowest * 1000:,.0f} ms | {restart:.1f} s |"
        )
    bad = [t for t in results if t.problems]
    worst = max((e for t in results for e in _ends(t)), default=0.0)
    spent = sum(t.total for t in results)
    restart = sum(t.restart for t in results)
    lines += [
        "",
        f"{len(results)} trials, {len(bad)} failed; the slowest failure {worst * 1000:,.0f} ms "
        f"after its kill; {spent / 60:.1f} min in trials, {restart / max(spent, 1e-9):.0%} of it "
        "from the kill until health was `ok` again",
    ]
    for t in bad:
        said = sorted(set(t.problems), key=t.problems.index)
        times = f" ({len(t.problems)} requests)" if len(said) < len(t.problems) else ""
        lines.append(f"- `{t.plan}` rank {t.rank} at {t.point}{times}: {'; '.join(said)}")
        if t.stalled:
            lines.append(f"  - held at the stall: {'; '.join(t.stalled)}")
        if t.said:
            lines.append(f"  - the launcher said: {'; '.join(t.said)}")
    return "\n".join(lines)


def _ends(t: Trial) -> list[float]:
    """When each failed request of ``t`` ended after the kill (a log of an earlier version
    kept the late ones only in its problems)."""
    late = [float(m) for p in t.problems for m in re.findall(r"ended ([0-9.]+) s after", p)]
    return [*t.ends, *late]


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=50, help="kills per rank of each plan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--concurrent", type=int, default=3, help="requests in flight at the kill")
    ap.add_argument("--only", nargs="+", help="plans as FAMILY/PLACEMENT")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--jsonl", type=Path, help="append each trial here as it ends")
    ap.add_argument("--jobs", type=int, default=1, help="plans run at once (needs --jsonl)")
    ap.add_argument("--report", type=Path, help="only print the report of a --jsonl log")
    opts = ap.parse_args()
    if opts.report is not None:
        results, _ = read_jsonl(opts.report)
    elif opts.jobs > 1:
        if opts.jsonl is None:
            ap.error("--jobs needs --jsonl (the processes report there)")
        parallel(opts, plans(opts.only))
        results, _ = read_jsonl(opts.jsonl)
    else:
        results = []
        for plan in plans(opts.only):
            results += run_plan(plan, opts.trials, opts.concurrent, opts.seed, opts.jsonl)
            bad = sum(bool(t.problems) for t in results)
            print(f"{plan}: {len(results)} trials so far, {bad} failed", file=sys.stderr)
    text = report(results)
    print(text)
    if opts.markdown:
        opts.markdown.write_text(text + "\n", encoding="utf-8")
    return 1 if any(t.problems for t in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
