"""Credit-based streams equal the interpreter, keep their bound, and end with one final chunk.

Random models with the stream `st: P.t -> C.u` (`gen_models.models(stream=True)`: fixed,
sliding or left-context policies, final pad or drop, P called in and out of loops), random
placements over 1–3 CPU ranks, acknowledgements delayed by 0–12 turns (`SlowAcks`), and a
random credit count per plan (1 up to the owner's buffer
capacity: written into every stream destination of the generated rank modules, as a plan with a
smaller `Dest.credits` would say). Only plans where a producer sends to an owner on another rank
count (`assume`); it runs a quarter of ``WGC_PROPERTY_EXAMPLES``. A few concurrent requests run
on `LocalCluster` with its traffic recorded; the properties:

* the outputs equal the interpreter's (`test_runtime_vs_interp.compare`);
* at every point of the traffic, a producer rank's items in flight to an owner (sent, not yet
  given back by a `StreamAck`) never exceed the credits: back-pressure bounds memory;
* every credit comes back: at the end of a successful request each producer's acknowledged
  count equals its sent count;
* each (request, stream) that announced chunks announced exactly one final chunk, and it was the
  last one announced.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from gen_models import models, placements
from generic_nodes import Generic
from test_runtime_vs_interp import DRIVER, EXAMPLES, PROPERTY, as_outputs, compare, requests

from wgc.interp import make_request, node_context, run_request
from wgc_runtime.contract.kinds import DestKind
from wgc_runtime.contract.messages import (
    ChunkReady,
    StreamAck,
    StreamAcks,
    StreamItem,
    StreamItems,
    unpack_acks,
    unpack_items,
)
from wgc_runtime.host.loading import load_plan
from wgc_runtime.host.local import LocalCluster

CREDITS = re.compile(r"credits=\d+")


class SlowAcks(LocalCluster):
    """`LocalCluster` whose `StreamAck`s take ``delay`` turns to arrive (a slow link back to the
    producer): without it every credit would be back before the producer's next step, and the
    bound would never be tested."""

    def __init__(self, folder: Path, delay: int) -> None:
        super().__init__(folder)
        self.delay = delay
        self.turn = 0
        self.held: list[tuple[int, int, StreamAck | StreamAcks]] = []  # (due turn, to, ack)

    def _send(self, to: int, msg) -> None:
        if isinstance(msg, (StreamAck, StreamAcks)) and self.delay:
            if self.log is not None:
                self.log.append((to, msg))
            self.held.append((self.turn + self.delay, to, msg))
            return
        super()._send(to, msg)

    def step(self) -> bool:
        self.turn += 1
        due = [h for h in self.held if h[0] <= self.turn]
        self.held = [h for h in self.held if h[0] > self.turn]
        self.queue.extend((to, msg) for _, to, msg in due)
        return super().step() or bool(due) or bool(self.held)


def cross_rank_streams(folder: Path) -> bool:
    """Whether some producer sends stream items to an owner on another rank."""
    _, ranks = load_plan(folder)
    return any(
        d.kind is DestKind.STREAM and d.rank is not None and d.rank != r.rank
        for r in ranks
        for piece in r.pieces
        for call in piece.calls
        for port in call.outputs
        for d in port.dests
    )


def check_traffic(log: list, credits: int, ok: set[str]) -> None:
    out: dict[tuple[str, str, int], int] = {}  # (request, stream, producer rank) -> in flight
    chunks: dict[tuple[str, str], list[bool]] = {}

    # a batch's items for one owner travel as one `StreamItems`: each counts as sent; a turn's
    # credits for one producer as one `StreamAcks`: each request's count as its `StreamAck`
    def flat_of(m) -> list:
        if isinstance(m, StreamItems):
            return list(unpack_items(m))
        return list(unpack_acks(m)) if isinstance(m, StreamAcks) else [m]

    flat = [(to, x) for to, m in log for x in flat_of(m)]
    for to, msg in flat:
        if isinstance(msg, StreamItem):
            key = (msg.request, msg.stream, msg.src_rank)
            out[key] = out.get(key, 0) + 1
            assert out[key] <= credits, f"{key}: {out[key]} items in flight, {credits} credits"
        elif isinstance(msg, StreamAck):
            key = (msg.request, msg.stream, to)
            out[key] = out.get(key, 0) - msg.count
            assert out[key] >= 0, f"{key}: more credits back than items sent"
        elif isinstance(msg, ChunkReady):
            chunks.setdefault((msg.request, msg.stream), []).append(msg.final)
    # a failed request drops what was in flight; every other gets each credit back
    left = {k: n for k, n in out.items() if k[0] in ok and n}
    assert not left, f"credits never given back: {left}"
    for key, finals in chunks.items():
        assert finals.count(True) <= 1 and (not any(finals) or finals[-1]), (key, finals)


# a quarter of the main property's examples: each costs more (only cross-rank plans count)
@pytest.mark.slow
@settings(PROPERTY, max_examples=max(10, EXAMPLES // 4))
@given(st.data())
def test_credit_streams_match_the_interpreter_and_stay_bounded(data) -> None:
    gm = data.draw(models(stream=True), "model")
    fe = DRIVER.front_end("gen.walk", gm.text)
    assume(fe.model is not None and not fe.errors)
    yaml = data.draw(placements(gm.walk_nodes), "placement")
    reqs = data.draw(st.lists(requests(), min_size=1, max_size=3), "requests")
    with tempfile.TemporaryDirectory() as tmp:
        walk, place = Path(tmp, "gen.walk"), Path(tmp, "rand.yaml")
        walk.write_text(gm.text)
        place.write_text(yaml)
        res = DRIVER.compile(str(walk), str(place))
        assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
        capacity = max(int(n) for n in re.findall(r"credits=(\d+)", "".join(res.files.values())))
        credits = data.draw(st.integers(1, capacity), "credits")
        out = Path(tmp, "out")
        out.mkdir()
        for name, content in res.files.items():
            Path(out, name).write_text(CREDITS.sub(f"credits={credits}", content))
        assume(cross_rank_streams(out))
        cluster = SlowAcks(out, data.draw(st.integers(0, 12), "ack delay"))
        cluster.log = []
        assert res.model is not None
        made = [make_request(res.model, inputs, want, options) for inputs, want, options in reqs]
        handles = {f"r{i}": cluster.submit(req, f"r{i}") for i, req in enumerate(made)}
        cluster.run()
        for i, req in enumerate(made):
            rid = f"r{i}"
            nodes = {n.name: Generic(node_context(n)) for n in res.model.nodes}
            ref = run_request(
                res.model, req, nodes, placed=set(cluster.spec.placed), request_id=rid
            )
            compare(ref, as_outputs(handles[rid]))
        assert all(not ex.requests for ex in cluster.ranks.values()), "state left after requests"
        check_traffic(cluster.log, credits, {rid for rid, h in handles.items() if h.ok})
