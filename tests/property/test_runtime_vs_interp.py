"""The compiled runtime gives exactly the reference interpreter's outputs, on random models.

For each example: a random valid model (`gen_models.models`: loops with carried / invariant
channels, `until` with and without `nospeculate`, `yield last` / `yield all`, `par`, emits in
and after loops, `persist` then a later walk, `repeat` / `if` / `for`+`match` flows, two flows
side by side, a kv-cache node whose state threads through the request, a stream consumed by an
`on` flow), a random placement over 1–3 CPU ranks (per-walk placement that moves the kv-cache
state between ranks, tensor-parallel pairs, batch size 1–4), compiled with `Driver.compile` into
a temporary folder and run by `LocalCluster` with the generated node specs; every node is
`generic_nodes.Generic`. A few random requests (input segments, `stop_at` / `flag` options,
wanted modalities, sometimes a call told to raise) run *concurrently* on the cluster and one by
one on the interpreter; the property: the same success or failure (error kind and message), on
success the same emitted values per (flow, walk, modality, channel) with their loop iterations,
bit for bit (as multisets: see `emitted`), and no request state left on any rank.

The bugs the property found are kept below as minimal regression cases (pinned as
`xfail(strict=True)` while open; the generator avoids an open one's shape, marked ``KNOWN BUG``).
``WGC_PROPERTY_EXAMPLES`` overrides the example count (e.g. 500 for a longer hunt);
``WGC_PROPERTY_NESTED`` the count of `test_runtime_matches_the_interpreter_on_nested_carries`
(models whose every top-level loop of `w0` carries a value an inner loop yields: 20 seeded
ones by default, random ones when set; 1,000 is the documented long run, see below).
Cost: about 0.07 s per example on a laptop-class core (compile + cluster + interpreter).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # --import-mode=importlib: no package for tests/

from gen_models import MODALITIES, models, placements
from generic_nodes import Generic

from wgc.driver import Driver
from wgc.interp import (
    Emitted,
    Outputs,
    RequestError,
    make_request,
    node_context,
    run_request,
    segment,
)
from wgc_runtime.host.local import Handle, LocalCluster

DRIVER = Driver()
WALKS = ("w0", "w1", "w2", "w3", "wc")
EXAMPLES = int(os.environ.get("WGC_PROPERTY_EXAMPLES", 200 if os.environ.get("CI") else 50))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def as_outputs(h: Handle) -> Outputs:
    out = Outputs()
    for o in h.outputs:
        m = o.meta
        it = tuple(m.get("iters") or ())
        out.emitted.append(Emitted(m["flow"], m["walk"], o.modality, o.channel, o.tensor, it))
    if h.error is not None:
        e = h.error
        out.error = RequestError(e.kind or "", e.message or "", e.flow, e.walk, e.node)
    return out


@st.composite
def requests(draw) -> tuple[list, list[str], dict]:
    n = draw(st.integers(0, 2))
    inputs = [
        segment(
            "tensor",
            torch.tensor(
                draw(st.lists(st.integers(-64, 64), min_size=4, max_size=4)), dtype=torch.float32
            )
            / 8,
        )
        for _ in range(n)
    ]
    want = draw(st.lists(st.sampled_from(MODALITIES), unique=True, min_size=1))
    options = {"stop_at": draw(st.integers(1, 3)), "flag": draw(st.booleans())}
    if draw(st.integers(0, 4)) == 0:  # make one call raise: the request fails
        options |= {"fail_walk": draw(st.sampled_from(WALKS)), "fail_call": draw(st.integers(0, 6))}
    return inputs, sorted(want), options


def _order(item: tuple) -> tuple:
    it, v = item
    if v is None:
        return (it, "", (), b"")
    return (it, str(v.dtype), tuple(v.shape), v.contiguous().numpy().tobytes())


def emitted(o: Outputs) -> dict[tuple, list]:
    """Emitted (iteration, value) per (flow, walk, modality, channel), as a sorted multiset.

    Not `Outputs.by_key`'s order: statements run as data allows, so two emits may come either
    way. The iterations still pin each value of a loop to its step."""
    out: dict[tuple, list] = {}
    for e in o.emitted:
        out.setdefault((e.flow, e.walk, e.modality, e.channel), []).append((e.iteration, e.value))
    return {k: sorted(v, key=_order) for k, v in out.items()}


def describe(o: Outputs) -> str:
    keys = {
        k: [(it, None if v is None else tuple(v.shape)) for it, v in vs]
        for k, vs in emitted(o).items()
    }
    return f"{keys} error={o.error and (o.error.kind, o.error.message)}"


def compare(ref: Outputs, got: Outputs) -> None:
    both = f"reference {describe(ref)}\nruntime   {describe(got)}"
    assert (ref.error is None) == (got.error is None), both
    if ref.error is not None:
        assert got.error is not None and ref.error.kind == got.error.kind, both
        assert ref.error.message == got.error.message, both
        return
    ka, kb = emitted(ref), emitted(got)
    assert ka.keys() == kb.keys(), both
    for key, xs in ka.items():
        ys = kb[key]
        assert [i for i, _ in xs] == [i for i, _ in ys], f"{key}: iterations differ\n{both}"
        for (it, x), (_, y) in zip(xs, ys, strict=True):
            assert (x is None) == (y is None), f"{key} at {it}\n{both}"
            if x is not None:
                assert x.dtype == y.dtype and x.shape == y.shape, f"{key} at {it}\n{both}"
                assert torch.equal(x, y), f"{key} at {it}: reference {x}, runtime {y}"


def check(text: str, yaml: str, reqs: list) -> None:
    """Compile ``text`` with placement ``yaml``, run ``reqs`` (``(inputs, want, options)``)
    concurrently on `LocalCluster` and one by one on the interpreter, and compare."""
    with tempfile.TemporaryDirectory() as tmp:
        walk, place = Path(tmp, "gen.walk"), Path(tmp, "rand.yaml")
        walk.write_text(text)
        place.write_text(yaml)
        res = DRIVER.compile(str(walk), str(place))
        assert res.ok, [(d.code, d.message) for d in res.diagnostics if d.is_error]
        out = Path(tmp, "out")
        out.mkdir()
        for name, content in res.files.items():
            Path(out, name).write_text(content)
        cluster = LocalCluster(out)  # nodes from the generated NodeSpecs (`generic_nodes`)
        model = res.model
        assert model is not None
        made = [make_request(model, inputs, want, options) for inputs, want, options in reqs]
        handles = {f"r{i}": cluster.submit(req, f"r{i}") for i, req in enumerate(made)}
        cluster.run()
        for i, req in enumerate(made):
            rid = f"r{i}"
            nodes = {n.name: Generic(node_context(n)) for n in model.nodes}
            ref = run_request(model, req, nodes, placed=set(cluster.spec.placed), request_id=rid)
            try:
                compare(ref, as_outputs(handles[rid]))
            except AssertionError as exc:
                raise AssertionError(f"request {rid} {reqs[i]}: {exc}") from None
        assert all(not ex.requests for ex in cluster.ranks.values()), "state left after requests"


@pytest.mark.slow
@PROPERTY
@given(st.data())
def test_runtime_matches_the_interpreter_on_random_models(data) -> None:
    gm = data.draw(models(), "model")
    fe = DRIVER.front_end("gen.walk", gm.text)
    assume(fe.model is not None and not fe.errors)
    yaml = data.draw(placements(gm.walk_nodes), "placement")
    reqs = data.draw(st.lists(requests(), min_size=1, max_size=3), "requests")
    check(gm.text, yaml, reqs)


# Every model with the nested-carry shape (an inner loop's `yield last` is the outer loop's next
# carried value), `until` at either level, streams pushed inside loops: a seeded subset here
# (derandomized: the same examples every run); the long run (>= 1,000 graphs, random) is
#   WGC_PROPERTY_NESTED=1000 .venv/bin/python -m pytest -q \
#       tests/property/test_runtime_vs_interp.py -k nested_carries
NESTED = int(os.environ.get("WGC_PROPERTY_NESTED", 20))


@pytest.mark.slow
@settings(PROPERTY, max_examples=NESTED, derandomize="WGC_PROPERTY_NESTED" not in os.environ)
@given(st.data())
def test_runtime_matches_the_interpreter_on_nested_carries(data) -> None:
    gm = data.draw(models(nested=True), "model")
    fe = DRIVER.front_end("gen.walk", gm.text)
    assert fe.model is not None and not fe.errors, [(d.code, d.message) for d in fe.errors]
    yaml = data.draw(placements(gm.walk_nodes), "placement")
    reqs = data.draw(st.lists(requests(), min_size=1, max_size=3), "requests")
    check(gm.text, yaml, reqs)


# ---------------------------------------------------------------------------------- found bugs
# Minimal programs the property found, each a divergence between the runtime and the
# interpreter (fixed ones stay as regression tests; open ones are strict xfails that
# `gen_models` steers around, see its KNOWN BUG comments).
HEAD = """model bug
option stop_at: int = 2
node N0: stateless { impl "generic_nodes:Generic" in a: f32[4] out x: f32[4] out s: bool[] }
node N1: stateless { impl "generic_nodes:Generic" in a: f32[4] out x: f32[4] out s: bool[] }
"""
STREAM = """node P: stateless { impl "generic_nodes:Generic" in a: f32[4] out t: f32[1] }
node C: stateless { impl "generic_nodes:Generic" in u: f32[2] out x: f32[4] }
stream st: P.t -> C.u chunk fixed(k = 2) final pad
walk wc() { C() -> cx = x  emit cx as audio }
flow codec on st { wc() }
"""
ONE_RANK = "devices: [cpu]\nplace:\n  - {nodes: [N0, N1], ranks: [0]}\n"
REQUEST = [([segment("tensor", torch.ones(4))], ["tensor", "text", "audio"], {})]


def test_double_emit() -> None:
    # every `emit` emits: the plan keeps one client destination per `emit`, equal or not
    check(
        HEAD + "walk w(i?: f32[4]) { N0(a = i) -> c = x  emit c as tensor  emit c as tensor }\n"
        "flow main { w() }\n",
        ONE_RANK,
        REQUEST,
    )


def test_emitted_channel_name() -> None:
    # the client sees the channel (`c`), not the producer's port (`x`): `Dest.channel`
    text = HEAD + "walk w(i?: f32[4]) { N0(a = i) -> c = x  emit c as tensor }\nflow main { w() }\n"
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "m.walk").write_text(text)
        Path(tmp, "p.yaml").write_text(ONE_RANK)
        res = DRIVER.compile(str(Path(tmp, "m.walk")), str(Path(tmp, "p.yaml")))
        for name, content in res.files.items():
            Path(tmp, name).write_text(content)
        assert res.model is not None
        h = LocalCluster(tmp).submit(make_request(res.model, [], ["tensor"])).result()
    assert [o.channel for o in h.outputs] == ["c"]


def test_walk_without_calls() -> None:
    # no rank runs a piece of `w1`: the rank keeping `c` emits it and answers `WalkDone`
    # (`ForwardPersisted.ack`), so the walk does not end before its emit is out
    check(
        HEAD + "walk w0(i?: f32[4]) { N0(a = i) -> c = x  persist c }\n"
        "walk w1(g: f32[4]) { emit g as text }\n"
        "flow main { w0() w1(g = c) }\n",
        ONE_RANK,
        REQUEST,
    )


def _loop_emitting(channel: str) -> str:
    return HEAD + (
        "walk w(i?: f32[4]) {\n  N0(a = i) -> c = x\n"
        f"  loop L max 3 {{ N1(a = c) -> d = x  emit {channel} as tensor }} yield last d\n"
        "  emit d as text\n}\nflow main { w() }\n"
    )


@pytest.mark.parametrize("channel", ["c", "i"])
def test_emit_of_invariant_in_loop(channel: str) -> None:
    # a channel bound before a loop (or a walk input) emitted in it: once per iteration (a
    # sink unit of the loop, `SinkSpec`)
    check(_loop_emitting(channel), ONE_RANK, REQUEST)


def _two_loops(second: str) -> str:
    return HEAD + (
        "walk w(i?: f32[4]) {\n  N0(a = i) -> k = x\n"
        "  loop A max 3 { N0(a = k) -> k = x } yield last k\n"
        f"  {second}\n}}\nflow main {{ w() }}\n"
    )


@pytest.mark.parametrize(
    "second",
    [
        # `k` is A's last value: B's carried init (plan: Dest(edge='terminal', loop='A') into
        # B's carried port, which takes it as iteration 0's value once A has ended)
        "loop B max 3 { N1(a = k) -> k = x } yield last k\n  emit k as tensor",
        # ... and emitted in B before B rebinds it: iteration 0 emits A's last value
        "loop B max 3 { emit k as text  N1(a = k) -> k = x } yield last k",
    ],
    ids=["carried_init", "carried_emit"],
)
def test_loop_reads_an_earlier_loops_yield(second: str) -> None:
    check(_two_loops(second), ONE_RANK, REQUEST)


def test_loop_invariant_from_an_earlier_loops_yield() -> None:
    # B's invariant is A's last value: the IR marks the edge via=terminal of A, so the plan
    # routes it once, when A has ended
    second = "loop B max 3 { N1(a = k) -> z = x  emit z as tensor } yield last z"
    check(_two_loops(second), ONE_RANK, REQUEST)


SPECULATION = (
    HEAD
    + """walk w(g?: f32[4]) {
  N1(a = g) -> b1 = x
  N1(a = g) -> b2 = x
  N1(a = g) -> b3 = x
  N1(a = b2) -> b4 = x
  N1(a = g) -> b5 = x
  loop L1 max 3 {
    N1(a = b5) -> b5 = x
    N0(a = b4) -> b6 = x
  } yield last b5, b6
  loop L2 max 3 until st {
    N0(a = g) -> b8 = x
    N1(a = b1) -> st = s
  } yield last b8
  emit b8 as text
}
flow main { w() }
"""
)
TWO_RANKS = (
    "devices: [cpu, cpu]\nplace:\n  - {nodes: [N0], ranks: [1]}\n  - {nodes: [N1], ranks: [0]}\n"
)


def test_speculation_across_ranks_deadlocks() -> None:
    # was: discarding L2's speculative iteration 2 also killed sibling loop L1's call at
    # iteration 2 (same iteration prefix), so L1 never ended on rank 1
    check(SPECULATION, TWO_RANKS, [([], ["text"], {"stop_at": 2})])


def test_speculation_across_ranks_nospeculate_is_fine() -> None:
    check(SPECULATION.replace("until st", "until st nospeculate"), TWO_RANKS, REQUEST)


def test_independent_producer_calls_push_in_statement_order() -> None:
    # items of one stream from one walk instance are pushed in statement order
    check(
        HEAD + STREAM + "walk w(i?: f32[4]) { N0(a = i) -> c = x  P(a = c)  P(a = c)  persist c }\n"
        "flow main { w() }\n",
        "devices: [cpu]\nplace:\n  - {nodes: [N0, P, C], ranks: [0]}\n",
        REQUEST,
    )


NESTED_YIELD = (
    HEAD
    + """node K: kv_cache { impl "generic_nodes:Generic" in a: f32[4] out x: f32[4] }
walk w(i?: f32[4]) {
  K(a = i) -> h = x
  loop outer max 3 until st {
    emit h as image
    N1(a = h) -> g = x, st = s
    loop inner max 3 until s2 {
      K(a = g) -> h = x
      N0(a = g) -> s2 = s
    } yield last h
    emit h as tensor
  } yield last h
  emit h as text
}
flow main { w() }
"""
)


@pytest.mark.parametrize(
    "placement",
    [
        "devices: [cpu]\nplace:\n  - {nodes: [N0, N1, K], ranks: [0]}\n",
        "devices: [cpu, cpu]\nplace:\n  - {nodes: [N0, K], ranks: [0]}\n"
        "  - {nodes: [N1], ranks: [1]}\n",
        "devices: [cpu, cpu]\nplace:\n  - {nodes: [N1, K], ranks: [1]}\n"
        "  - {nodes: [N0], ranks: [0]}\n",
    ],
    ids=["one_rank", "two_ranks", "two_ranks_swapped"],
)
def test_inner_yield_feeds_the_outer_carry(placement: str) -> None:
    # was a deadlock behind a clean `wgc check`: the inner loop's `yield last h` is the outer
    # loop's next `h` (a terminal destination into a carried port, tagged with the outer
    # iteration), which the executor kept as the outer loop's *initial* value, so iteration 1
    # of `outer` waited for ever
    reqs = [(inputs, want, {"stop_at": s}) for (inputs, want, _) in REQUEST for s in (1, 2, 3)]
    check(NESTED_YIELD, placement, reqs)


NESTED_YIELD_EMIT = (
    HEAD
    + """node N2: stateless { impl "generic_nodes:Generic" in a: f32[4] out x: f32[4] }
walk w(i?: f32[4]) {
  N0(a = i) -> h = x
  loop outer max 3 {
    loop side max 2 {
      emit h as tensor
      N2(a = i) -> g = x
    } yield last g
    N0(a = i) -> c = x
    loop inner max 2 {
      N0(a = c) -> c = x
      N1(a = c) -> h = x
    } yield last h, c
  } yield last h
  emit h as text
}
flow main { w() }
"""
)


@pytest.mark.parametrize(
    "placement",
    [
        "devices: [cpu]\nplace:\n  - {nodes: [N0, N1, N2], ranks: [0]}\n",
        "devices: [cpu, cpu]\nplace:\n  - {nodes: [N0, N1], ranks: [0]}\n"
        "  - {nodes: [N2], ranks: [1]}\n",
    ],
    ids=["one_rank", "two_ranks"],
)
def test_an_emit_of_the_outer_carry_waits_for_the_inner_loops_last_value(placement: str) -> None:
    # found by WGC_PROPERTY_NESTED=1000: an `emit` in a sibling loop of the outer loop's carried
    # `h`, which a nested loop's `yield last` rebinds, took the nested loop's *first* value on
    # two ranks (the sink's destination dropped the yield: every inner iteration's `h` went out
    # as the outer loop's next value, and the first to arrive was emitted)
    check(NESTED_YIELD_EMIT, placement, REQUEST)


PARAM_FLOW = (
    HEAD
    + """param draft_tokens = 1
param use_draft = true
param drafter = "small"
walk draft(i?: f32[4]) {
  N0(a = i) -> h = x
  loop steps max draft_tokens { N1(a = h) -> h = x  emit h as tensor } yield last h
  emit h as text
}
walk plain(i?: f32[4]) { N0(a = i) -> h = x  emit h as text }
flow main {
  if use_draft and draft_tokens >= 1 { draft() } else { plain() }
  if drafter == "mtp" or not use_draft { plain() }
}
"""
)


@pytest.mark.parametrize(
    "params",
    ["", "params: {draft_tokens: 3}\n", "params: {use_draft: false, drafter: mtp}\n"],
    ids=["defaults", "k3", "no_draft"],
)
def test_params_decide_flow_conditions_and_a_loop_bound_of_one(params: str) -> None:
    # a `param` is a flow condition (folded per placement, the interpreter reads the same
    # values), and `max draft_tokens` with draft_tokens = 1 is a loop of one iteration
    check(PARAM_FLOW, ONE_RANK + params, REQUEST)
