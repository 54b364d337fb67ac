"""No KV page outlives its request: 1,000 random requests on two-rank, BAGEL-shaped plans.

The model is `kv_toy`'s (BAGEL's KV story in miniature: `LLM` with labels ``main`` and ``cfg``,
forks on prefill, a CFG-parallel denoising loop whose copy `LLM_cfg` reads ``cfg``), compiled
with two placements: ``cfg-on-rank-1`` (`LLM` on rank 0, `LLM_cfg` on rank 1: the label is
copied there before each denoising walk) and ``decode-on-rank-1`` (`LLM`'s decode also runs on
rank 1, so its pages move between the ranks twice per request, beside the label copy). Pools
are small (three requests' pages on a rank), so admission by pages queues requests.

A seeded RNG mixes requests that complete, fail in a node (any node, any walk), append more
than any pool holds (the allocator refuses: a node failure), are cancelled (queued or running)
and pass their walk deadline (rank 1 drops the request's values, so a walk never ends; the
conductor's clock counts steps). After every request ends, every rank's allocator invariants
hold (`KvPools.check`) and no pool holds more pages than the conductor promised; at the end no
page is in use anywhere and the conductor's ledger is back to 0.

And one pool that fills up under a handoff (Orpheus's prefill/decode split: a request's KV
pages move from rank 0 to rank 1, where a node that appended far past its promise holds every
page) fails the moving request with the pool's numbers, not the rank.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.narrow import present

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from kv_toy import PLACEMENTS as TOY_PLACEMENTS
from kv_toy import WALK, compile_into, nodes

from wgc_runtime.contract import messages as M
from wgc_runtime.contract.flow import Segment
from wgc_runtime.contract.node import Node
from wgc_runtime.host.loading import load_nodes
from wgc_runtime.host.local import Handle, LocalCluster

SETTINGS = """\
kv_cache: {page_size: 4, pages: 24, dtype: f32}
batching: {max_batch: 4, capture: [1, 2, 4]}
max_concurrent_requests: 8
"""
PLACEMENTS = {k: TOY_PLACEMENTS[k] for k in ("cfg-on-rank-1", "decode-on-rank-1")}
# every pool (node, ranks) with its pages and pages per request: 16 tokens per label in pages
# of 4, two labels (three requests fit), or the copy's one label
BUDGETS = {
    "cfg-on-rank-1": {("LLM", (0,), 24, 8), ("LLM_cfg", (1,), 24, 4)},
    "decode-on-rank-1": {("LLM", (0,), 24, 8), ("LLM", (1,), 24, 8), ("LLM_cfg", (1,), 24, 4)},
}

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 1000
WALK_TIMEOUT = 200  # conductor clock ticks (one per cluster step): far above any real walk


# ---------------------------------------------------------------------------------- requests
@dataclass
class Planned:
    """One random request and what should become of it."""

    segments: list[Segment]
    wants: list[str]
    options: dict
    fate: str  # ok | fail | overflow | cancel | deadline
    cancel_after: int = 0  # cluster steps after submitting


FAILS = ("LLM:prefill", "LLM:decode", "LLM:gen", "LLM_cfg:gen", "combine:gen")


def plan(rng: random.Random) -> Planned:
    segments = [
        Segment("tensor", torch.rand(rng.randint(1, 4), 4, generator=_gen(rng)))
        for _ in range(rng.randint(1, 2))
    ]
    options: dict = {"eos_after": rng.randint(1, 6)}
    fate = rng.choices(("ok", "fail", "overflow", "cancel", "deadline"), (50, 15, 5, 20, 10))[0]
    wants = rng.choice((["text"], ["tensor"], ["text", "tensor"]))
    if fate == "fail":
        options["fail"] = rng.choice(FAILS)
        walk = options["fail"].split(":")[1]
        if walk == "decode":
            wants = ["text", *(w for w in wants if w != "text")]
        elif walk == "gen":
            wants = [*(w for w in wants if w != "tensor"), "tensor"]
    elif fate == "overflow":
        options["overflow"] = True
    elif fate == "deadline":
        wants = [*(w for w in wants if w != "tensor"), "tensor"]  # it stalls in `gen` at least
    return Planned(segments, wants, options, fate, rng.randint(0, 30))


def _gen(rng: random.Random) -> torch.Generator:
    return torch.Generator().manual_seed(rng.getrandbits(32))


def expected_end(p: Planned, h: Handle, cancelled: bool) -> None:
    f = h.finished
    assert f is not None
    if cancelled:
        assert f.kind == "cancelled", (p, f)
    elif p.fate == "ok":
        assert f.ok, (p, f)
        assert {o.modality for o in h.outputs} == set(p.wants), p
    elif p.fate == "fail":
        assert f.kind == "node" and "toy failure" in (f.message or ""), (p, f)
    elif p.fate == "overflow":
        assert f.kind == "node" and "kv pool full" in (f.message or ""), (p, f)
    elif p.fate == "deadline":
        assert f.kind == "timeout" and "did not finish within" in (f.message or ""), (p, f)


# ---------------------------------------------------------------------------------- the test
@pytest.fixture(params=sorted(PLACEMENTS))
def placement(request, tmp_path) -> tuple[str, Path]:
    name = request.param
    (tmp_path / "kvtoy.walk").write_text(WALK)
    (tmp_path / f"{name}.yaml").write_text(PLACEMENTS[name] + SETTINGS)
    return name, compile_into(tmp_path, tmp_path / "kvtoy.walk", tmp_path / f"{name}.yaml")


def build(plan_dir: Path, clock) -> tuple[LocalCluster, set[str]]:
    """The cluster, and the ids whose values rank 1 drops (a walk of theirs never ends)."""
    stalled: set[str] = set()
    c = LocalCluster(
        plan_dir,
        nodes_factory=nodes,
        clock=clock,
        walk_timeout_s=WALK_TIMEOUT,
        idle_timeout_s=WALK_TIMEOUT,
        queue_timeout_s=1e12,  # waiting for pages is not a fate here
    )
    deliver = c.ranks[1].deliver

    def dropping(msg) -> None:
        if not (isinstance(msg, M.Value) and msg.request in stalled):
            deliver(msg)

    c.ranks[1].deliver = dropping  # type: ignore[method-assign]
    return c, stalled


def check_pools(c: LocalCluster) -> None:
    """Every allocator is consistent and holds no more than the conductor promised."""
    for ex in c.ranks.values():
        ex.kv.check()
    for b in c.spec.kv_budgets:
        used = sum(c.ranks[r].kv.used_pages()[b.node] for r in b.ranks)
        assert used <= c.conductor.kv_used.get((b.node, b.ranks), 0), (b, used)


@pytest.mark.slow
def test_a_thousand_random_requests_leave_no_kv_page_behind(placement) -> None:
    name, plan_dir = placement
    now = [0.0]
    c, stalled = build(plan_dir, lambda: now[0])
    budgets = {(b.node, b.ranks, b.pages, b.pages_per_request) for b in c.spec.kv_budgets}
    assert budgets == BUDGETS[name]
    rng = random.Random(20261201)
    todo = [plan(rng) for _ in range(REQUESTS)]
    live: dict[str, tuple[Planned, Handle, int]] = {}  # id -> (plan, handle, steps so far)
    cancelled: set[str] = set()
    ends: dict[str, int] = {}
    peak_queue = idle = 0
    i = 0
    while todo or live:
        while todo and len(live) < 10:  # more than admission takes: the rest wait for pages
            p, rid = todo.pop(0), f"r{i}"
            i += 1
            if p.fate == "deadline":
                stalled.add(rid)
            request = c.request(p.segments, p.wants, p.options)
            live[rid] = (p, c.submit(request, rid), 0)
        peak_queue = max(peak_queue, len(c.conductor.queued()))
        now[0] += 1
        if c.step():
            idle = 0
        else:  # only stalled requests are left: let their deadline pass
            idle += 1
            assert idle < 3, f"nothing moves: running {c.conductor.running()}, queued " + (
                f"{c.conductor.queued()} ({c.conductor.kv_waits()})"
            )
            now[0] += WALK_TIMEOUT
        for rid, (p, h, steps) in list(live.items()):
            if not h.done and p.fate == "cancel" and steps == p.cancel_after:
                h.cancel()
                cancelled.add(rid)
            live[rid] = (p, h, steps + 1)
            if h.done:
                del live[rid]
                check_pools(c)
                expected_end(p, h, rid in cancelled)
                kind = "ok" if h.ok else str(present(present(h.finished).kind, "fail kind"))
                ends[kind] = ends.get(kind, 0) + 1
    assert sum(ends.values()) == REQUESTS
    assert min(ends.get(k, 0) for k in ("ok", "node", "cancelled", "timeout")) >= 50, ends
    assert peak_queue > 0, "admission by pages never queued a request"
    for r, ex in c.ranks.items():
        assert set(ex.kv.used_pages().values()) == {0}, (r, ex.kv.used_pages())
        assert not ex.requests, f"rank {r} keeps request state"
        ex.kv.check()
    assert set(c.conductor.kv_used.values()) == {0}, c.conductor.kv_used
    assert not c.conductor.busy()


# ---------------------------------------------------------------------------------- a full pool
class Hog(Node):
    """Orpheus's LLM; for request `hog`, its first decode call then fills the rank's pool
    (leaving room in its last page for the few tokens it still decodes), past what admission
    promised it (which the LLM itself would refuse: here it is told not to)."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner
        inner.kv_tokens = 1 << 30  # pyright: ignore[reportAttributeAccessIssue]

    def forward_one(self, inputs, ctx):
        out = self.inner.forward_one(inputs, ctx)
        if ctx.request_id == "hog" and ctx.walk == "decode" and ctx.iteration == (0,):
            kv = present(ctx.kv, "kv cache")
            fill = kv.pool.num_pages * kv.pool.page_size - 8 - kv.length()
            zeros = torch.zeros(kv.layers, fill, kv.kv_heads, kv.head_dim)
            kv.append(zeros, zeros)
        return out


def test_a_pool_full_at_a_handoff_fails_the_moving_request_not_the_rank(tmp_path) -> None:
    orpheus = ROOT / "wgc_models" / "orpheus"
    folder = compile_into(tmp_path, orpheus / "orpheus.walk", orpheus / "placements/cpu-3rank.yaml")
    c = LocalCluster(
        folder,
        nodes_factory=lambda r: {k: Hog(n) if k == "LLM" else n for k, n in load_nodes(r).items()},
    )
    hog = c.submit(c.request([Segment("text", "hello")], ["audio"], {"max_tokens": 4}), "hog")
    pool = c.ranks[1].kv.pool("LLM")  # decode's rank
    while pool.free_pages:
        assert c.step(), "the hog never filled the pool"
    moved = c.submit(c.request([Segment("text", "hi")], ["audio"], {"max_tokens": 3}), "moved")
    c.run()
    assert hog.ok, hog.error
    f = moved.finished
    assert f is not None and not f.ok and f.node == "LLM"
    assert (f.message or "").startswith(
        "rank 1 cannot take the kv cache of `LLM`: kv pool full: `moved`/`main` (+"
    ), f.message
    need = "needs 1 page(s) of 16 tokens, 0 of 1088 pages are free and unreserved"
    assert need in (f.message or "")
    for ex in c.ranks.values():
        ex.kv.check()
        assert set(ex.kv.used_pages().values()) <= {0} and not ex.requests
    assert set(c.conductor.kv_used.values()) == {0}
