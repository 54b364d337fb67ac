"""Stream chunking: exact chunk sequences for every policy × final mode × stream length, the
same sequence under any interleaving of producer and consumer (timing never changes chunks),
back-pressure, `after_done continue`, and hypothesis properties."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tests.narrow import present
from wgc_runtime.core.streams import (
    Policy,
    StreamBuffer,
    StreamEnded,
    StreamError,
    StreamFull,
    chunk_plan,
    min_capacity,
)

# W is the chunk size: k, window, chunk. Lengths: 0, 1, W−1, W, W+1, 2W, 3W+1.
POLICIES = {
    "fixed": (Policy.of("fixed", k=3), 3),
    "sliding": (Policy.of("sliding", window=4, stride=2), 4),
    "left_context": (Policy.of("left_context", chunk=3, left=2), 3),
}

# Expected chunks as "start-end" item ranges; "*" marks the final chunk, "e" an empty chunk.
# Derived by hand from the rule: every full chunk as soon as its last item exists, never final;
# then exactly one final chunk: the residual (partial / pad) or, without one, an empty chunk
# (always empty under drop).
EXPECTED = {
    # fixed(k=3): full chunks [0,3) [3,6) [6,9); residual [3m, n)
    ("fixed", "partial"): {
        0: "e*",
        1: "0-1*",
        2: "0-2*",
        3: "0-3 e*",
        4: "0-3 3-4*",
        6: "0-3 3-6 e*",
        10: "0-3 3-6 6-9 9-10*",
    },
    ("fixed", "drop"): {
        0: "e*",
        1: "e*",
        2: "e*",
        3: "0-3 e*",
        4: "0-3 e*",
        6: "0-3 3-6 e*",
        10: "0-3 3-6 6-9 e*",
    },
    # sliding(window=4, stride=2): windows [0,4) [2,6) [4,8) [6,10) [8,12); residual [2m, n)
    # when the last window does not reach n
    ("sliding", "partial"): {
        0: "e*",
        1: "0-1*",
        3: "0-3*",
        4: "0-4 e*",
        5: "0-4 2-5*",
        8: "0-4 2-6 4-8 e*",
        13: "0-4 2-6 4-8 6-10 8-12 10-13*",
    },
    ("sliding", "drop"): {
        0: "e*",
        1: "e*",
        3: "e*",
        4: "0-4 e*",
        5: "0-4 e*",
        8: "0-4 2-6 4-8 e*",
        13: "0-4 2-6 4-8 6-10 8-12 e*",
    },
    # left_context(chunk=3, left=2): chunks [0,3) [1,6) [4,9); residual [max(0, 3m-2), n)
    ("left_context", "partial"): {
        0: "e*",
        1: "0-1*",
        2: "0-2*",
        3: "0-3 e*",
        4: "0-3 1-4*",
        6: "0-3 1-6 e*",
        10: "0-3 1-6 4-9 7-10*",
    },
    ("left_context", "drop"): {
        0: "e*",
        1: "e*",
        2: "e*",
        3: "0-3 e*",
        4: "0-3 e*",
        6: "0-3 1-6 e*",
        10: "0-3 1-6 4-9 e*",
    },
}
# `pad` delivers the same item ranges as `partial`; only the sizes differ.
for _policy in POLICIES:
    EXPECTED[(_policy, "pad")] = EXPECTED[(_policy, "partial")]

CASES = [(p, f, n) for (p, f), table in sorted(EXPECTED.items()) for n in table]


def _parse(spec: str) -> list[tuple[int, int, bool]]:
    out = []
    for tok in spec.split():
        final = tok.endswith("*")
        tok = tok.rstrip("*")
        if tok == "e":
            out.append((-1, -1, final))
        else:
            a, b = tok.split("-")
            out.append((int(a), int(b), final))
    return out


def _buffer(policy: Policy, final: str, **kw) -> StreamBuffer:
    return StreamBuffer(policy, final, item_shape=(), dtype=torch.int64, **kw)


def _drain_all(buf: StreamBuffer, n: int) -> list:
    """Schedule A: every item first, then done, then take everything."""
    for i in range(n):
        buf.push(torch.tensor(i))
    buf.done()
    return _drain(buf)


def _drain(buf: StreamBuffer) -> list:
    chunks = []
    while not buf.ended:
        c = buf.take()
        assert c is not None, "a done stream always has its next chunk ready"
        chunks.append(c)
    return chunks


def _interleaved(buf: StreamBuffer, n: int) -> list:
    """Schedule B: take whatever is ready after every push."""
    chunks = []
    for i in range(n):
        buf.push(torch.tensor(i))
        while buf.ready():
            chunks.append(buf.take())
    buf.done()
    return chunks + _drain(buf)


def _backpressured(buf: StreamBuffer, n: int) -> list:
    """Schedule C: the producer pushes until the buffer is full; the consumer then takes one."""
    chunks, i = [], 0
    while i < n:
        if buf.can_push():
            buf.push(torch.tensor(i))
            i += 1
        else:
            c = buf.take()
            assert c is not None, "a full buffer must be able to deliver a chunk"
            chunks.append(c)
    buf.done()
    return chunks + _drain(buf)


def _check(chunks, expected, policy: Policy, final: str) -> None:
    got = [
        (
            -1 if c.info.empty else c.info.start,
            -1 if c.info.empty else c.info.start + c.info.items,
            c.info.final,
        )
        for c in chunks
    ]
    assert got == expected
    for j, c in enumerate(chunks):
        assert c.info.index == j
        start, end = c.info.start, c.info.start + c.info.items
        assert c.info.valid == end - start
        padded = final == "pad" or (final == "drop" and c.info.empty)
        size = policy.full if padded else end - start
        assert c.info.size == size == c.data.shape[0]
        assert c.data[: c.info.valid].tolist() == list(range(start, end))
        assert c.data[c.info.valid :].eq(0).all()


@pytest.mark.parametrize(("policy", "final", "n"), CASES)
@pytest.mark.parametrize("schedule", [_drain_all, _interleaved, _backpressured])
def test_exact_chunk_sequences(policy, final, n, schedule):
    pol, _ = POLICIES[policy]
    expected = _parse(EXPECTED[(policy, final)][n])
    cap = min_capacity(pol, final) if schedule is _backpressured else None
    _check(schedule(_buffer(pol, final, capacity=cap), n), expected, pol, final)


@pytest.mark.parametrize(("policy", "final", "n"), CASES)
def test_closed_form_matches_table(policy, final, n):
    pol, _ = POLICIES[policy]
    plan = [((-1, -1) if a == b else (a, b)) + (f,) for a, b, f in chunk_plan(pol, final, n)]
    assert plan == _parse(EXPECTED[(policy, final)][n])


def test_table_covers_the_required_lengths():
    for (policy, _), table in EXPECTED.items():
        w = POLICIES[policy][1]
        assert sorted(table) == sorted({0, 1, w - 1, w, w + 1, 2 * w, 3 * w + 1})


def test_left_context_pad_pads_the_first_chunk():
    buf = _buffer(Policy.of("left_context", chunk=3, left=2), "pad")
    for i in range(4):
        buf.push(torch.tensor(i))
    c = present(buf.take())
    assert (c.info.valid, c.info.size, c.data.tolist()) == (3, 5, [0, 1, 2, 0, 0])
    assert not c.info.final


def test_a_full_chunk_is_delivered_as_soon_as_its_last_item_exists():
    buf = _buffer(Policy.of("fixed", k=2), "partial")
    buf.push(torch.tensor(0))
    assert buf.take() is None
    buf.push(torch.tensor(1))
    first = present(buf.take())  # no later item needed: a full chunk is never the final one
    assert (first.data.tolist(), first.info.final) == ([0, 1], False)
    buf.done()
    last = present(buf.take())
    assert (last.info.start, last.info.valid, last.info.final, last.data.shape) == (
        2,
        0,
        True,
        (0,),
    )
    assert buf.ended


def test_drop_delivers_each_window_at_once_and_ends_with_an_empty_final_chunk():
    buf = _buffer(Policy.of("sliding", window=4, stride=2), "drop")
    for i in range(4):
        buf.push(torch.tensor(i))
    assert present(buf.take()).data.tolist() == [0, 1, 2, 3]
    buf.push(torch.tensor(4))
    assert not buf.ready()  # window [2, 6) still needs item 5
    buf.done()  # item 4 is a dropped residual
    last = present(buf.take())
    assert (last.info.valid, last.info.size, last.info.final) == (0, 4, True)
    assert last.data.tolist() == [0, 0, 0, 0]


def test_pad_without_a_residual_ends_with_a_full_size_empty_chunk():
    buf = _buffer(Policy.of("left_context", chunk=2, left=1), "pad")
    for i in range(4):
        buf.push(torch.tensor(i))
    assert [c.data.tolist() for c in (present(buf.take()), present(buf.take()))] == [
        [0, 1, 0],
        [1, 2, 3],
    ]
    assert buf.take() is None
    buf.done()
    last = present(buf.take())
    assert (last.info.start, last.info.valid, last.info.size, last.info.final) == (4, 0, 3, True)
    assert last.data.tolist() == [0, 0, 0]


def test_the_residual_is_the_final_chunk():
    buf = _buffer(Policy.of("fixed", k=3), "pad")
    for i in range(4):
        buf.push(torch.tensor(i))
    assert present(buf.take()).info.final is False
    assert buf.take() is None  # item 3 may still be followed by others
    buf.done()
    last = present(buf.take())
    assert (last.data.tolist(), last.info.valid, last.info.final) == ([3, 0, 0], 1, True)


def test_after_done_continue_offers_empty_chunks():
    buf = _buffer(Policy.of("fixed", k=1), "pad", after_done=True)
    buf.push(torch.tensor(7))
    buf.done()
    first = present(buf.take())
    assert (first.data.tolist(), first.info.final) == ([7], False)
    final = present(buf.take())  # no residual: an empty final chunk, full size under pad
    assert (final.info.valid, final.info.size, final.info.final) == (0, 1, True)
    assert not final.info.after_done and final.data.tolist() == [0]
    for j in (2, 3, 4):
        c = present(buf.take())
        assert (c.info.index, c.info.valid, c.info.size, c.info.final) == (j, 0, 1, False)
        assert c.info.after_done and c.data.tolist() == [0]
    assert not buf.ended


def test_after_done_continue_partial_offers_zero_rows():
    buf = _buffer(Policy.of("fixed", k=2), "partial", after_done=True)
    buf.done()
    assert present(buf.take()).info.final
    assert present(buf.take()).data.shape == (0,)


def test_take_after_the_end_raises():
    buf = _buffer(Policy.of("fixed", k=1), "partial")
    buf.done()
    assert present(buf.take()).info.final
    with pytest.raises(StreamEnded):
        buf.take()


def test_push_when_full_raises_and_after_done_raises():
    pol = Policy.of("fixed", k=2)
    assert min_capacity(pol, "partial") == min_capacity(pol, "drop") == 2  # one full chunk
    buf = _buffer(pol, "partial", capacity=min_capacity(pol, "partial"))
    for i in range(2):
        buf.push(torch.tensor(i))
    assert not buf.can_push()
    with pytest.raises(StreamFull):
        buf.push(torch.tensor(2))
    assert present(buf.take()).data.tolist() == [0, 1]
    assert buf.can_push()
    buf.done()
    with pytest.raises(StreamError):
        buf.push(torch.tensor(3))


def test_capacity_below_one_chunk_is_rejected():
    with pytest.raises(ValueError):
        _buffer(Policy.of("sliding", window=4, stride=1), "partial", capacity=3)


def test_items_with_a_leading_dim_concatenate_on_dim_0():
    buf = StreamBuffer(Policy.of("fixed", k=2), "pad", item_shape=(1, 3), dtype=torch.float32)
    buf.push(torch.ones(1, 3))
    buf.done()
    c = present(buf.take())
    assert c.data.shape == (2, 3) and (c.info.valid, c.info.size) == (1, 2)


def test_memory_is_bounded_by_what_future_chunks_need():
    buf = _buffer(Policy.of("sliding", window=4, stride=1), "partial")
    for i in range(100):
        buf.push(torch.tensor(i))
        while buf.ready():
            buf.take()
    assert len(buf._items) <= min_capacity(buf.policy, "partial")


def test_bad_policies_are_rejected():
    with pytest.raises(ValueError):
        Policy.of("fixed", k=0)
    with pytest.raises(ValueError):
        Policy.of("sliding", window=2, stride=3)
    with pytest.raises(ValueError):
        Policy.of("left_context", chunk=1)


# ---------------------------------------------------------------------------- properties

policies = st.one_of(
    st.builds(lambda k: Policy.of("fixed", k=k), st.integers(1, 5)),
    st.integers(1, 5).flatmap(
        lambda w: st.builds(lambda s: Policy.of("sliding", window=w, stride=s), st.integers(1, w))
    ),
    st.builds(
        lambda c, left: Policy.of("left_context", chunk=c, left=left),
        st.integers(1, 4),
        st.integers(0, 5),
    ),
)


def _run_schedule(policy, final, n, steps, capacity):
    """Push n items and take chunks in the order ``steps`` says (True: try to push), then done."""
    buf = _buffer(policy, final, capacity=capacity)
    chunks, i = [], 0
    for push in steps:
        if push and i < n and buf.can_push():
            buf.push(torch.tensor(i))
            i += 1
        elif buf.ready():
            chunks.append(buf.take())
    while i < n:
        if buf.can_push():
            buf.push(torch.tensor(i))
            i += 1
        else:
            chunks.append(buf.take())
    buf.done()
    return chunks + _drain(buf)


@given(
    policy=policies,
    final=st.sampled_from(["partial", "pad", "drop"]),
    n=st.integers(0, 30),
    steps=st.lists(st.booleans(), max_size=80),
    extra=st.integers(0, 4),
)
def test_properties(policy, final, n, steps, extra):
    capacity = min_capacity(policy, final) + extra
    chunks = _run_schedule(policy, final, n, steps, capacity)
    # timing never changes the chunks
    plan = chunk_plan(policy, final, n)
    assert [(c.info.start, c.info.start + c.info.items, c.info.final) for c in chunks] == [
        (a if a != b else n, b if a != b else n, f) for a, b, f in plan
    ]
    # exactly one final chunk, and it is the last
    assert [c.info.final for c in chunks].count(True) == 1 and chunks[-1].info.final
    # every other chunk is a full chunk, in order; the final one is the residual or empty
    m = policy.full_chunks(n)
    assert len(chunks) == m + 1
    for j, c in enumerate(chunks[:-1]):
        assert (c.info.start, c.info.start + c.info.items) == policy.span(j)
    last, residual = chunks[-1].info, policy.residual(n)
    if final == "drop" or residual is None:
        assert last.empty and last.valid == 0
        assert last.size == (0 if final == "partial" else policy.full)
    else:
        assert (last.start, last.start + last.items) == residual
        assert last.size == (policy.full if final == "pad" else last.valid)
    # every item appears, in order: the new items of each chunk continue where the last ended
    seen: list[int] = []
    for c in chunks:
        values = c.data[: c.info.valid].tolist()
        assert values == list(range(c.info.start, c.info.start + c.info.items))
        seen += [v for v in values if not seen or v > seen[-1]]
    covered = n if final != "drop" else (policy.span(m - 1)[1] if m else 0)
    assert seen == list(range(covered))
    # left_context: chunk j ≥ 1 repeats min(L, j·C) items of context
    if policy.kind == "left_context":
        c_, left = policy.get("chunk"), policy.get("left")
        for j, c in enumerate(chunks[1:], start=1):
            if not c.info.empty:
                assert c.info.start == max(0, j * c_ - left)
                prev_end = chunks[j - 1].info.start + chunks[j - 1].info.items
                assert prev_end - c.info.start == min(left, j * c_)


@given(policy=policies, final=st.sampled_from(["partial", "pad", "drop"]), n=st.integers(0, 30))
def test_full_chunks_have_no_latency(policy, final, n):
    """After each push, every full chunk the items so far complete is ready and not final."""
    buf = _buffer(policy, final, capacity=min_capacity(policy, final))
    taken = []
    for i in range(n):
        buf.push(torch.tensor(i))
        while buf.ready():
            taken.append(buf.take())
        assert len(taken) == policy.full_chunks(i + 1)
        assert not any(c.info.final for c in taken)
    buf.done()
    assert buf.ready() and present(buf.take()).info.final
