"""The compiled runtime's execution cores (`LocalCluster`: conductor + one executor per rank in
one thread) against the reference interpreter: every example family on its cpu, cpu-2rank and
cpu-3rank plans gives exactly the interpreter's outputs; batching, failures, cancel and the
admission cap behave per request."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the node modules import as `wgc_models.<family>`
    sys.path.insert(0, str(ROOT))

from wgc.interp import (  # noqa: E402
    Emitted,
    Outputs,
    RequestError,
    load_model,
    load_nodes,
    make_request,
    run_request,
    same_outputs,
    segment,
)
from wgc.ir.model import Model  # noqa: E402
from wgc_runtime.contract import messages as M  # noqa: E402
from wgc_runtime.contract.node import Node, decode_state, encode_state  # noqa: E402
from wgc_runtime.host.loading import load_plan  # noqa: E402
from wgc_runtime.host.local import Handle, LocalCluster  # noqa: E402

PLACEMENTS = ("cpu", "cpu-2rank", "cpu-3rank")
MODELS: dict[str, Model] = {}


def model(family: str) -> Model:
    if family not in MODELS:
        MODELS[family] = load_model(str(ROOT / "wgc_models" / family / f"{family}.walk"))
    return MODELS[family]


def factory(m, wrap=None):
    """Each rank's nodes from the IR (their full declared ports), optionally wrapped."""

    def build(rank):
        nodes = load_nodes(m, {n.name for n in rank.nodes}, rank.device)
        return {k: (wrap(v) if wrap else v) for k, v in nodes.items()}

    return build


def cluster(family: str, placement: str, wrap=None, **kw) -> LocalCluster:
    folder = ROOT / "generated" / family / placement
    return LocalCluster(folder, nodes_factory=factory(model(family), wrap), **kw)


def as_outputs(h: Handle) -> Outputs:
    out = Outputs()
    for o in h.outputs:
        m = o.meta
        out.emitted.append(Emitted(m["flow"], m["walk"], o.modality, o.channel, o.tensor))
    if h.error is not None:
        e = h.error
        out.error = RequestError(e.kind or "", e.message or "", e.flow, e.walk, e.node)
    return out


def reference(family: str, c: LocalCluster, req, rid: str = "request-0") -> Outputs:
    """The interpreter's outputs, with the placement's KV dtype (a bf16 cache rounds)."""
    kv_dtype = c.spec.kv_cache.dtype
    return run_request(
        model(family), req, placed=set(c.spec.placed), request_id=rid, kv_dtype=kv_dtype
    )


def describe(o: Outputs) -> str:
    return f"{[(k, len(v)) for k, v in o.by_key().items()]} error={o.error}"


# ---------------------------------------------------------------------------------- scenarios
VIDEO = torch.arange(2 * 16 * 16 * 3).reshape(2, 16, 16, 3).remainder(255).to(torch.uint8)
ACTIONS = torch.linspace(-1, 1, 16 * 7).reshape(16, 7)
STATES = torch.linspace(0, 1, 16 * 7).reshape(16, 7)
IMAGE = (
    torch.arange(32 * 32 * 3, dtype=torch.int64).reshape(32, 32, 3).remainder(251).to(torch.uint8)
)
PLANS = torch.stack([torch.full((16, 7), float(k)) for k in range(4)])


def _vjepa(**options):
    return ([segment("video", VIDEO, actions=ACTIONS, states=STATES)], ["tensor"], options)


SCENARIOS = {
    "bagel": {
        "text_to_image": ([segment("text", "a red cube")], ["image"], {}),
        "understanding": (
            [segment("image", IMAGE), segment("text", "what?")],
            ["text"],
            {"max_tokens": 6},
        ),
        "think": ([segment("text", "a cat")], ["image"], {"think": True, "max_tokens": 3}),
        "editing": ([segment("image", IMAGE), segment("text", "blue")], ["image"], {}),
        "rejects_audio": ([segment("audio", torch.zeros(10))], ["text"], {}),
    },
    "qwen3_omni": {
        "text_audio": (
            [segment("text", "hello"), segment("audio", torch.linspace(-1, 1, 1600))],
            ["text", "audio"],
            {"max_tokens": 6, "max_frames": 30},
        ),
        "text_only": ([segment("text", "hello")], ["text"], {"max_tokens": 5}),
        "sampled": (
            [segment("text", "say it")],
            ["text", "audio"],
            {"temperature": 0.9, "talker_temperature": 0.9, "max_tokens": 4, "max_frames": 26},
        ),
        "rejects_video": (
            [segment("video", torch.zeros(2, 8, 8, 3, dtype=torch.uint8)), segment("text", "?")],
            ["text", "audio"],
            {},
        ),
    },
    "orpheus": {
        **{
            f"tokens_{n}": ([segment("text", "hello")], ["audio"], {"max_tokens": n})
            for n in (35, 41, 49, 5)
        },
        "sampled": (
            [segment("text", "hi there")],
            ["audio"],
            {"temperature": 0.7, "top_p": 0.9, "voice": "mia", "max_tokens": 42},
        ),
    },
    "vjepa2_ac": {
        "single": _vjepa(),
        "rollout_4": _vjepa(rollout=True, horizon=4),
        "rollout_1": _vjepa(rollout=True, horizon=1),
        "rollout_streaming_4": _vjepa(rollout=True, horizon=4, stream_rollout=True),
        "mpc": (
            [segment("video", VIDEO, goal=VIDEO[:1], plans=PLANS, states=STATES)],
            ["action"],
            {},
        ),
    },
    "pi05": {
        "action_chunk": (
            [
                segment(
                    "image", torch.zeros(3, 16, 16, 3, dtype=torch.uint8), prompt="pick up the cup"
                )
            ],
            ["action"],
            {},
        ),
    },
}

CASES = [
    pytest.param(f, p, n, id=f"{f}-{p}-{n}")
    for f, scenarios in SCENARIOS.items()
    for p in PLACEMENTS
    for n in scenarios
]


@pytest.mark.parametrize(("family", "placement", "name"), CASES)
def test_runtime_matches_the_reference_interpreter(family, placement, name) -> None:
    inputs, want, options = SCENARIOS[family][name]
    c = cluster(family, placement)
    req = make_request(model(family), inputs, want, options)
    ref = reference(family, c, req)
    got = as_outputs(c.submit(req, "request-0").result())
    assert same_outputs(ref, got), f"reference {describe(ref)}\nruntime   {describe(got)}"
    assert all(not ex.requests for ex in c.ranks.values()), "state left after the request"


# ---------------------------------------------------------------------------------- across ranks
def test_bagel_denoising_loop_runs_across_three_ranks() -> None:
    c = cluster("bagel", "cpu-3rank")
    c.log = []
    req = make_request(model("bagel"), [segment("text", "a red cube")], ["image"])
    h = c.submit(req, "request-0").result()
    assert h.ok, h.error
    steps = 49  # `loop denoise max steps - 1`
    velocity = [m for to, m in c.log if isinstance(m, M.Value) and m.port in ("v_text", "v_img")]
    assert len(velocity) == 2 * steps  # ranks 1 and 2 send one velocity per iteration
    latents = [m for to, m in c.log if isinstance(m, M.Value) and to in (1, 2)]
    assert {dict(m.iters)["denoise"] for m in latents if m.iters} == set(range(1, steps))
    assert same_outputs(reference("bagel", c, req), as_outputs(h))


# ---------------------------------------------------------------------------------- batching
class BatchRecorder(Node):
    """Wraps a node: a batched `forward` that records the batch sizes and request ids."""

    batches: ClassVar[list[list[str]]] = []

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner

    def forward(self, batch):
        ids = [w.ctx.request_id for w in batch]
        assert len(set(ids)) == len(ids), "two instances of one request in one batch"
        BatchRecorder.batches.append(ids)
        return self.inner.forward(batch)

    def release(self, request_id):
        self.inner.release(request_id)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_concurrent_requests_at_different_loop_positions_batch_and_match(placement) -> None:
    BatchRecorder.batches = []
    c = cluster("bagel", placement, wrap=BatchRecorder)
    m = model("bagel")
    reqs = {
        f"r{i}": make_request(
            m, [segment("text", f"prompt {i}")], ["text"], {"max_tokens": 5 + 3 * i}
        )
        for i in range(4)
    }
    handles = {}
    for rid, req in reqs.items():  # staggered: each starts a few steps after the previous one
        handles[rid] = c.submit(req, rid)
        for _ in range(3):
            c.step()
    c.run()
    for rid, h in handles.items():
        assert same_outputs(reference("bagel", c, reqs[rid], rid), as_outputs(h)), rid
    assert max(len(b) for b in BatchRecorder.batches) > 1, "no batching happened"
    assert max(len(b) for b in BatchRecorder.batches) <= 4


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(SCENARIOS))
def test_every_family_batches_its_loops_across_requests_and_matches_alone(family) -> None:
    """All of a family's scenarios at once, staggered (requests join running loops between
    iterations): each request's outputs equal the interpreter's for it alone, and some call
    ran for several requests in one batch; every page is back at the end."""
    BatchRecorder.batches = []
    c = cluster(family, "cpu", wrap=BatchRecorder)
    m = model(family)
    handles, reqs = {}, {}
    for k, (inputs, want, options) in enumerate(SCENARIOS[family].values()):
        for copy in range(2):  # two of each, so even a family with one scenario batches
            rid = f"r{k}-{copy}"
            reqs[rid] = make_request(m, inputs, want, options)
            handles[rid] = c.submit(reqs[rid], rid)
            c.step()
    c.run()
    for rid, h in handles.items():
        ref = reference(family, c, reqs[rid], rid)
        assert same_outputs(ref, as_outputs(h)), (
            f"{rid}: {describe(ref)} vs {describe(as_outputs(h))}"
        )
    assert max(len(b) for b in BatchRecorder.batches) > 1, "no batching happened"
    for ex in c.ranks.values():
        assert not ex.requests and all(n == 0 for n in ex.kv.used_pages().values())


# ---------------------------------------------------------------------------------- failures
class RaiseFor(Node):
    """Raises for request `bad` in the denoising loop (its 3rd call)."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner
        self.released: list[str] = []

    def forward(self, batch):
        # a batched forward fails one item by returning its exception in that item's place
        bad = [w.ctx.request_id == "bad" and w.ctx.iteration[-1:] == (2,) for w in batch]
        good = iter(self.inner.forward([w for w, b in zip(batch, bad, strict=True) if not b]))
        return [RuntimeError("toy failure") if b else next(good) for b in bad]

    def release(self, request_id):
        self.released.append(request_id)
        self.inner.release(request_id)


def test_a_raising_node_fails_only_its_request() -> None:
    nodes_seen: list[RaiseFor] = []

    def wrap(n):
        w = RaiseFor(n)
        nodes_seen.append(w)
        return w

    c = cluster("bagel", "cpu-2rank", wrap=wrap)
    m = model("bagel")
    good = make_request(m, [segment("text", "fine")], ["image"])
    bad = make_request(m, [segment("text", "broken")], ["image"])
    hb, hg = c.submit(bad, "bad"), c.submit(good, "good")
    c.run()
    assert hb.error is not None and hb.error.kind == "node"
    assert hb.error.walk == "image_gen_cfg" and hb.error.node is not None
    assert "failed in walk `image_gen_cfg`: RuntimeError: toy failure" in (hb.error.message or "")
    assert hg.ok and same_outputs(reference("bagel", c, good, "good"), as_outputs(hg))
    assert all("bad" in n.released for n in nodes_seen)


class RaisingOne(Node):
    """Keeps the default `Node.forward`: the executor runs `forward_one` item by item."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner

    def forward_one(self, inputs, ctx):
        if ctx.request_id == "bad" and "token" in inputs:
            raise ValueError("bad token")
        return self.inner.forward_one(inputs, ctx)


def test_a_raising_forward_one_fails_only_its_request_in_a_batch() -> None:
    c = cluster("bagel", "cpu", wrap=RaisingOne)
    m = model("bagel")
    reqs = {
        rid: make_request(m, [segment("text", rid)], ["text"], {"max_tokens": 4})
        for rid in ("good", "bad", "other")
    }
    handles = {rid: c.submit(r, rid) for rid, r in reqs.items()}
    c.run()
    assert handles["bad"].error is not None
    assert handles["bad"].error.message == (
        "node `LLM` failed in walk `decode`: ValueError: bad token"
    )
    for rid in ("good", "other"):
        assert same_outputs(reference("bagel", c, reqs[rid], rid), as_outputs(handles[rid]))


class WrongDtype(Node):
    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner

    def forward(self, batch):
        out = self.inner.forward(batch)
        if self.name == "vae_decoder":
            return [{"image": o["image"].float()} for o in out]
        return out


def test_output_type_mismatch_fails_the_request_clearly() -> None:
    c = cluster("bagel", "cpu", wrap=WrongDtype)
    h = c.submit(make_request(model("bagel"), [segment("text", "x")], ["image"])).result()
    assert h.error is not None and h.error.kind == "output"
    assert "node `vae_decoder` output `image`: expected dtype u8" in (h.error.message or "")


def test_cancel_mid_loop_releases_state_everywhere() -> None:
    c = cluster("qwen3_omni", "cpu-3rank")
    m = model("qwen3_omni")
    req = make_request(
        m, [segment("text", "long")], ["text", "audio"], {"max_tokens": 900, "max_frames": 900}
    )
    h = c.submit(req, "long")
    while len(h.outputs) < 5:
        assert c.step()
    assert any(ex.requests for ex in c.ranks.values())
    h.cancel()
    h.result()
    assert h.error is not None and h.error.kind == "cancelled"
    assert all(not ex.requests for ex in c.ranks.values())
    assert not c.conductor.busy()


def test_admission_cap_queues_excess_requests() -> None:
    c = cluster("bagel", "cpu", max_concurrent_requests=1)
    m = model("bagel")
    reqs = {
        f"q{i}": make_request(m, [segment("text", f"p{i}")], ["text"], {"max_tokens": 3})
        for i in range(3)
    }
    handles = {rid: c.submit(r, rid) for rid, r in reqs.items()}
    assert c.conductor.running() == ["q0"] and c.conductor.queued() == ["q1", "q2"]
    c.run()
    for rid, h in handles.items():
        assert same_outputs(reference("bagel", c, reqs[rid], rid), as_outputs(h)), rid


def test_a_stuck_request_ends_with_a_deadlock_error_not_a_hang() -> None:
    c = cluster("bagel", "cpu")
    # drop every message to rank 0: nothing can ever progress
    c.ranks[0].deliver = lambda msg: None  # type: ignore[method-assign]
    h = c.submit(make_request(model("bagel"), [segment("text", "x")], ["text"])).result()
    assert h.error is not None and h.error.kind == "deadlock"
    assert "flow `main` waits for walk `prefill_text` (ranks 0)" in (h.error.message or "")


# ---------------------------------------------------------------------------------- node state
def test_pd_split_moves_the_llm_state_before_decode_starts() -> None:
    c = cluster("orpheus", "cpu-3rank")  # prefill on rank 0, decode on rank 1
    c.log = []
    req = make_request(model("orpheus"), [segment("text", "hello")], ["audio"], {"max_tokens": 35})
    h = c.submit(req, "request-0").result()
    assert h.ok, h.error
    kinds = [(to, type(m).__name__) for to, m in c.log]
    exports = [m for to, m in c.log if isinstance(m, M.ExportState)]
    assert [(m.node, m.from_ranks, m.to_ranks) for m in exports] == [("LLM", (0,), (1,))]
    parts = [(to, m) for to, m in c.log if isinstance(m, M.StatePart)]
    # the LLM's KV pages move (its prefill's keys and values, one part per label), and its
    # request state: the tokens so far (its repetition penalty's) and the audio position
    assert {to for to, _ in parts} == {1}
    assert {m.key for _, m in parts} == {"kv:main", "tensor:history", "int:spoken"}
    (kv,) = [m.data for _, m in parts if m.key == "kv:main"]
    # [layers, K/V, tokens, kv_heads, head_dim]: the prompt's, `tara: hello` in its specials
    assert kv.shape == (2, 2, 10, 2, 16)
    imported = kinds.index((M.CONDUCTOR, "StateImported"))
    decode = next(
        i for i, (to, m) in enumerate(c.log) if isinstance(m, M.StartWalk) and m.walk == "decode"
    )
    assert imported < decode
    assert same_outputs(reference("orpheus", c, req), as_outputs(h))


def test_bagel_pd_split_runs_on_cpu_and_matches_the_interpreter() -> None:
    conductor, ranks = load_plan(ROOT / "generated" / "bagel" / "pd-split")
    ranks = [dataclasses.replace(r, device="cpu") for r in ranks]
    c = LocalCluster((conductor, ranks), nodes_factory=factory(model("bagel")))
    for inputs, want, options in (
        ([segment("text", "a cat")], ["image"], {"think": True, "max_tokens": 3}),
        ([segment("image", IMAGE), segment("text", "what?")], ["text"], {"max_tokens": 6}),
    ):
        req = make_request(model("bagel"), inputs, want, options)
        h = c.submit(req).result()
        assert h.ok, h.error
        assert same_outputs(reference("bagel", c, req, h.id), as_outputs(h))
    assert all(not ex.requests for ex in c.ranks.values())


def test_the_default_node_factory_builds_every_node_with_its_declared_ports() -> None:
    c = LocalCluster(ROOT / "generated" / "bagel" / "cpu-3rank")  # impls from NodeSpec.impl
    cfg = c.ranks[1].nodes["LLM_cfg_text"]
    assert set(cfg.ctx.outputs) == {
        "new_token",
        "stop",
        "context",
        "velocity",
        "latents",
        "edit_velocity",
        "edit_latents",
        "time_index",
    }
    req = make_request(model("bagel"), [segment("text", "a red cube")], ["image"])
    h = c.submit(req, "request-0").result()
    assert h.ok, h.error
    assert same_outputs(reference("bagel", c, req), as_outputs(h))


class MovesItsOwnState(Node):
    """Keeps its per-request state outside `CallContext.state` (like a paged KV cache) and moves
    it with its own `export_state` / `import_state`."""

    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner
        self.held: dict[str, dict] = {}
        self.moves: list[tuple[str, str]] = []

    def forward_one(self, inputs, ctx):
        ctx.state = self.held.setdefault(ctx.request_id, {})
        return self.inner.forward_one(inputs, ctx)

    def export_state(self, request_id, kept):
        self.moves.append(("export", request_id))
        assert not kept  # nothing kept in CallContext.state by the runtime
        held = {"moved": 1, **self.held.pop(request_id, {})}
        return encode_state(self.name, held)

    def import_state(self, request_id, state, kept):
        self.moves.append(("import", request_id))
        held = decode_state(state)
        assert held.pop("moved") == 1
        self.held[request_id] = held

    def release(self, request_id):
        self.held.pop(request_id, None)


def test_a_node_can_move_state_it_keeps_itself() -> None:
    seen: list[MovesItsOwnState] = []

    def wrap(n):
        if n.name != "LLM":
            return n
        w = MovesItsOwnState(n)
        seen.append(w)
        return w

    c = cluster("orpheus", "cpu-3rank", wrap=wrap)
    req = make_request(model("orpheus"), [segment("text", "hi")], ["audio"], {"max_tokens": 20})
    h = c.submit(req, "request-0").result()
    assert h.ok, h.error
    assert [m for w in seen for m in w.moves] == [("export", "request-0"), ("import", "request-0")]
    assert same_outputs(reference("orpheus", c, req), as_outputs(h))


class CannotExport(Node):
    def __init__(self, inner: Node):
        super().__init__(inner.ctx)
        self.inner = inner

    def forward_one(self, inputs, ctx):
        out = self.inner.forward_one(inputs, ctx)
        ctx.state["handle"] = object()  # not a tensor: the default export cannot move it
        return out


def test_a_state_that_cannot_move_fails_the_request_clearly() -> None:
    c = cluster("orpheus", "cpu-3rank", wrap=lambda n: CannotExport(n) if n.name == "LLM" else n)
    req = make_request(model("orpheus"), [segment("text", "hi")], ["audio"])
    h = c.submit(req, "request-0").result()
    assert h.error is not None and h.error.kind == "node" and h.error.node == "LLM"
    assert "failed to export its state on rank 0" in (h.error.message or "")
    assert "override `export_state`" in (h.error.message or "")
    assert all(not ex.requests for ex in c.ranks.values())
