"""Admission by KV pages (`wgc_runtime.core.conductor.admission`), through `LocalCluster`.

BAGEL's LLM promises each request 120 pages (``config kv_tokens = 640`` per label, three labels,
pages of 16 tokens). The placements here are BAGEL's own with ``kv_cache.pages`` changed, written
to a temporary folder and compiled, so the budgets come from the real lowering (and the tests
do not depend on `generated/` being current):

* a pool of exactly two requests' pages runs two of three concurrent requests and queues the
  third, which starts the moment one of the two ends (outputs still the interpreter's);
* a pool smaller than one request is refused at submit, with the pool, its ranks, the pages
  needed and the pages there are;
* the pages promised come back when a request completes, fails, is cancelled or passes its
  deadline (the conductor's ledger `kv_used` and every rank's pools are back to 0).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the node modules import as `wgc_models.<family>`
    sys.path.insert(0, str(ROOT))

from wgc.driver import Driver  # noqa: E402
from wgc.interp import (  # noqa: E402
    Emitted,
    Outputs,
    RequestError,
    load_model,
    make_request,
    run_request,
    same_outputs,
    segment,
)
from wgc_runtime.contract.node import Node  # noqa: E402
from wgc_runtime.host.loading import load_nodes  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

BAGEL = ROOT / "wgc_models" / "bagel"
PAGES_PER_REQUEST = 120  # 640 tokens per label / 16 per page x 3 labels
MODEL = []
DRIVER = Driver()


def model():
    if not MODEL:
        MODEL.append(load_model(str(BAGEL / "bagel.walk")))
    return MODEL[0]


def compiled(tmp_path: Path, placement: str, pages: int) -> Path:
    """BAGEL's ``placement`` with ``kv_cache.pages`` set to ``pages``, compiled into tmp_path."""
    place = yaml.safe_load((BAGEL / "placements" / f"{placement}.yaml").read_text())
    place["kv_cache"]["pages"] = pages
    path = tmp_path / f"{placement}-{pages}.yaml"
    path.write_text(yaml.safe_dump(place))
    res = DRIVER.compile(str(BAGEL / "bagel.walk"), str(path))
    assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
    out = tmp_path / "out"
    out.mkdir()
    for name, text in res.files.items():
        (out / name).write_text(text)
    return out


def text_request(prompt: str, tokens: int):
    return make_request(model(), [segment("text", prompt)], ["text"], {"max_tokens": tokens})


def as_outputs(h: Handle) -> Outputs:
    out = Outputs()
    for o in h.outputs:
        m = o.meta
        out.emitted.append(Emitted(m["flow"], m["walk"], o.modality, o.channel, o.tensor))
    if h.error is not None:
        e = h.error
        out.error = RequestError(e.kind or "", e.message or "", e.flow, e.walk, e.node)
    return out


def pages_in_use(c: LocalCluster) -> dict[int, dict[str, int]]:
    for ex in c.ranks.values():
        ex.kv.check()
    return {r: ex.kv.used_pages() for r, ex in c.ranks.items()}


def assert_all_given_back(c: LocalCluster) -> None:
    assert set(c.conductor.kv_used.values()) <= {0}, c.conductor.kv_used
    assert all(set(used.values()) <= {0} for used in pages_in_use(c).values()), pages_in_use(c)


# ---------------------------------------------------------------------------------- waiting
def test_a_pool_of_two_requests_runs_two_and_queues_the_third(tmp_path) -> None:
    c = LocalCluster(compiled(tmp_path, "cpu", pages=2 * PAGES_PER_REQUEST))
    assert c.conductor.max_concurrent > 3  # pages, not the request cap, hold the third back
    (budget,) = c.spec.kv_budgets
    assert (budget.node, budget.ranks, budget.pages, budget.pages_per_request) == (
        "LLM",
        (0,),
        2 * PAGES_PER_REQUEST,
        PAGES_PER_REQUEST,
    )
    reqs = {"r0": text_request("a", 3), "r1": text_request("b", 6), "r2": text_request("c", 4)}
    handles = {rid: c.submit(req, rid) for rid, req in reqs.items()}
    assert c.conductor.running() == ["r0", "r1"] and c.conductor.queued() == ["r2"]
    assert c.conductor.kv_used == {("LLM", (0,)): 2 * PAGES_PER_REQUEST}
    assert c.conductor.kv_waits() == "the kv pool of `LLM` on rank 0 (240 of 240 pages promised)"
    while not handles["r0"].done:  # r0 decodes fewer tokens than r1: it ends first
        assert c.conductor.queued() == ["r2"], "r2 started before a request gave pages back"
        assert c.step()
    assert handles["r0"].ok and not handles["r1"].done
    assert c.conductor.running() == ["r1", "r2"] and not c.conductor.queued()
    c.run()
    for rid, h in handles.items():
        ref = run_request(model(), reqs[rid], placed=set(c.spec.placed), request_id=rid)
        assert same_outputs(ref, as_outputs(h)), rid
    assert_all_given_back(c)


def test_a_request_queued_for_pages_past_its_deadline_says_which_pool(tmp_path) -> None:
    now = [0.0]
    folder = compiled(tmp_path, "cpu", pages=PAGES_PER_REQUEST)
    c = LocalCluster(folder, clock=lambda: now[0], queue_timeout_s=5, walk_timeout_s=1e9)
    first, waiting = c.submit(text_request("a", 50), "a"), c.submit(text_request("b", 3), "b")
    c.step()
    now[0] = 6.0
    c.step()  # the deadline passes (`tick`)
    c.step()  # the client hears of it
    assert waiting.done and waiting.error is not None and waiting.error.kind == "timeout"
    assert waiting.error.message == (
        "request waited more than 5 s for admission (KV pages: the kv pool of `LLM` on rank 0 "
        "(120 of 120 pages promised))"
    )
    assert not first.done and c.conductor.kv_used == {("LLM", (0,)): PAGES_PER_REQUEST}
    first.result()
    assert first.ok
    assert_all_given_back(c)


# ---------------------------------------------------------------------------------- refusal
@pytest.mark.parametrize("placement", ["cpu", "cpu-2rank"])
def test_a_request_that_can_never_fit_is_refused_at_submit(tmp_path, placement) -> None:
    c = LocalCluster(compiled(tmp_path, placement, pages=PAGES_PER_REQUEST - 8))
    c.log = []
    h = c.submit(text_request("a", 3), "big")
    assert not c.conductor.busy(), "a request that can never fit was queued"
    c.step()
    assert h.done and h.error is not None and h.error.kind == "rejected"
    assert h.error.message == (
        "request `big` needs 120 page(s) of the kv pool of `LLM` on rank 0, which has 112: raise "
        "`kv_cache.pages` in the placement, or lower the node's `config kv_tokens`"
    )
    assert [type(m).__name__ for _, m in c.log] == ["Finished"], "a rank heard of it"
    assert_all_given_back(c)


# ---------------------------------------------------------------------------------- giving back
class FailsInDecode(Node):
    """BAGEL's LLM, raising for request `bad` at its second decode step."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner

    def forward_one(self, inputs, ctx):
        if ctx.request_id == "bad" and "token" in inputs and ctx.iteration == (1,):
            raise RuntimeError("toy failure")
        return self.inner.forward_one(inputs, ctx)


def cpu_2rank(tmp_path: Path, **options) -> LocalCluster:
    """BAGEL's cpu-2rank plan (three pools: LLM on rank 0, both CFG copies on rank 1)."""

    def nodes(rank):
        built = load_nodes(rank)
        return {k: FailsInDecode(n) if k == "LLM" else n for k, n in built.items()}

    folder = compiled(tmp_path, "cpu-2rank", pages=256)
    return LocalCluster(folder, nodes_factory=nodes, **options)


def run_until(c: LocalCluster, ready) -> None:
    while not ready():
        assert c.step(), "nothing moved"


def test_pages_come_back_after_completion_failure_cancel_and_deadline(tmp_path) -> None:
    now = [0.0]
    c = cpu_2rank(tmp_path, clock=lambda: now[0], walk_timeout_s=30)
    promised = {b.node: b.pages_per_request for b in c.spec.kv_budgets}
    assert promised == {"LLM": 120, "LLM_cfg_text": 40, "LLM_cfg_img": 40}
    m = model()
    image = make_request(m, [segment("text", "a red cube")], ["image"])

    def while_running(h: Handle) -> None:
        """The request holds its promise in every pool, and pages on both ranks (a text prompt
        goes into `main` and the image-free branch `cfg_img`, copied to rank 1)."""
        assert not h.done
        assert {k[0]: v for k, v in c.conductor.kv_used.items()} == promised
        used = pages_in_use(c)
        assert used[0]["LLM"] > 0 and used[1]["LLM_cfg_img"] > 0, used

    def in_denoise(h: Handle):
        return lambda: h.done or c.ranks[1].kv.used_pages()["LLM_cfg_img"] > 0

    # completion
    h = c.submit(image, "done")
    run_until(c, in_denoise(h))
    while_running(h)
    h.result()
    assert h.ok, h.error
    assert_all_given_back(c)

    # a node failure
    h = c.submit(text_request("x", 5), "bad").result()
    assert (
        h.error is not None and h.error.kind == "node" and "toy failure" in (h.error.message or "")
    )
    assert_all_given_back(c)

    # a cancel in the middle of image generation
    h = c.submit(image, "cancelled")
    run_until(c, in_denoise(h))
    while_running(h)
    h.cancel()
    h.result()
    assert h.error is not None and h.error.kind == "cancelled"
    assert_all_given_back(c)

    # a deadline: the walk runs past `walk_timeout_s`
    h = c.submit(image, "late")
    run_until(c, in_denoise(h))
    while_running(h)
    now[0] += 31
    c.step()
    h.result()
    assert h.error is not None and h.error.kind == "timeout", h.error
    assert "did not finish within 30 s" in (h.error.message or "")
    assert_all_given_back(c)
